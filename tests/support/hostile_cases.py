"""The hostile-input campaign: kinds of bad input an operator's datasets,
configs, checkpoints and commands meet, each with the error it must give.

Every case builds its input in a fresh directory and runs one call; the
outcome is one of:

    clear   the expected error type, and its message names the file or key
    unclear another exception type, or a message that names nothing
    silent  no error at all
    hang    no answer within HANG_SECONDS

tests/test_hostile.py asserts every case is "clear"; running this file
prints the campaign's counts:  python tests/support/hostile_cases.py
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import gzip
import io
import json
import os
import signal
import sys
import tempfile
import zlib
from collections.abc import Callable
from typing import Any

import numpy as np
import orbax.checkpoint as ocp
import zstandard
from array_record.python.array_record_module import ArrayRecordWriter

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import jaxdata
from flat_fixtures import lying_megatron, random_documents, write_flat, write_megatron
from jaxdata.checkpoint import seal
from jaxdata.cli import main as cli
from jaxdata.conversion.local_runner import convert
from jaxdata.conversion.options import ConvertOptions
from jaxdata.demo.ablate import load_candidate
from jaxdata.integrations.grain_mixture import MixtureDataset
from jaxdata.integrations.levanter import levanter_chat_options
from jaxdata.integrations.maxtext import maxtext_config
from jaxdata.integrations.megatron import megatron_config
from jaxdata.research.mixing import doremi_average
from jaxdata.research.online import DoReMiController, EXP3Controller
from jaxdata.sources.boundaries import DocumentBoundaries
from jaxdata.sources.fileutil import claim_directory, clear_claimed
from jaxdata.sources.flat_index import build_flat_index
from jaxdata.sources.opening import open_dataset
from pipeline_fixtures import write_coded_dataset
from record_fixtures import example, write_tfrecord

HANG_SECONDS = 20
OUR_ERRORS = (jaxdata.DatasetError, jaxdata.ConfigError, jaxdata.CheckpointError, jaxdata.InputFormatError)


@dataclasses.dataclass(frozen=True)
class Case:
  name: str
  run: Callable[[str], Any]  # given a fresh directory; expected to raise
  error: type | tuple[type, ...]
  names: str  # a substring the message must contain: the file or key at fault


def _dataset(root: str, name: str = "d0", lengths: list[int] | None = None) -> str:
  path = os.path.join(root, name)
  write_coded_dataset(path, 0, lengths or [5, 9, 3, 7] * 10)
  return path


def _edit_manifest(root: str, edit: Callable[[dict], Any]) -> str:
  path = _dataset(root)
  manifest = json.load(open(os.path.join(path, "manifest.json")))
  edit(manifest)
  json.dump(manifest, open(os.path.join(path, "manifest.json"), "w"))
  return path


def _manifest_fingerprint(manifest: dict) -> str:
  shards = [jaxdata.sources.ShardInfo(**{k: v for k, v in s.items()}) for s in manifest["shards"]]
  return jaxdata.sources.Manifest(
    manifest["name"],
    manifest["dtype"],
    manifest["tokenizer"],
    tuple(shards),
    format=manifest.get("format", "arrayrecord"),
  ).fingerprint


def _resealed_manifest(root: str, edit: Callable[[dict], Any]) -> str:
  """A manifest edited consistently (its fingerprint recomputed): what a tool, not a typo, writes."""

  def both(manifest: dict) -> None:
    edit(manifest)
    manifest["fingerprint"] = _manifest_fingerprint(manifest)

  return _edit_manifest(root, both)


def _open(path: str) -> None:
  jaxdata.sources.TokenDataset(path).close()


def _config(root: str, text: str | bytes) -> Any:
  path = os.path.join(root, "pipeline.yaml")
  with open(path, "wb") as f:
    f.write(text.encode() if isinstance(text, str) else text)
  return jaxdata.load_config(path)


def _cli(*argv: str) -> None:
  """Runs the CLI; its error becomes an exception carrying what it printed."""
  err = io.StringIO()
  with contextlib.redirect_stderr(err):
    code = cli(list(argv))
  if code != 0:
    raise CliError(err.getvalue())


class CliError(Exception):
  """A command that exited non-zero, with its stderr."""


def _raw_shard(path: str, records: list[bytes]) -> str:
  writer = ArrayRecordWriter(path, "group_size:1")
  for record in records:
    writer.write(record)
  writer.close()
  return path


def _pipeline_state(root: str) -> tuple[jaxdata.PipelineConfig, dict]:
  path = _dataset(root)
  cfg = jaxdata.PipelineConfig.from_dict(
    {
      "datasets": [{"name": "d0", "path": path}],
      "mixture": {"weights": {"d0": 1}},
      "exhausted_policy": "repeat",
      "packing": {"seq_len": 8},
      "batch": {"global_batch_size": 2},
    }
  )
  with jaxdata.Pipeline(cfg, prefetch=0) as pipe:
    next(pipe)
    return cfg, pipe.get_state()


def _restore(root: str, edit: Callable[[dict], Any], reseal: bool = False) -> None:
  cfg, state = _pipeline_state(root)
  edit(state)
  with jaxdata.Pipeline(cfg, prefetch=0) as pipe:
    pipe.set_state(seal(state) if reseal else state)


def _set(path: list[Any], value: Any) -> Callable[[dict], None]:
  def edit(state: dict) -> None:
    target = state
    for key in path[:-1]:
      target = target[key]
    target[path[-1]] = value

  return edit


def _damaged_parquet(root: str) -> str:
  import pyarrow as pa  # noqa: PLC0415 -- only this case needs pyarrow
  import pyarrow.parquet as pq  # noqa: PLC0415

  path = os.path.join(root, "p.parquet")
  pq.write_table(
    pa.table({"text": [f"document number {i} " * 20 for i in range(2000)]}),
    path,
    row_group_size=500,
    compression="NONE",
  )
  data = bytearray(open(path, "rb").read())
  middle = len(data) // 2
  data[middle : middle + 4000] = os.urandom(4000)
  open(path, "wb").write(bytes(data))
  return path


def _index_and_check_clean(root: str) -> None:
  good = _raw_shard(os.path.join(root, "good.array_record"), [b"\x01\x00\x02\x00"] * 5)
  bad = _raw_shard(os.path.join(root, "bad.array_record"), [b"\x01\x00", b"\x01"])
  try:
    jaxdata.sources.build_index([good, bad], "uint16")
  finally:
    left = [n for n in os.listdir(root) if n.endswith(".lengths.npy") or n == "manifest.json"]
    if left:
      raise AssertionError(f"a failed index left {left} behind")


def _flat_index(root: str, **options: Any) -> Any:
  """A flat uint16 file of 60 documents ending in id 0, indexed with `options`."""
  rng = np.random.default_rng(0)
  write_flat(os.path.join(root, "a.bin"), random_documents(rng, 60, eos_id=0, max_length=30))
  return build_flat_index("flat", [os.path.join(root, "a.bin")], dtype="uint16", **options)


def _linked_flat(root: str) -> None:
  """The dataset's token file moved out of its directory and linked back in."""
  data = os.path.join(root, "ds")
  os.makedirs(data)
  _flat_index(data, boundaries=DocumentBoundaries.eos(0))
  os.replace(os.path.join(data, "a.bin"), os.path.join(root, "a.bin"))
  os.symlink(os.path.join(root, "a.bin"), os.path.join(data, "a.bin"))
  open_dataset(data).close()


def _foreign_data_root(root: str) -> None:
  """A manifest edited (and resealed) to read /etc/passwd as tokens: refused without telling its size."""
  _flat_index(root, boundaries=DocumentBoundaries.eos(0))
  manifest = json.load(open(os.path.join(root, "manifest.json")))
  manifest["data_root"] = "/etc"
  manifest["shards"][0]["path"] = "passwd"
  manifest["fingerprint"] = _manifest_fingerprint(manifest)
  json.dump(manifest, open(os.path.join(root, "manifest.json"), "w"))
  try:
    open_dataset(root).close()
  except jaxdata.DatasetError as e:
    if str(os.path.getsize("/etc/passwd")) in str(e):
      raise AssertionError(f"the error tells the size of /etc/passwd: {e}") from e
    raise


def _tampered_flat_index(root: str, name: str) -> None:
  """Swaps documents 3 and 4 of one index file (the other left as written), then opens the dataset."""
  _flat_index(root, boundaries=DocumentBoundaries.eos(0))
  values = np.load(os.path.join(root, name))
  values[[3, 4]] = values[[4, 3]]
  np.save(os.path.join(root, name), values)
  open_dataset(root).close()


def _lying_megatron(root: str, stored: Any, claimed_code: int) -> None:
  rng = np.random.default_rng(1)
  lying_megatron(
    os.path.join(root, "m"),
    [rng.integers(1, 361, 2 * int(rng.integers(1, 40))).tolist() for _ in range(300)],
    np.dtype(stored),
    claimed_code,
  )
  build_flat_index("megatron", [os.path.join(root, "m")])


def _small_config(root: str) -> str:
  path = os.path.join(root, "small.yaml")
  with open(path, "w") as f:
    f.write(
      f"datasets: [{{name: d0, path: {_dataset(root)}}}]\nmixture: {{weights: {{d0: 1}}}}\n"
      "exhausted_policy: repeat\npacking: {seq_len: 16}\nbatch: {global_batch_size: 16}\n"
    )
  return path


def _bomb() -> str:
  lines = ["a: &a [x,x,x,x,x,x,x,x,x]"]
  for i in range(1, 9):
    prev, name = chr(96 + i), chr(97 + i)
    lines.append(f"{name}: &{name} [" + ",".join([f"*{prev}"] * 9) + "]")
  return "\n".join(lines) + "\ndatasets: *i\nmixture: {}\n"


BASE_YAML = "datasets: [{name: a}]\nmixture: {weights: {a: 1}}\n"

CASES = [
  # --- datasets and manifests
  Case(
    "manifest is not JSON",
    lambda r: (open(os.path.join(_dataset(r), "manifest.json"), "w").write("{"), _open(os.path.join(r, "d0"))),
    jaxdata.DatasetError,
    "manifest.json",
  ),
  Case(
    "manifest is not UTF-8",
    lambda r: (
      open(os.path.join(_dataset(r), "manifest.json"), "wb").write(b'{"name": "\xff"}'),
      _open(os.path.join(r, "d0")),
    ),
    jaxdata.DatasetError,
    "manifest.json",
  ),
  Case(
    "manifest nested 100k deep",
    lambda r: (
      open(os.path.join(_dataset(r), "manifest.json"), "w").write("[" * 100_000 + "]" * 100_000),
      _open(os.path.join(r, "d0")),
    ),
    jaxdata.DatasetError,
    "manifest.json",
  ),
  Case(
    "manifest without fingerprint",
    lambda r: _open(_edit_manifest(r, lambda m: m.pop("fingerprint"))),
    jaxdata.DatasetError,
    "'fingerprint'",
  ),
  Case(
    "manifest shard count edited",
    lambda r: _open(_edit_manifest(r, lambda m: m["shards"][0].update(num_records=1))),
    jaxdata.DatasetError,
    "manifest.json",
  ),
  Case(
    "shard path escapes with ..",
    lambda r: _open(_resealed_manifest(r, lambda m: m["shards"][0].update(path="../other/x.array_record"))),
    jaxdata.DatasetError,
    "shards[0].path",
  ),
  Case(
    "absolute shard path",
    lambda r: _open(_resealed_manifest(r, lambda m: m["shards"][0].update(path="/etc/passwd"))),
    jaxdata.DatasetError,
    "shards[0].path",
  ),
  Case(
    "lengths path escapes",
    lambda r: _open(_resealed_manifest(r, lambda m: m["shards"][0].update(lengths_path="../../x.npy"))),
    jaxdata.DatasetError,
    "shards[0].lengths_path",
  ),
  Case(
    "dtype field of the wrong type",
    lambda r: _open(_edit_manifest(r, lambda m: m.update(dtype=16))),
    jaxdata.DatasetError,
    "'dtype'",
  ),
  Case(
    "shard file missing",
    lambda r: (os.remove(os.path.join(_dataset(r), "d0-00000.array_record")), _open(os.path.join(r, "d0"))),
    jaxdata.DatasetError,
    "d0-00000.array_record",
  ),
  Case(
    "shard truncated",
    lambda r: (os.truncate(os.path.join(_dataset(r), "d0-00000.array_record"), 10), _open(os.path.join(r, "d0"))),
    jaxdata.DatasetError,
    "d0-00000.array_record",
  ),
  Case(
    "shard overwritten, same size",
    lambda r: (
      open(os.path.join(_dataset(r), "d0-00000.array_record"), "r+b").write(b"\0" * 64),
      _open(os.path.join(r, "d0")),
    ),
    jaxdata.DatasetError,
    "d0-00000.array_record",
  ),
  Case(
    "lengths index zero bytes",
    lambda r: (open(os.path.join(_dataset(r), "d0-00000.lengths.npy"), "w").close(), _open(os.path.join(r, "d0"))),
    jaxdata.DatasetError,
    "d0-00000.lengths.npy",
  ),
  Case(
    "lengths index uint64",
    lambda r: (
      np.save(
        os.path.join(_dataset(r), "d0-00000.lengths.npy"),
        np.load(os.path.join(r, "d0", "d0-00000.lengths.npy")).astype(np.uint64),
      ),
      _open(os.path.join(r, "d0")),
    ),
    jaxdata.DatasetError,
    "d0-00000.lengths.npy",
  ),
  Case(
    "lengths index of the wrong size",
    lambda r: (
      np.save(os.path.join(_dataset(r), "d0-00000.lengths.npy"), np.ones(3, np.uint32)),
      _open(os.path.join(r, "d0")),
    ),
    jaxdata.DatasetError,
    "d0-00000.lengths.npy",
  ),
  # --- configs
  Case("YAML alias bomb", lambda r: _config(r, _bomb()), jaxdata.ConfigError, "aliases"),
  Case("a key given twice", lambda r: _config(r, BASE_YAML + "seed: 1\nseed: 2\n"), jaxdata.ConfigError, "'seed'"),
  Case("config not UTF-8", lambda r: _config(r, b"seed: \xff\n"), jaxdata.ConfigError, "pipeline.yaml"),
  Case("config over 1 MiB", lambda r: _config(r, BASE_YAML + "#" * (1 << 20)), jaxdata.ConfigError, "pipeline.yaml"),
  Case(
    "a timestamp where an int belongs",
    lambda r: _config(r, BASE_YAML + "seed: 2001-12-14\n"),
    jaxdata.ConfigError,
    "seed",
  ),
  Case(
    "dataset without a name",
    lambda r: _config(r, "datasets: [{path: x}]\nmixture: {weights: {a: 1}}\n"),
    jaxdata.ConfigError,
    "'name'",
  ),
  Case(
    "unknown keys of two types", lambda r: _config(r, BASE_YAML + "1: x\nfoo: y\n"), jaxdata.ConfigError, "unknown key"
  ),
  Case(
    "an int weight beyond float range",
    lambda r: _config(r, "datasets: [{name: a}, {name: b}]\nmixture: {weights: {a: 1" + "0" * 400 + ", b: 1}}\n"),
    jaxdata.ConfigError,
    "weight of 'a'",
  ),
  Case(
    "pad_id beyond int32",
    lambda r: _config(r, BASE_YAML + "packing: {pad_id: 2147483648}\n"),
    jaxdata.ConfigError,
    "packing.pad_id",
  ),
  Case(
    "10^12 tokens per step",
    lambda r: _config(r, BASE_YAML + "packing: {seq_len: 1000000}\nbatch: {global_batch_size: 1000000}\n"),
    jaxdata.ConfigError,
    "batch.global_batch_size",
  ),
  Case(
    "a mapping where a list belongs",
    lambda r: _config(r, "datasets: {name: a}\nmixture: {weights: {a: 1}}\n"),
    jaxdata.ConfigError,
    "datasets",
  ),
  Case(
    "a huge value in an error",
    lambda r: _config(r, BASE_YAML + "seed: [" + "1," * 100_000 + "1]\n"),
    jaxdata.ConfigError,
    "seed",
  ),
  Case(
    "stats_path at a file that is not ours",
    lambda r: jaxdata.Pipeline(
      dataclasses.replace(
        jaxdata.PipelineConfig.from_dict(
          {"datasets": [{"name": "d0", "path": _dataset(r)}], "mixture": {"weights": {"d0": 1}}}
        ),
        stats_path=(open(os.path.join(r, "notes.txt"), "w").write("mine\n") and os.path.join(r, "notes.txt")),
      )
    ),
    jaxdata.ConfigError,
    "notes.txt",
  ),
  Case(
    "stats_path in a missing directory",
    lambda r: jaxdata.Pipeline(
      dataclasses.replace(
        jaxdata.PipelineConfig.from_dict(
          {"datasets": [{"name": "d0", "path": _dataset(r)}], "mixture": {"weights": {"d0": 1}}}
        ),
        stats_path=os.path.join(r, "no-such-dir", "stats.jsonl"),
      )
    ),
    jaxdata.ConfigError,
    "no-such-dir",
  ),
  Case(
    "a packing.warmup phase with an unknown key",
    lambda r: _config(r, BASE_YAML + "packing: {seq_len: 64, warmup: [{until_step: 3, seq_len: 32, sq_len: 1}]}\n"),
    jaxdata.ConfigError,
    "'sq_len'",
  ),
  Case(
    "a !!set as mixture weights",
    lambda r: _config(r, "datasets: [{name: a}]\nmixture: {weights: !!set {a}}\n"),
    jaxdata.ConfigError,
    "!!set",
  ),
  Case("a !!set as a mapping key", lambda r: _config(r, "? !!set {a}\n: 1\n"), jaxdata.ConfigError, "!!set"),
  # --- commands
  Case(
    "convert --name escaping the output",
    lambda r: _cli(
      "convert",
      (open(os.path.join(r, "a.jsonl"), "w").write('{"text": "x"}\n') and os.path.join(r, "a.jsonl")),
      "--out",
      os.path.join(r, "out"),
      "--name",
      "../../escaped",
      "-q",
    ),
    CliError,
    "'../../escaped'",
  ),
  Case(
    "convert a truncated .jsonl.gz",
    lambda r: _cli(
      "convert",
      (
        open(os.path.join(r, "a.jsonl.gz"), "wb").write(gzip.compress(b'{"text": "abc"}\n' * 1000)[:60])
        and os.path.join(r, "a.jsonl.gz")
      ),
      "--out",
      os.path.join(r, "out"),
      "--name",
      "a",
      "-q",
    ),
    CliError,
    "a.jsonl.gz",
  ),
  Case(
    "convert a .gz that is not gzip",
    lambda r: _cli(
      "convert",
      (open(os.path.join(r, "b.jsonl.gz"), "wb").write(b"plain text\n") and os.path.join(r, "b.jsonl.gz")),
      "--out",
      os.path.join(r, "out"),
      "--name",
      "b",
      "-q",
    ),
    CliError,
    "b.jsonl.gz",
  ),
  Case(
    "convert a lone surrogate",
    lambda r: _cli(
      "convert",
      (open(os.path.join(r, "s.jsonl"), "w").write('{"text": "a\\ud800b"}\n') and os.path.join(r, "s.jsonl")),
      "--out",
      os.path.join(r, "out"),
      "--name",
      "s",
      "-q",
    ),
    CliError,
    "s.jsonl:1",
  ),
  Case(
    "convert with hf: given a non-tokenizer",
    lambda r: _cli(
      "convert",
      (open(os.path.join(r, "t.jsonl"), "w").write('{"text": "x"}\n') and os.path.join(r, "t.jsonl")),
      "--out",
      os.path.join(r, "out"),
      "--name",
      "t",
      "-q",
      "--tokenizer",
      "hf:" + (open(os.path.join(r, "m.model"), "wb").write(b"\x08\x01garbage") and os.path.join(r, "m.model")),
    ),
    CliError,
    "m.model",
  ),
  Case(
    "index a zero-byte file",
    lambda r: jaxdata.sources.build_index(
      [(open(os.path.join(r, "z.array_record"), "w").close(), os.path.join(r, "z.array_record"))[1]], "uint16"
    ),
    jaxdata.DatasetError,
    "z.array_record",
  ),
  Case(
    "index a file that is not ArrayRecord",
    lambda r: jaxdata.sources.build_index(
      [(open(os.path.join(r, "t.array_record"), "w").write("hello" * 100), os.path.join(r, "t.array_record"))[1]],
      "uint16",
    ),
    jaxdata.DatasetError,
    "t.array_record",
  ),
  Case(
    "index empty records",
    lambda r: jaxdata.sources.build_index(
      [_raw_shard(os.path.join(r, "e.array_record"), [b"\x01\x00", b""])], "uint16"
    ),
    jaxdata.DatasetError,
    "e.array_record",
  ),
  Case(
    "convert a Parquet file with a damaged row group",
    lambda r: _cli("convert", _damaged_parquet(r), "--out", os.path.join(r, "out"), "--name", "p", "-q"),
    CliError,
    "p.parquet",
  ),
  Case(
    "index one good and one bad shard: nothing left behind",
    lambda r: _index_and_check_clean(r),
    jaxdata.DatasetError,
    "bad.array_record",
  ),
  Case(
    "an empty dataset with shuffle_block_size auto",
    lambda r: jaxdata.mixture.DocumentStream(
      jaxdata.PipelineConfig.from_dict(
        {
          "datasets": [{"name": "a"}, {"name": "e"}],
          "mixture": {"weights": {"a": 1, "e": 1}},
          "shuffle_block_size": "auto",
        }
      ),
      {"a": jaxdata.mixture.DatasetMeta.from_lengths([3, 4]), "e": jaxdata.mixture.DatasetMeta.from_lengths([], [])},
    ),
    jaxdata.ConfigError,
    "datasets.e",
  ),
  Case(
    "demo into a directory of user files",
    lambda r: (open(os.path.join(r, "thesis.txt"), "w").write("years"), claim_directory(r, "jaxdata demo")),
    FileExistsError,
    "was not created by jaxdata demo",
  ),
  Case(
    "clearing checkpoints the demo did not write",
    lambda r: clear_claimed(r, "jaxdata demo"),
    FileExistsError,
    "was not created by jaxdata demo",
  ),
  # --- checkpoint states
  Case(
    "state fingerprint null", lambda r: _restore(r, _set(["fingerprint"], None)), jaxdata.CheckpointError, "fingerprint"
  ),
  Case(
    "state fingerprint a list", lambda r: _restore(r, _set(["fingerprint"], [])), jaxdata.CheckpointError, "fingerprint"
  ),
  Case(
    "state tokens_per_source null",
    lambda r: _restore(r, _set(["tokens_per_source", "d0"], None), reseal=True),
    jaxdata.CheckpointError,
    "tokens_per_source",
  ),
  Case(
    "state edited by hand", lambda r: _restore(r, _set(["stream", "emitted"], 10**6)), jaxdata.CheckpointError, "digest"
  ),
  Case(
    "state carry zlib bomb",
    lambda r: _restore(
      r,
      _set(["packer", "carry"], base64.b64encode(zlib.compress(b"[" + b"0," * (1 << 22) + b"0]", 9)).decode()),
      reseal=True,
    ),
    jaxdata.CheckpointError,
    "carry",
  ),
  Case("state of a newer format", lambda r: _restore(r, _set(["version"], 99)), jaxdata.CheckpointError, "version 99"),
  Case("state of an older format", lambda r: _restore(r, _set(["version"], 1)), jaxdata.CheckpointError, "version 1"),
  Case(
    "state with a pass of 2**63",
    lambda r: _restore(r, _set(["stream", "datasets", "d0", "pass"], 2**63), reseal=True),
    jaxdata.CheckpointError,
    "datasets.d0",
  ),
  Case(
    "a list as a MaxText mixture weight",
    lambda r: maxtext_config(
      {
        "grain_train_files": "",
        "grain_train_mixture_config_path": (
          open(os.path.join(r, "m.json"), "w").write(
            json.dumps({"web": {"path": f"{r}/*.array_record", "weight": [1]}})
          )
          and os.path.join(r, "m.json")
        ),
      }
    ),
    jaxdata.ConfigError,
    "weight of 'web'",
  ),
  Case(
    "a list as an ablate candidate weight",
    lambda r: load_candidate(
      open(os.path.join(r, "c.yaml"), "w").write("name: x\nweights: {a: [1]}\n") and os.path.join(r, "c.yaml")
    ),
    jaxdata.ConfigError,
    "weight of 'a'",
  ),
  Case(
    "plan --hosts 1000000000",
    lambda r: _cli("plan", _small_config(r), "--hosts", "1000000000", "--tokens", "1M"),
    CliError,
    "1000000000 hosts",
  ),
  Case(
    "audit --steps 10**12",
    lambda r: _cli("audit", _small_config(r), "--hosts", "1", "--steps", str(10**12)),
    CliError,
    "steps",
  ),
  # --- flat and Megatron files
  Case(
    "Megatron .idx claiming uint16 over int32 ids",
    lambda r: _lying_megatron(r, np.int32, 8),
    jaxdata.DatasetError,
    "m.bin",
  ),
  Case(
    "Megatron .idx claiming int32 over uint16 ids",
    lambda r: _lying_megatron(r, np.uint16, 4),
    jaxdata.DatasetError,
    "m.bin",
  ),
  Case(
    "Megatron .idx with trailing bytes",
    lambda r: (
      write_megatron(os.path.join(r, "m"), [[[5, 6, 7]]] * 40),
      open(os.path.join(r, "m.idx"), "ab").write(b"\0" * 3),
      build_flat_index("megatron", [os.path.join(r, "m")]),
    ),
    jaxdata.DatasetError,
    "m.idx",
  ),
  Case(
    "eos_id beyond uint16",
    lambda r: _flat_index(r, boundaries=DocumentBoundaries.eos(70000)),
    ValueError,
    "token_id: eos id 70000",
  ),
  Case(
    "eos id of -1", lambda r: _flat_index(r, boundaries=DocumentBoundaries.eos(-1)), ValueError, "token_id: eos id -1"
  ),
  Case(
    "eos id of 10**30",
    lambda r: _flat_index(r, boundaries=DocumentBoundaries.eos(10**30)),
    ValueError,
    "token_id: eos id 1000000000000000000000000000000",
  ),
  Case(
    ".npy header shape disagrees with its size",
    lambda r: (
      np.save(os.path.join(r, "t.npy"), np.arange(1, 500, dtype=np.uint16) % 7),
      os.truncate(os.path.join(r, "t.npy"), os.path.getsize(os.path.join(r, "t.npy")) - 8),
      build_flat_index("flat", [os.path.join(r, "t.npy")], boundaries=DocumentBoundaries.eos(0)),
    ),
    jaxdata.DatasetError,
    "t.npy",
  ),
  Case(
    "a flat token file linked in from outside the dataset",
    lambda r: _linked_flat(r),
    jaxdata.DatasetError,
    "a link that resolves outside",
  ),
  Case("a data_root pointing at other files", lambda r: _foreign_data_root(r), jaxdata.DatasetError, "passwd"),
  Case(
    "flat lengths permuted, ends still agreeing",
    lambda r: _tampered_flat_index(r, "a.lengths.npy"),
    jaxdata.DatasetError,
    "a.lengths.npy",
  ),
  Case(
    "flat starts tampered, ends still agreeing",
    lambda r: _tampered_flat_index(r, "a.starts.npy"),
    jaxdata.DatasetError,
    "a.starts.npy",
  ),
  # --- research helpers
  Case("doremi_average of a negative weight", lambda r: doremi_average([{"a": -1.0, "b": 0.5}]), ValueError, "'a'"),
  Case(
    "doremi_average of NaN",
    lambda r: doremi_average([{"a": 0.5, "b": 0.5}, {"a": float("nan"), "b": 1.0}]),
    ValueError,
    "round 1 weight 'a'",
  ),
  Case("doremi_average of infinity", lambda r: doremi_average([{"a": float("inf"), "b": 1.0}]), ValueError, "'a'"),
  Case("doremi_average of all zeros", lambda r: doremi_average([{"a": 0.0, "b": 0.0}]), ValueError, "round 0"),
]


# --- the entrances of the last round (MaxText keys, compressed inputs, Megatron indexes, Grain sources,
# controllers, the pipeline's lifecycle): every value checked where it enters


def _maxtext(root: str, **values: Any) -> Any:
  base = {
    "grain_train_files": f"{_dataset(root)}/*.array_record",
    "global_batch_size_to_load": 4,
    "max_target_length": 16,
    "tokenize_train_data": False,
  }
  return maxtext_config({**base, **values})


def _megatron_prefix(root: str, name: str = "web_text_document", sizes: tuple[int, ...] = (5, 9, 3) * 10) -> str:
  prefix = os.path.join(root, name)
  write_megatron(prefix, [[list(range(1, n + 1))] for n in sizes])
  return prefix


def _closed_next(root: str) -> None:
  cfg, _ = _pipeline_state(root)
  pipe = jaxdata.Pipeline(cfg, prefetch=2)
  next(pipe)
  pipe.close()
  next(pipe)


def _getitems(root: str, indices: Any) -> Any:
  with open_dataset(_dataset(root)) as dataset:
    return dataset.__getitems__(indices)


def _edited_mixture_state(root: str) -> None:
  cfg, _ = _pipeline_state(root)
  iterator = iter(MixtureDataset(cfg))
  next(iterator)
  state = iterator.get_state()
  iterator.set_state({**state, "offset": state["offset"] + 3})


def _gz_input(root: str, damage: Callable[[bytes], bytes], suffix: str = ".jsonl.gz") -> None:
  lines = "".join(json.dumps({"text": f"document {i} " * 20}) + "\n" for i in range(500)).encode()
  path = os.path.join(root, "in" + suffix)
  open(path, "wb").write(damage(gzip.compress(lines)))
  convert([path], os.path.join(root, "out"), "x", ConvertOptions(workers=1))


def _tfrecord_gz(root: str, damage: Callable[[bytes], bytes]) -> None:
  write_tfrecord(os.path.join(root, "t.tfrecord"), [example({"text": f"doc {i} " * 30}) for i in range(200)])
  path = os.path.join(root, "t.tfrecord.gz")
  open(path, "wb").write(damage(gzip.compress(open(os.path.join(root, "t.tfrecord"), "rb").read())))
  convert([path], os.path.join(root, "out"), "x", ConvertOptions(workers=1))


def _flip(data: bytes, at: float = 0.5) -> bytes:
  i = int(len(data) * at)
  return data[:i] + bytes([data[i] ^ 0xFF]) + data[i + 1 :]


def _restore_without_pipeline(root: str) -> None:
  cfg, _ = _pipeline_state(root)
  with ocp.CheckpointManager(os.path.join(root, "ckpt")) as manager, jaxdata.Pipeline(cfg, prefetch=0) as pipe:
    next(pipe)
    manager.save(1, args=ocp.args.Composite(data=jaxdata.checkpoint.Save(pipe)))
    manager.wait_until_finished()
  with ocp.CheckpointManager(os.path.join(root, "ckpt")) as manager:
    manager.restore(1)


def _tiny_config(root: str) -> str:
  path = os.path.join(root, "tiny.yaml")
  open(path, "w").write(
    f"datasets: [{{name: d0, path: {_dataset(root, 'd0', [5, 3])}}}]\nmixture: {{weights: {{d0: 1}}}}\n"
    "packing: {seq_len: 16}\nbatch: {global_batch_size: 16}\n"
  )
  return path


def _half(data: bytes) -> bytes:
  return data[: len(data) // 2]


def _twice_named_mixture(root: str) -> None:
  path = _dataset(root)
  mixture = os.path.join(root, "m.json")
  open(mixture, "w").write(
    f'{{"a": {{"path": "{path}/*.array_record", "weight": 1}}, "a": {{"path": "x/*", "weight": 2}}}}'
  )
  maxtext_config({"grain_train_files": "", "grain_train_mixture_config_path": mixture, "global_batch_size_to_load": 4})


def _negative_npy(root: str) -> None:
  np.save(os.path.join(root, "t.npy"), np.array([5, 6, 0, 7, -3, 0], np.int32))
  build_flat_index("flat", [os.path.join(root, "t.npy")], boundaries=DocumentBoundaries.eos(0))


ENTRANCE_CASES = [
  # the pipeline's lifecycle
  Case("next() after close()", _closed_next, jaxdata.PipelineClosedError, "closed"),
  # Megatron indexes and configs
  Case(
    "from-megatron over a user's dataset",
    lambda r: (
      write_coded_dataset(os.path.join(r, "ix", "web_text_document"), 0, [5, 9] * 10),
      megatron_config(f"1 {_megatron_prefix(r)}", index_dir=os.path.join(r, "ix")),
    ),
    jaxdata.ConfigError,
    "index_dir",
  ),
  Case(
    "from-megatron over loose files",
    lambda r: (
      os.makedirs(os.path.join(r, "ix", "web_text_document")),
      open(os.path.join(r, "ix", "web_text_document", "notes.txt"), "w").write("mine"),
      megatron_config(f"1 {_megatron_prefix(r)}", index_dir=os.path.join(r, "ix")),
    ),
    jaxdata.ConfigError,
    "already holds files",
  ),
  Case(
    "from-megatron --split 1.2.3",
    lambda r: _cli("from-megatron", "--data-path", _megatron_prefix(r), "--split", "1.2.3", "--out", f"{r}/o.yaml"),
    CliError,
    "split: '1.2.3'",
  ),
  Case(
    "from-megatron --split with a negative ratio",
    lambda r: megatron_config(f"1 {_megatron_prefix(r)}", split="1,-1,0", index_dir=os.path.join(r, "ix")),
    jaxdata.ConfigError,
    "split: '1,-1,0'",
  ),
  # MaxText values of the wrong type
  *[
    Case(f"MaxText {key}: {value!r}", lambda r, k=key, v=value: _maxtext(r, **{k: v}), jaxdata.ConfigError, key)
    for key, value in [
      ("packing", "false"),
      ("enable_data_shuffling", "false"),
      ("use_truncation", "false"),
      ("add_bos", "false"),
      ("global_batch_size_to_load", 8.7),
      ("global_batch_size_to_load", True),
      ("max_target_length", 32.9),
      ("data_shuffle_seed", 1.7),
      ("data_shuffle_seed", "abc"),
      ("max_target_length", None),
      ("num_epoch", [1]),
      ("per_device_batch_size", float("nan")),
      ("per_device_batch_size", float("inf")),
      ("grain_worker_count", {"a": 1}),
      ("grain_packing_type", {"a": 1}),
      ("grain_train_files", {"a": 1}),
      ("max_segments_per_seq", 0),
      ("tokenizer_path", 7),
    ]
  ],
  Case(
    "MaxText grain_train_filez", lambda r: _maxtext(r, grain_train_filez="x"), jaxdata.ConfigError, "grain_train_files"
  ),
  Case(
    "MaxText max_target_lenght", lambda r: _maxtext(r, max_target_lenght=8), jaxdata.ConfigError, "max_target_length"
  ),
  Case(
    "MaxText batch keys that disagree",
    lambda r: maxtext_config(
      {
        "grain_train_files": f"{_dataset(r)}/*.array_record",
        "global_batch_size_to_load": 6,
        "per_device_batch_size": 4,
        "tokenize_train_data": False,
      },
      num_devices=4,
    ),
    jaxdata.ConfigError,
    "global_batch_size_to_load: 6",
  ),
  Case("MaxText mixture naming a dataset twice", lambda r: _twice_named_mixture(r), jaxdata.ConfigError, "named twice"),
  Case(
    "MaxText tokenizer_path that does not exist",
    lambda r: _maxtext(r, tokenizer_path=os.path.join(r, "missing.model"), tokenize_train_data=True),
    jaxdata.ConfigError,
    "missing.model does not exist",
  ),
  # tf.train.Example and Grain sources
  Case(
    "tf.train.Example with a feature key twice",
    lambda r: (
      write_tfrecord(os.path.join(r, "d.tfrecord"), [example({"text": "a"}) + example({"text": "b"})]),
      convert([os.path.join(r, "d.tfrecord")], os.path.join(r, "o"), "x", ConvertOptions(workers=1)),
    ),
    jaxdata.InputFormatError,
    "d.tfrecord:record 0: feature 'text' is given twice",
  ),
  *[
    Case(f"__getitems__({value!r})", lambda r, v=value: _getitems(r, v), error, names)
    for value, error, names in [
      ([1.5, 2.9], TypeError, "float64"),
      (["1", "2"], TypeError, "str"),
      (np.array([True, False, True]), TypeError, "bool"),
      ([[1], [2]], TypeError, "2-D"),
      ([np.uint64(2**63)], IndexError, "9223372036854775808"),
      ([2**64], TypeError, "object"),
      (None, TypeError, "NoneType"),
      ([-41], IndexError, "-41"),
    ]
  ],
  Case("MixtureDataset state edited", _edited_mixture_state, jaxdata.CheckpointError, "digest"),
  # controllers
  Case(
    "EXP3 fed an unknown domain",
    lambda r: EXP3Controller(("a", "b")).observe(0, {"a": 1.0, "zz": 2.0}),
    ValueError,
    "unknown domain(s) ['zz']",
  ),
  Case(
    "DoReMi fed a None excess",
    lambda r: DoReMiController(("a", "b")).observe(0, {"a": None, "b": 1.0}),
    ValueError,
    "'a'",
  ),
  Case("DoReMi of no domains", lambda r: DoReMiController([]), ValueError, "domains"),
  Case("EXP3 of no domains", lambda r: EXP3Controller([]), ValueError, "domains"),
  # damaged compressed inputs
  Case("a .jsonl.gz with a flipped byte", lambda r: _gz_input(r, _flip), jaxdata.InputFormatError, "in.jsonl.gz"),
  Case(
    "a .jsonl.gz with a damaged deflate header",
    lambda r: _gz_input(r, lambda d: d[:10] + bytes([d[10] ^ 0xFF]) + d[11:]),
    jaxdata.InputFormatError,
    "in.jsonl.gz",
  ),
  Case(
    "a .jsonl.gz with a bad CRC trailer",
    lambda r: _gz_input(r, lambda d: d[:-8] + bytes([d[-8] ^ 1]) + d[-7:]),
    jaxdata.InputFormatError,
    "in.jsonl.gz",
  ),
  Case(
    "a .jsonl.gz cut in half",
    lambda r: _gz_input(r, lambda d: d[: len(d) // 2]),
    jaxdata.InputFormatError,
    "in.jsonl.gz",
  ),
  Case(
    "a .jsonl.gz that is not gzip", lambda r: _gz_input(r, gzip.decompress), jaxdata.InputFormatError, "in.jsonl.gz"
  ),
  Case(
    "a .tfrecord.gz cut in half",
    lambda r: _tfrecord_gz(r, lambda d: d[: len(d) // 2]),
    jaxdata.InputFormatError,
    "t.tfrecord.gz",
  ),
  Case(
    "a .tfrecord.gz with a bad CRC trailer",
    lambda r: _tfrecord_gz(r, lambda d: d[:-8] + bytes([d[-8] ^ 1]) + d[-7:]),
    jaxdata.InputFormatError,
    "t.tfrecord.gz",
  ),
  Case(
    "a .tfrecord.gz that is not gzip",
    lambda r: _tfrecord_gz(r, gzip.decompress),
    jaxdata.InputFormatError,
    "t.tfrecord.gz",
  ),
  Case(
    "a .zst cut inside a frame",
    lambda r: (
      open(os.path.join(r, "in.jsonl.zst"), "wb").write(
        _half(zstandard.ZstdCompressor().compress("".join(f'{{"text": "{i}"}}\n' for i in range(5000)).encode()))
      ),
      convert([os.path.join(r, "in.jsonl.zst")], os.path.join(r, "out"), "x", ConvertOptions(workers=1)),
    ),
    jaxdata.InputFormatError,
    "in.jsonl.zst",
  ),
  # checkpoints, indexing, planning
  Case(
    "manager.restore(step) without Restore(pipe)", _restore_without_pipeline, jaxdata.CheckpointError, "Restore(pipe)"
  ),
  Case(
    "--eos-id that never occurs",
    lambda r: _flat_index(r, boundaries=DocumentBoundaries.eos(999)),
    jaxdata.DatasetError,
    "eos_id 999 never occurs",
  ),
  Case(
    "--bos-id that never occurs",
    lambda r: _flat_index(r, boundaries=DocumentBoundaries.bos(999)),
    jaxdata.DatasetError,
    "bos_id 999 never occurs",
  ),
  Case("an int32 .npy with a negative id", _negative_npy, jaxdata.DatasetError, "t.npy"),
  Case("plan --tokens 10**25", lambda r: _cli("plan", _small_config(r), "--tokens", str(10**25)), CliError, "tokens"),
  Case(
    "plan of data smaller than a step",
    lambda r: _cli("plan", _tiny_config(r), "--tokens", "1M"),
    CliError,
    "one whole step",
  ),
  # fine-tuning entrances
  Case(
    "a mask shorter than its tokens",
    lambda r: jaxdata.from_iterable([([5, 6, 7], [0, 1])], out=os.path.join(r, "m"), tokenizer=None),
    jaxdata.InputFormatError,
    "item 0: its mask has 2 values for 3 token ids",
  ),
  Case(
    "a mask value of 2",
    lambda r: jaxdata.from_iterable([([5, 6], [0, 2])], out=os.path.join(r, "m"), tokenizer=None),
    jaxdata.InputFormatError,
    "item 0: a mask holds 0 or 1",
  ),
  Case(
    "chat examples with the byte tokenizer",
    lambda r: ConvertOptions(examples="chat"),
    ValueError,
    "tokenizer: chat examples with a chat template are rendered and tokenized by a Hugging Face tokenizer",
  ),
  Case(
    "a misspelled Levanter chat key",
    lambda r: levanter_chat_options({"mask_user_turn": False}, "hf:tok"),
    jaxdata.ConfigError,
    "'mask_user_turn' is not a chat format key",
  ),
  Case(
    "packing.max_segments_per_row of 0",
    lambda r: jaxdata.PipelineConfig.from_dict(
      {"datasets": [{"name": "a", "path": r}], "mixture": {"weights": {"a": 1}}, "packing": {"max_segments_per_row": 0}}
    ),
    jaxdata.ConfigError,
    "packing.max_segments_per_row",
  ),
]
CASES += ENTRANCE_CASES


def run_case(case: Case) -> tuple[str, str]:
  """(outcome, detail) of one case, in a fresh directory, with a hang alarm."""

  def alarm(*_: Any) -> None:
    raise TimeoutError(f"no answer within {HANG_SECONDS} s")

  previous = signal.signal(signal.SIGALRM, alarm)
  signal.alarm(HANG_SECONDS)
  try:
    with tempfile.TemporaryDirectory() as root:
      case.run(root)
    return "silent", "no error"
  except TimeoutError as e:
    return "hang", str(e)
  except case.error as e:
    message = str(e)
    if case.names in message and len(message) < 2000:
      return "clear", message[:200]
    return "unclear", f"{type(e).__name__}: {message[:300]}"
  except Exception as e:  # noqa: BLE001 -- the campaign records whatever escapes
    return "unclear", f"{type(e).__name__}: {str(e)[:300]}"
  finally:
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


if __name__ == "__main__":
  counts: dict[str, int] = {}
  for case in CASES:
    outcome, detail = run_case(case)
    counts[outcome] = counts.get(outcome, 0) + 1
    print(f"{outcome:8s} {case.name}: {detail}")
  print(f"{len(CASES)} kinds tried: " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items())))
