"""Conversion at scale: units cut from large files, Beam's local runner, and the converter's UX."""

from __future__ import annotations

import dataclasses
import filecmp
import gzip
import json
import os
import random
import re
import subprocess
import sys
import tempfile

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

from jaxdata import InputFormatError, open_dataset
from jaxdata.cli import main
from jaxdata.conversion.beam_runner import convert_with_beam
from jaxdata.conversion.formats import Jsonl, plan_units
from jaxdata.conversion.local_runner import convert
from jaxdata.conversion.options import ConvertOptions
from jaxdata.conversion.shard_jobs import plan_shards
from jaxdata.conversion.tokenizers import ByteTokenizer
from jaxdata.sources import TokenDataset
from jaxdata.sources.writer import DatasetWriter
from pipeline_fixtures import sentencepiece_model
from record_fixtures import example, write_tfrecord

pytestmark = [pytest.mark.slow, pytest.mark.integration]


def text(rng: random.Random) -> str:
  return " ".join(rng.choice(["alpha", "beta", "gamma", "délta", "ε", "\n"]) for _ in range(rng.randint(0, 60)))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> str:
  """Several inputs of mixed formats: JSONL (plain, gzip, zstd) with bad lines, Parquet in row groups,
  plain text; plus files a directory walk must leave out."""
  root = tmp_path_factory.mktemp("corpus")
  rng = random.Random(0)
  lines = []
  for i in range(3000):
    if i % 97 == 5:
      lines.append("{not json")
    elif i % 131 == 7:
      lines.append(json.dumps({"other": 1}))
    else:
      lines.append(json.dumps({"text": text(rng)}))
  (root / "a.jsonl").write_text("\n".join(lines) + "\n")
  with gzip.open(root / "b.jsonl.gz", "wt") as f:
    f.write("\n".join(lines[:500]) + "\n")
  (root / "c.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(("\n".join(lines[500:900]) + "\n").encode()))
  pq.write_table(pa.table({"text": [text(rng) for _ in range(2000)]}), root / "d.parquet", row_group_size=100)
  (root / "e.txt").write_text("\n\n".join(text(rng) for _ in range(50)))
  (root / "__pycache__").mkdir()
  (root / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"\x00\xff binary")
  (root / ".hidden.jsonl").write_text("{broken")
  return str(root)


OPTIONS = ConvertOptions(skip_invalid=True, shard_bytes=20_000, workers=2)


def assert_same_files(a: str, b: str) -> None:
  names = sorted(os.listdir(a))
  assert names == sorted(os.listdir(b))
  different = [n for n in names if not filecmp.cmp(os.path.join(a, n), os.path.join(b, n), shallow=False)]
  assert not different, different


def test_beam_local_runner_writes_the_local_converters_bytes(corpus, tmp_path):
  local = convert([corpus], str(tmp_path / "local"), "mix", dataclasses.replace(OPTIONS, unit_bytes=30_000))
  beam = convert_with_beam(
    [corpus],
    str(tmp_path / "beam"),
    "mix",
    dataclasses.replace(OPTIONS, unit_bytes=70_000),
    ["--direct_num_workers=2", "--direct_running_mode=multi_threading"],
  )
  assert_same_files(str(tmp_path / "local"), str(tmp_path / "beam"))  # shards, lengths, manifest
  assert len(local.shards) > 10 and beam.stats == local.stats
  bad = [i for i in range(3000) if i % 97 == 5 or i % 131 == 7]  # a.jsonl has them all, b lines 0-499, c 500-899
  assert local.stats["skipped_invalid"] == len(bad) + sum(i < 500 for i in bad) + sum(500 <= i < 900 for i in bad)
  assert [i["path"] for i in local.stats["inputs"]] == sorted(
    os.path.join(corpus, n) for n in os.listdir(corpus) if not n.startswith((".", "__"))
  )
  with pytest.raises(FileExistsError, match=r"beam: already holds a dataset .* `overwrite=True` replaces it"):
    convert_with_beam([corpus], str(tmp_path / "beam"), "mix", OPTIONS, [])


def test_the_output_depends_on_neither_units_nor_workers(corpus, tmp_path):
  whole = convert([corpus], str(tmp_path / "whole"), "mix", dataclasses.replace(OPTIONS, workers=1, unit_bytes=1 << 40))
  for workers, unit in ((1, 10_000), (2, 4_096), (2, 0)):
    out = str(tmp_path / f"w{workers}-{unit}")
    convert([corpus], out, "mix", dataclasses.replace(OPTIONS, workers=workers, unit_bytes=unit))
    assert_same_files(str(tmp_path / "whole"), out)
  assert whole.num_records > 5000


def test_units_cut_at_line_starts_and_know_their_line(tmp_path):
  path = tmp_path / "lines.jsonl"
  path.write_text("".join(json.dumps({"text": "x" * (i % 50)}) + "\n" for i in range(2000)))
  units = plan_units([str(path)], [Jsonl()], unit_bytes=5_000)
  assert len(units) > 5 and units[0].start == 0 and units[-1].end == path.stat().st_size
  data = path.read_bytes()
  for before, unit in zip(units, units[1:]):
    assert before.end == unit.start and data[unit.start - 1 : unit.start] == b"\n"
    assert unit.first == data[: unit.start].count(b"\n") + 1
    assert unit.end - unit.start >= 5_000 or unit is units[-1]


def test_a_bad_line_deep_in_a_later_unit_names_its_true_line(tmp_path):
  lines = [json.dumps({"text": f"document {i}"}) for i in range(5000)]
  lines[4321] = "{oops"
  (tmp_path / "big.jsonl").write_text("\n".join(lines) + "\n")
  with pytest.raises(InputFormatError, match=r"big\.jsonl:4322: malformed JSON"):
    convert([str(tmp_path / "big.jsonl")], str(tmp_path / "out"), "big", ConvertOptions(workers=2, unit_bytes=2_000))
  assert not os.path.exists(tmp_path / "out" / "manifest.json")


def test_a_null_parquet_row_in_a_later_row_group_names_its_row(tmp_path):
  values = [f"row {i}" for i in range(1000)]
  values[777] = None
  pq.write_table(pa.table({"text": values}), tmp_path / "t.parquet", row_group_size=50)
  with pytest.raises(InputFormatError, match=r"t\.parquet:row 777: column 'text' is null"):
    convert([str(tmp_path / "t.parquet")], str(tmp_path / "out"), "t", ConvertOptions(workers=1, unit_bytes=500))
  manifest = convert(
    [str(tmp_path / "t.parquet")],
    str(tmp_path / "out"),
    "t",
    ConvertOptions(workers=2, unit_bytes=500, skip_invalid=True),
  )
  assert manifest.num_records == 999 and manifest.stats["invalid_examples"] == [
    "{}:row 777: column 'text' is null".format(tmp_path / "t.parquet")
  ]


def test_progress_counts_bytes_and_documents_before_the_first_unit_ends(tmp_path):
  (tmp_path / "one.jsonl").write_text("".join(json.dumps({"text": "w " * 40}) + "\n" for _ in range(20_000)))
  reports = []
  convert(
    [str(tmp_path / "one.jsonl")],
    str(tmp_path / "out"),
    "one",
    ConvertOptions(workers=1, unit_bytes=1 << 40, batch_documents=256),
    lambda *r: reports.append(r),
  )
  tokenize = [r for r in reports if r[0] == "tokenize"]
  size = (tmp_path / "one.jsonl").stat().st_size
  # One unit (the whole file), yet progress arrives every 256 documents: bytes and documents rise to the totals.
  assert len(tokenize) >= 20_000 // 256 and tokenize[-1][1:] == (size, size, 20_000)
  assert all(a[1] <= b[1] and a[3] <= b[3] for a, b in zip(tokenize, tokenize[1:]))
  assert 0 < tokenize[0][1] < size


def test_include_exclude_and_directory_walks(corpus, tmp_path):
  only = convert(
    [corpus], str(tmp_path / "only"), "j", dataclasses.replace(OPTIONS, include=("*.jsonl*",), exclude=("*.gz",))
  )
  assert [os.path.basename(i["path"]) for i in only.stats["inputs"]] == ["a.jsonl", "c.jsonl.zst"]
  with pytest.raises(FileNotFoundError, match=r"no files found in .*\(include \['\*\.csv'\]"):
    convert([corpus], str(tmp_path / "none"), "n", dataclasses.replace(OPTIONS, include=("*.csv",)))


def test_damaged_zstd_input_is_named(tmp_path):
  (tmp_path / "x.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(b'{"text": "fine"}\n' * 100)[:-9])
  with pytest.raises(InputFormatError, match=r"x\.jsonl\.zst: not a readable zstd file"):
    convert([str(tmp_path / "x.jsonl.zst")], str(tmp_path / "out"), "x", ConvertOptions(workers=1))


def test_overwrite_replaces_and_plain_runs_refuse(corpus, tmp_path):
  src = os.path.join(corpus, "e.txt")
  out = str(tmp_path / "ds")
  convert([src], out, "e", ConvertOptions(workers=1, shard_bytes=500))
  with pytest.raises(FileExistsError, match=r"already holds a dataset .* `overwrite=True` replaces it"):
    convert([src], out, "e", ConvertOptions(workers=1))
  manifest = convert([src], out, "e", ConvertOptions(workers=1), overwrite=True)
  assert len(manifest.shards) == 1
  assert sorted(os.listdir(out)) == ["e-00000.array_record", "e-00000.lengths.npy", "manifest.json"]
  assert not [n for n in os.listdir(tmp_path) if n.startswith(".")]  # no staging directory left beside it
  (tmp_path / "ds" / "notes.txt").write_text("mine")  # not a dataset's file: refused, even with overwrite
  with pytest.raises(FileExistsError, match=r"--out .*ds: holds files that are not a jaxdata dataset \(notes.txt\)"):
    convert([src], out, "e", ConvertOptions(workers=1), overwrite=True)
  assert (tmp_path / "ds" / "notes.txt").read_text() == "mine"


def test_an_output_inside_an_input_folder_is_refused(corpus, tmp_path):
  folder = tmp_path / "corpus"
  folder.mkdir()
  (folder / "a.txt").write_text("some text\n")
  with pytest.raises(ValueError, match=r"--out .*corpus/ds: lies inside the input .*corpus"):
    convert([str(folder)], str(folder / "ds"), "a", ConvertOptions(workers=1))
  with pytest.raises(ValueError, match="lies inside the input"):
    convert([str(folder)], str(folder), "a", ConvertOptions(workers=1))


def test_a_failed_overwrite_leaves_the_old_dataset_whole(corpus, tmp_path):
  src, out = os.path.join(corpus, "e.txt"), str(tmp_path / "ds")
  old = convert([src], out, "e", ConvertOptions(workers=1))
  bad = tmp_path / "bad.jsonl"
  bad.write_text('{"text": "fine"}\nnot json\n')
  with pytest.raises(InputFormatError, match="bad.jsonl:2: malformed JSON"):
    convert([str(bad)], out, "e", ConvertOptions(workers=1), overwrite=True)
  with open_dataset(out) as dataset:
    assert dataset.manifest.fingerprint == old.fingerprint and len(dataset) == old.num_records
  assert not [n for n in os.listdir(tmp_path) if n.startswith(".")]


def test_global_flags_go_before_or_after_the_command(corpus, tmp_path, capsys):
  src = os.path.join(corpus, "e.txt")
  assert main(["-q", "convert", src, "--out", str(tmp_path / "a"), "--name", "a"]) == 0
  assert main(["convert", src, "--out", str(tmp_path / "b"), "--name", "b", "-q"]) == 0
  assert main(["convert", src, "--out", str(tmp_path / "c"), "--name", "a", "--runner", "beam", "-q"]) == 0
  assert_same_files(str(tmp_path / "a"), str(tmp_path / "c"))
  assert (
    main(
      [
        "convert",
        src,
        "--out",
        str(tmp_path / "a"),
        "--name",
        "a",
        "--overwrite",
        "--quiet",
        "--text-mode",
        "paragraph",
        "--check-roundtrip",
        "5",
      ]
    )
    == 0
  )
  assert "round trip: 5 of 5 documents decode to their text" in capsys.readouterr().out


def test_a_normalising_tokenizer_is_warned_and_the_roundtrip_check_counts_mismatches(tmp_path, capsys):
  texts = [f"line one {i}\n\n   spaced  out\ttab {i}" for i in range(40)]
  sentencepiece_model(texts, str(tmp_path), 40)
  (tmp_path / "in.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
  code = main(
    [
      "convert",
      str(tmp_path / "in.jsonl"),
      "--out",
      str(tmp_path / "ds"),
      "--name",
      "sp",
      "-q",
      "--tokenizer",
      f"sp:{tmp_path / 'sp.model'}",
      "--check-roundtrip",
      "4",
    ]
  )
  printed = capsys.readouterr().out
  assert code == 2
  assert "warning: the tokenizer does not round-trip text" in printed
  assert (
    "round trip: 0 of 4 documents decode to their text" in printed and "document 0: differs at character" in printed
  )


def test_plan_shards_matches_the_writer_on_random_lengths():
  rng = np.random.default_rng(0)
  for _ in range(30):
    lengths = rng.integers(1, 60, int(rng.integers(1, 300)))
    shard_bytes = int(rng.integers(1, 400))
    out = tempfile.mkdtemp()
    writer = DatasetWriter(out, "t", np.dtype("<u2"), {"kind": "x"}, shard_bytes)
    cut = 0
    while cut < lengths.size:  # fed in random chunks: the writer's cuts do not depend on them
      step = int(rng.integers(1, 50))
      writer.write_documents(np.zeros(int(lengths[cut : cut + step].sum()), np.uint16), lengths[cut : cut + step])
      cut += step
    manifest = writer.finish()
    assert np.cumsum([s.num_records for s in manifest.shards]).tolist() == plan_shards(lengths, 2, shard_bytes).tolist()


def test_a_tokenizer_file_of_the_wrong_kind_says_which_prefix_it_needs(tmp_path, capsys):
  texts = [f"some text {i}" for i in range(30)]
  sentencepiece_model(texts, str(tmp_path), 30)
  (tmp_path / "tok.json").write_text('{"not": "a tokenizer"}')
  (tmp_path / "in.jsonl").write_text('{"text": "x"}\n')
  for spec, hint in (
    (f"hf:{tmp_path / 'sp.model'}", "a SentencePiece model? use sp:FILE"),
    (f"sp:{tmp_path / 'tok.json'}", "a Hugging Face tokenizer? use hf:FILE"),
  ):
    assert (
      main(
        ["convert", str(tmp_path / "in.jsonl"), "--out", str(tmp_path / "o"), "--name", "o", "-q", "--tokenizer", spec]
      )
      == 1
    )
    err = capsys.readouterr().err
    assert hint in err and "Traceback" not in err


def test_two_beam_conversions_sharing_a_temp_location_keep_their_own_data(tmp_path):
  """Each run's scratch is a folder of its own, removed at the end: two conversions at once with one
  --temp_location write each its own corpus (checked document by document), and leave no scratch."""
  corpora = []
  for i, words in enumerate((["alpha", "beta"], ["gamma", "delta"])):
    rng = random.Random(i)
    path = tmp_path / f"in{i}.jsonl"
    texts = [" ".join(rng.choice(words) for _ in range(rng.randint(1, 80))) for _ in range(1500)]
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    corpora.append((path, texts))
  temp = tmp_path / "temp"
  runs = [
    subprocess.Popen(
      [
        "jaxdata",
        "convert",
        str(path),
        "--out",
        str(tmp_path / f"out{i}"),
        "--name",
        f"c{i}",
        "-q",
        "--runner",
        "beam",
        "--shard-size",
        "20000",
        "--beam-options",
        f"--temp_location={temp} --direct_num_workers=2",
      ],
      stdout=subprocess.PIPE,
      stderr=subprocess.STDOUT,
      text=True,
    )
    for i, (path, _) in enumerate(corpora)
  ]
  for run in runs:
    output = run.communicate(timeout=300)[0]
    assert run.returncode == 0, output[-2000:]
  for i, (_, texts) in enumerate(corpora):
    with TokenDataset(str(tmp_path / f"out{i}")) as dataset:
      dataset.verify()
      read = dataset.read_global(np.arange(dataset.num_records)).to_list()
      assert sorted(ByteTokenizer().decode(d) for d in read) == sorted(texts)
  assert os.listdir(temp / "jaxdata-scratch") == []  # every run removed its folder


def test_a_cluster_runner_with_local_scratch_or_output_is_refused_before_it_runs(corpus, tmp_path):
  for args, named in (
    (["--runner=DataflowRunner", "--temp_location=gs://b/tmp"], "out_dir"),
    (["--runner=DataflowRunner", "--gcp_temp_location=/tmp/x"], "scratch"),
  ):
    out = str(tmp_path / "o") if named == "out_dir" else "gs://bucket/out"
    with pytest.raises(ValueError, match=rf"{named}: .* the DataflowRunner runs on other machines"):
      convert_with_beam([corpus], out, "mix", OPTIONS, args)
  assert not os.path.exists(tmp_path / "o")


def test_a_failed_beam_conversion_removes_its_scratch_too(tmp_path):
  """Units of a good input are tokenized into scratch before the bad one fails the run: none is left."""
  inputs = tmp_path / "inputs"  # (an output inside the input folder is refused)
  inputs.mkdir()
  (inputs / "a-good.jsonl").write_text("".join(json.dumps({"text": f"document {i}"}) + "\n" for i in range(2000)))
  (inputs / "b-bad.jsonl").write_text('{"text": "fine"}\n{not json\n')
  temp = tmp_path / "temp"
  with pytest.raises(Exception, match=r"b-bad\.jsonl:2"):
    convert_with_beam(
      [str(inputs)], str(tmp_path / "out"), "bad", ConvertOptions(unit_bytes=4096), [f"--temp_location={temp}"]
    )
  assert not (temp / "jaxdata-scratch").exists() or os.listdir(temp / "jaxdata-scratch") == []


def test_a_beam_failure_is_one_named_line_and_beams_own_lines_go_to_a_kept_log(tmp_path):
  (tmp_path / "in.jsonl").write_text("".join(json.dumps({"text": f"doc {i}"}) + "\n" for i in range(50)) + "{broken\n")
  command = ["jaxdata", "convert", str(tmp_path / "in.jsonl"), "--name", "x", "--runner", "beam"]
  command += ["--beam-options=--direct_num_workers=2 --direct_running_mode=multi_processing"]
  env = {**os.environ, "TMPDIR": str(tmp_path)}  # where the log goes
  failed = subprocess.run([*command, "--out", str(tmp_path / "bad")], capture_output=True, text=True, env=env)
  assert failed.returncode == 1
  lines = [line for line in failed.stderr.splitlines() if line.strip()]
  assert len(lines) == 1, failed.stderr[-3000:]  # no Beam logging, no worker traceback
  match = re.match(r"jaxdata convert: error: .*in.jsonl:51: malformed JSON .*\(Beam's log: (\S+)\)$", lines[0])
  assert match, lines[0]
  assert "Traceback" in open(match.group(1), encoding="utf-8").read()  # what Beam said is kept
  assert not (tmp_path / "bad").exists()  # no empty --out left behind
  in_process = command[:-1]  # Beam's default runner raises in this process: the same one line, the log named
  failed = subprocess.run([*in_process, "--out", str(tmp_path / "bad")], capture_output=True, text=True, env=env)
  lines = [line for line in failed.stderr.splitlines() if line.strip()]
  assert failed.returncode == 1 and len(lines) == 1, failed.stderr[-3000:]
  assert re.match(r"jaxdata convert: error: .*in.jsonl:51: malformed JSON \(.*\) \(Beam's log: \S+\)$", lines[0])
  assert not (tmp_path / "bad").exists()
  for log in [n for n in os.listdir(tmp_path) if n.startswith("jaxdata-beam-")]:
    if log != os.path.basename(match.group(1)):
      os.remove(tmp_path / log)  # (the check below counts the first run's)
  (tmp_path / "in.jsonl").write_text("".join(json.dumps({"text": f"doc {i}"}) + "\n" for i in range(50)))
  done = subprocess.run([*command, "--out", str(tmp_path / "good")], capture_output=True, text=True, env=env)
  assert done.returncode == 0 and not done.stderr.strip(), done.stderr[-3000:]
  assert [n for n in os.listdir(tmp_path) if n.startswith("jaxdata-beam-")] == [os.path.basename(match.group(1))]


def _damaged_archives(root) -> dict[str, bytes]:
  """Compressed inputs damaged as a copy or a download goes wrong: name -> bytes."""
  lines = "".join(json.dumps({"text": f"document number {i} " * 20}) + "\n" for i in range(2000)).encode()
  write_tfrecord(str(root / "plain.tfrecord"), [example({"text": f"record {i} " * 30}) for i in range(500)])
  tfrecord = (root / "plain.tfrecord").read_bytes()
  out = {}
  for suffix, data in ((".jsonl.gz", lines), (".tfrecord.gz", tfrecord)):
    packed = gzip.compress(data)
    middle = len(packed) // 2
    out[f"flipped{suffix}"] = packed[:middle] + bytes([packed[middle] ^ 0xFF]) + packed[middle + 1 :]
    out[f"header{suffix}"] = packed[:10] + bytes([packed[10] ^ 0xFF]) + packed[11:]  # the deflate stream's start
    out[f"crc{suffix}"] = packed[:-8] + bytes([packed[-8] ^ 1]) + packed[-7:]  # the trailer's CRC
    out[f"half{suffix}"] = packed[:middle]
    out[f"plain{suffix}"] = data  # not gzip at all
  zstd = zstandard.ZstdCompressor().compress(lines)
  out["cut.jsonl.zst"] = zstd[: len(zstd) // 2]
  return out


@pytest.mark.parametrize("runner", ["local", "beam"])
def test_a_damaged_compressed_input_is_named_by_either_runner_and_leaves_nothing(tmp_path, runner):
  for name, data in _damaged_archives(tmp_path).items():
    path = tmp_path / name
    path.write_bytes(data)
    out = tmp_path / f"out-{name}"
    with pytest.raises(InputFormatError) as raised:
      if runner == "local":
        convert([str(path)], str(out), "x", dataclasses.replace(OPTIONS, workers=1))
      else:
        convert_with_beam([str(path)], str(out), "x", OPTIONS, [])
    message = str(raised.value)
    assert name in message and "\n" not in message, (name, message)
    assert not os.path.exists(out / "manifest.json"), name
  # from the CLI: one line naming the file, exit 2, no traceback
  done = subprocess.run(
    ["jaxdata", "convert", str(tmp_path / "half.tfrecord.gz"), "--out", str(tmp_path / "cli"), "--name", "x", "-q"],
    capture_output=True,
    text=True,
  )
  assert done.returncode != 0 and "half.tfrecord.gz: not a readable gzip file" in done.stderr
  assert "Traceback" not in done.stderr


@pytest.mark.slow
def test_an_overwrite_killed_at_any_point_leaves_a_whole_dataset(tmp_path):
  """`jaxdata convert --overwrite` killed while tokenizing, writing or swapping: the directory holds the
  old dataset or the new one, whole and readable, never a mix or nothing."""
  rng = np.random.default_rng(0)
  words = np.array(["alpha", "beta", "gamma", "delta", "epsilon", "zeta"])
  source = tmp_path / "big.jsonl"
  with open(source, "w") as f:
    for _ in range(60_000):
      f.write(json.dumps({"text": " ".join(rng.choice(words, 60))}) + "\n")
  out = str(tmp_path / "ds")
  old = convert([str(source)], out, "big", ConvertOptions(workers=1, shard_bytes=1 << 20))
  argv = [sys.executable, "-m", "jaxdata", "convert", str(source), "--out", out, "--name", "big", "--overwrite", "-q"]
  argv += ["--workers", "1", "--shard-size", str(1 << 19)]  # other shards: the new dataset differs from the old
  seen = set()
  for delay in (0.3, 0.8, 1.5, 2.5, 4.0):
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
      process.wait(timeout=delay)
    except subprocess.TimeoutExpired:
      process.kill()
      process.wait()
    with open_dataset(out) as dataset:  # whole: every shard its manifest names reads
      assert dataset.manifest.num_records == old.num_records
      assert sum(len(dataset[i]) for i in range(0, len(dataset), 997)) > 0
      seen.add(len(dataset.manifest.shards))
  assert seen  # (old, new or both, by timing; either is whole)


def test_a_failed_beam_overwrite_leaves_the_old_dataset_whole_and_a_good_one_replaces_it(corpus, tmp_path):
  src, out = os.path.join(corpus, "e.txt"), str(tmp_path / "ds")
  old = convert([src], out, "e", ConvertOptions(workers=1))
  bad = tmp_path / "bad.jsonl"
  bad.write_text('{"text": "fine"}\nnot json\n')
  with pytest.raises(Exception, match="bad.jsonl:2"):
    convert_with_beam([str(bad)], out, "e", ConvertOptions(), overwrite=True)
  with open_dataset(out) as dataset:
    assert dataset.manifest.fingerprint == old.fingerprint
  assert not [n for n in os.listdir(tmp_path) if n.startswith(".") and "jaxdata-new" in n]
  replaced = convert_with_beam([src], out, "e", ConvertOptions(compression="none"), overwrite=True)
  with open_dataset(out) as dataset:  # the same records, written uncompressed: the same fingerprint
    assert dataset.manifest.fingerprint == replaced.fingerprint == old.fingerprint
    assert dataset.manifest.shards[0].sha256 != old.shards[0].sha256


def test_an_overwrite_keeps_the_folders_permissions_its_symlink_and_refuses_hidden_files(corpus, tmp_path):
  src = os.path.join(corpus, "e.txt")
  real, link = tmp_path / "real", tmp_path / "link"
  real.mkdir()
  os.chmod(real, 0o755)
  os.symlink(real, link)
  convert([src], str(link), "e", ConvertOptions(workers=1))
  convert([src], str(link), "e", ConvertOptions(workers=1, compression="none"), overwrite=True)
  assert os.path.islink(link) and os.readlink(link) == str(real)  # replaced where the link points
  assert (os.stat(real).st_mode & 0o777) == 0o755  # readable by others as before (not mkdtemp's 0700)
  assert sorted(os.listdir(real)) == ["e-00000.array_record", "e-00000.lengths.npy", "manifest.json"]
  assert not [n for n in os.listdir(tmp_path) if n.startswith(".")]
  (real / ".git").mkdir()  # a hidden folder would go with the swapped-out directory: refused instead
  with pytest.raises(FileExistsError, match=r"holds files that are not a jaxdata dataset \(.git\)"):
    convert([src], str(link), "e", ConvertOptions(workers=1), overwrite=True)
