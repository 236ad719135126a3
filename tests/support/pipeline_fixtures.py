"""Small real datasets whose token ids say where they come from.

Token k of record r of dataset d is ``code(d, r, k) = (1 + d * 4096 + r) * 512 + k``
(uint32, always >= FIRST_CODE, above any BOS / EOS / pad id the tests use), so a
test can decode any batch position back to its document and offset.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from typing import Any

import numpy as np

from jaxdata import PipelineConfig
from jaxdata.sources import DatasetWriter

FIRST_CODE = 512
FEATURES = ("tokens", "targets", "segment_ids", "positions", "loss_mask", "source_ids")


def digest(batch: dict) -> tuple:
  """A batch as comparable bytes, feature by feature."""
  return tuple(np.asarray(batch[k]).tobytes() for k in FEATURES)


def code(d: np.ndarray | int, r: np.ndarray | int, k: np.ndarray | int) -> np.ndarray:
  return (1 + np.asarray(d) * 4096 + np.asarray(r)) * 512 + np.asarray(k)


def decode(token: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  body = np.asarray(token, dtype=np.int64) // 512 - 1
  return body // 4096, body % 4096, np.asarray(token, dtype=np.int64) % 512


def coded_mask(d: np.ndarray | int, r: np.ndarray | int, k: np.ndarray | int) -> np.ndarray:
  """The trained flag of token k of record r of dataset d in a masked coded dataset (about 2 in 3)."""
  return ((np.asarray(d) * 7 + np.asarray(r) * 13 + np.asarray(k) * 5) % 3 != 0).astype(np.uint8)


def write_coded_dataset(
  directory: str,
  d: int,
  lengths: list[int],
  shard_bytes: int = 400,
  compression: str = "zstd",
  masks: bool = False,
  tokenizer: dict | None = None,
) -> None:
  """Coded ids; with `masks`, every record carries `coded_mask` as its trained-token mask; `tokenizer`:
  the manifest's tokenizer record (default: the coding, with no special ids)."""
  lengths_arr = np.asarray(lengths, dtype=np.int64)
  record = np.repeat(np.arange(len(lengths)), lengths_arr)
  k = np.arange(int(lengths_arr.sum())) - np.repeat(np.cumsum(lengths_arr) - lengths_arr, lengths_arr)
  identity = tokenizer or {"kind": "coded"}
  writer = DatasetWriter(directory, f"d{d}", np.dtype("<u4"), identity, shard_bytes, compression, masks=masks)
  writer.write_documents(code(d, record, k), lengths_arr, coded_mask(d, record, k) if masks else None)
  writer.finish()


def coded_config(
  tmp_path: Any, lengths: list[list[int]], masked: tuple[int, ...] = (), **overrides: Any
) -> PipelineConfig:
  """Datasets d0, d1, ... with the given document lengths, equal weights; those in `masked` carry
  trained-token masks (`coded_mask`)."""
  names = [f"d{i}" for i in range(len(lengths))]
  for i, doc_lengths in enumerate(lengths):
    write_coded_dataset(str(tmp_path / names[i]), i, doc_lengths, masks=i in masked)
  raw = {
    "datasets": [{"name": n, "path": str(tmp_path / n)} for n in names],
    "mixture": {"weights": {n: 1 for n in names}},
    # coded ids record no tokenizer: the ids packing adds are given (BOS 1, EOS 0, as the coding reserves)
    "packing": {"mode": "first_fit", "seq_len": 16, "bos_id": 1, "eos_id": 0},
    "batch": {"global_batch_size": 4},
  }
  for key, value in overrides.items():
    if isinstance(value, dict) and isinstance(raw.get(key), dict):
      raw[key] = {**raw[key], **value}
    else:
      raw[key] = value
  return PipelineConfig.from_dict(raw)


def as_on_cores(monkeypatch: Any, count: int) -> None:
  """As on a host of `count` usable cores (`os.sched_getaffinity`), where the pipeline's defaults look."""
  monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: set(range(count)))


def free_port() -> int:
  """A localhost port nobody listens on, for a jax.distributed coordinator."""
  with socket.socket() as s:
    s.bind(("localhost", 0))
    return s.getsockname()[1]


def worker_env() -> dict[str, str]:
  """This environment minus the JAX device settings the workers choose themselves."""
  return {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "JAX_PLATFORMS")}


def run_workers(script: str, argvs: list[list[str]], timeout: float = 300) -> None:
  """Starts `python script *argv` for every argv at once (one per process of a
  jax.distributed run) and asserts that all of them exit 0."""
  procs = [
    subprocess.Popen(
      [sys.executable, script, *argv], env=worker_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    for argv in argvs
  ]
  outputs = [p.communicate(timeout=timeout)[0] for p in procs]
  for p, output in zip(procs, outputs):
    assert p.returncode == 0, output[-3000:]


def fresh_python(script: str, native: str | None = None, missing: str | None = None) -> str:
  """stdout of `script` in a fresh interpreter (the C loops' switches are read at
  import), with JAXDATA_NATIVE=`native` (None: unset) and, if `missing` names a
  C extension, without it (as on an install without a compiler: importing it fails)."""
  if missing is not None:
    script = f"import sys; sys.modules[{missing!r}] = None\n" + script
  env = {k: v for k, v in os.environ.items() if k != "JAXDATA_NATIVE"}
  if native is not None:
    env["JAXDATA_NATIVE"] = native
  done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, env=env)
  assert done.returncode == 0, done.stderr[-2000:]
  return done.stdout


def rebuilt_batch(out_dir: Any, processes: int, step: int, like: dict) -> dict:
  """A global batch put back together from every process's saved row blocks (``p{i}_step{k}.npz``
  holding ``FEATURE/START`` arrays), shaped like `like`; rows nobody saved stay -999 (unsigned: the largest value)."""
  rebuilt = {name: np.full_like(np.asarray(value), _unsaved(np.asarray(value).dtype)) for name, value in like.items()}
  for process in range(processes):
    saved = np.load(os.path.join(str(out_dir), f"p{process}_step{step}.npz"))
    for key in saved.files:
      name, start = key.split("/")
      rebuilt[name][int(start) : int(start) + saved[key].shape[0]] = saved[key]
  return rebuilt


def _unsaved(dtype: np.dtype) -> int:
  return int(np.iinfo(dtype).max) if dtype.kind == "u" else -999


REJECTED_ANSWER = 256  # coded offset of a rejected answer's tokens: token k of it is code(d, r, 256 + k)


def coded_pairs(d: int, count: int, seed: int, prompt: tuple[int, int] = (1, 4), answer: tuple[int, int] = (1, 6)):
  """`count` coded preference pairs: (chosen ids, chosen marks, rejected ids, rejected marks) each.

  Both sides share the prompt's ids code(d, r, k), k < P; the chosen answer continues code(d, r, k),
  the rejected answer is code(d, r, REJECTED_ANSWER + k). An answer's first token trains, the rest
  mostly (bit 0); the rejected side's bytes carry bit 1."""
  rng = np.random.default_rng(seed)
  pairs = []
  for r in range(count):
    p = int(rng.integers(*prompt))
    a, b = (int(x) for x in rng.integers(*answer, size=2))
    chosen = code(d, r, np.arange(p + a))
    rejected = np.concatenate([code(d, r, np.arange(p)), code(d, r, REJECTED_ANSWER + np.arange(b))])
    chosen_marks = np.r_[np.zeros(p, np.uint8), _answer_trained(a, r)]
    rejected_marks = np.r_[np.zeros(p, np.uint8), _answer_trained(b, r + 1)] | 2
    pairs.append((chosen, chosen_marks, rejected, rejected_marks))
  return pairs


def _answer_trained(n: int, salt: int) -> np.ndarray:
  """An answer's trained flags: its first token, then about 3 in 4."""
  return np.r_[1, (np.arange(1, n) * 5 + salt) % 4 != 0].astype(np.uint8)


def write_pair_dataset(directory: str, d: int, pairs: list, shard_bytes: int = 300) -> None:
  """`coded_pairs` as a dataset of preference pairs (a pair a record: chosen ++ rejected)."""
  writer = DatasetWriter(directory, f"p{d}", np.dtype("<u4"), {"kind": "coded"}, shard_bytes, pairs=True)
  ids = np.concatenate([np.r_[c, r] for c, _, r, _ in pairs])
  marks = np.concatenate([np.r_[cm, rm] for _, cm, _, rm in pairs])
  writer.write_documents(ids, np.array([c.size + r.size for c, _, r, _ in pairs]), marks)
  writer.finish()


def sentencepiece_model(texts: list[str], directory: str, vocab_size: int) -> str:
  """A small SentencePiece model trained on `texts` (vocab_size a bound, not exact): its .model path."""
  import sentencepiece as spm  # noqa: PLC0415 -- the sentencepiece extra, for the tests that train one

  spm.SentencePieceTrainer.train(
    sentence_iterator=iter(texts),
    model_prefix=os.path.join(directory, "sp"),
    vocab_size=vocab_size,
    hard_vocab_limit=False,
    minloglevel=2,
  )
  return os.path.join(directory, "sp.model")
