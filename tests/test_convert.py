"""`jaxdata convert`: round trips, tokenizers, determinism, bad input."""

from __future__ import annotations

import filecmp
import gzip
import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import sentencepiece as spm
import zstandard
from tokenizers import Tokenizer, models, pre_tokenizers, trainers

from conftest import make_texts, write_jsonl
from jaxdata import ConvertOptions, InputFormatError, convert
from jaxdata.cli import main
from jaxdata.conversion import ByteTokenizer, TokenizerSpec, load_tokenizer, local_runner
from jaxdata.conversion.tokenizers import dtype_for_vocab_size
from jaxdata.sources import TokenDataset
from pipeline_fixtures import sentencepiece_model


def read_all(directory: str) -> list[list[int]]:
  with TokenDataset(directory) as ds:
    return [doc.tolist() for doc in ds.read_global(np.arange(ds.num_records)).to_list()]


def expected_ids(texts: list[str], spec: TokenizerSpec = TokenizerSpec()) -> list[list[int]]:
  flat, lengths = load_tokenizer(spec).encode_batch(texts)
  docs = np.split(flat, np.cumsum(lengths)[:-1])
  return [d.tolist() for d in docs if d.size]


def check_dataset_consistent(directory: str) -> None:
  """Lengths index == real lengths; manifest totals == sums over shards."""
  with TokenDataset(directory) as ds:
    docs = ds.read_global(np.arange(ds.num_records)).to_list()
    assert ds.lengths.tolist() == [d.size for d in docs]
    assert ds.manifest.num_tokens == sum(d.size for d in docs) == ds.lengths.sum()
    assert ds.manifest.num_records == len(docs) == ds.manifest.stats["documents"]
    for i, shard in enumerate(ds.manifest.shards):
      lengths = np.load(os.path.join(directory, shard.lengths_path))
      assert shard.num_records == lengths.size
      assert shard.num_tokens == lengths.sum()
      assert shard.num_bytes == os.path.getsize(ds.shard_path(i))


def test_jsonl_round_trip_over_several_shards(tmp_path, texts):
  src = write_jsonl(str(tmp_path / "in.jsonl"), texts)
  manifest = convert([src], str(tmp_path / "ds"), "web", ConvertOptions(shard_bytes=4096, workers=1))
  assert len(manifest.shards) > 3
  assert read_all(str(tmp_path / "ds")) == expected_ids(texts)
  assert manifest.dtype == "uint16"
  assert manifest.tokenizer["kind"] == "byte"
  check_dataset_consistent(str(tmp_path / "ds"))


def test_byte_tokenizer_decodes_back_to_text(tmp_path, texts):
  src = write_jsonl(str(tmp_path / "in.jsonl"), texts[:20])
  convert([src], str(tmp_path / "ds"), "web", ConvertOptions(workers=1))
  with TokenDataset(str(tmp_path / "ds")) as ds:
    decoded = [ByteTokenizer().decode(d) for d in ds.read_global(np.arange(20)).to_list()]
  assert decoded == texts[:20]


def test_parquet_round_trip_with_configured_column(tmp_path, texts):
  table = pa.table({"body": texts, "n": list(range(len(texts)))})
  pq.write_table(table, tmp_path / "in.parquet", row_group_size=64)
  convert([str(tmp_path / "in.parquet")], str(tmp_path / "ds"), "pq", ConvertOptions(field="body", workers=1))
  assert read_all(str(tmp_path / "ds")) == expected_ids(texts)
  check_dataset_consistent(str(tmp_path / "ds"))


@pytest.mark.parametrize("mode", ["file", "line", "paragraph"])
def test_text_round_trip_per_mode(tmp_path, texts, mode):
  files = []
  for i in range(3):
    path = tmp_path / "in" / f"part{i}.txt"
    path.parent.mkdir(exist_ok=True)
    path.write_text("\n\n".join(texts[i * 10 : i * 10 + 10]) + "\n", encoding="utf-8")
    files.append(path)
  convert([str(tmp_path / "in")], str(tmp_path / "ds"), "txt", ConvertOptions(text_mode=mode, workers=1))
  if mode == "file":
    docs = [p.read_text(encoding="utf-8") for p in files]
  elif mode == "line":
    docs = [line for p in files for line in p.read_text(encoding="utf-8").split("\n")[:-1]]
  else:
    docs = texts[:30]
  assert read_all(str(tmp_path / "ds")) == expected_ids(docs)
  check_dataset_consistent(str(tmp_path / "ds"))


def test_huggingface_tokenizer_round_trip(tmp_path, texts):
  tokenizer = Tokenizer(models.BPE(unk_token="[UNK]"))
  tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
  tokenizer.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=120, special_tokens=["[UNK]"]))
  tokenizer.save(str(tmp_path / "tok.json"))
  spec = TokenizerSpec.parse(f"hf:{tmp_path / 'tok.json'}")
  src = write_jsonl(str(tmp_path / "in.jsonl"), texts)
  manifest = convert([src], str(tmp_path / "ds"), "hf", ConvertOptions(tokenizer=spec, workers=1))
  assert read_all(str(tmp_path / "ds")) == expected_ids(texts, spec)
  assert [e.ids for e in tokenizer.encode_batch(texts[:3])] == read_all(str(tmp_path / "ds"))[:3]
  assert manifest.tokenizer["kind"] == "huggingface"
  assert manifest.tokenizer["file"] == "tok.json"
  assert len(manifest.tokenizer["sha256"]) == 64


def test_large_vocabulary_selects_uint32(tmp_path):
  vocab = {"[UNK]": 0, **{f"w{i}": i for i in range(1, 70_000)}}
  tokenizer = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
  tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
  tokenizer.save(str(tmp_path / "big.json"))
  docs = ["w69999 w1 w65536", "w2 w70000"]
  src = write_jsonl(str(tmp_path / "in.jsonl"), docs)
  spec = TokenizerSpec("huggingface", str(tmp_path / "big.json"))
  manifest = convert([src], str(tmp_path / "ds"), "big", ConvertOptions(tokenizer=spec, workers=1))
  assert manifest.dtype == "uint32"
  assert read_all(str(tmp_path / "ds")) == [[69999, 1, 65536], [2, 0]]
  assert dtype_for_vocab_size(65536).name == "uint16"
  assert dtype_for_vocab_size(65537).name == "uint32"


def test_sentencepiece_tokenizer_round_trip(tmp_path, texts):
  sentencepiece_model(texts, str(tmp_path), 60)
  spec = TokenizerSpec.parse(str(tmp_path / "sp.model"))
  assert spec.kind == "sentencepiece"
  src = write_jsonl(str(tmp_path / "in.jsonl"), texts)
  manifest = convert([src], str(tmp_path / "ds"), "sp", ConvertOptions(tokenizer=spec, workers=1))
  processor = spm.SentencePieceProcessor(model_file=str(tmp_path / "sp.model"))
  assert read_all(str(tmp_path / "ds")) == processor.encode(texts)
  assert manifest.tokenizer["kind"] == "sentencepiece"


def test_output_is_byte_identical_across_runs_and_worker_counts(tmp_path):
  for i in range(4):
    write_jsonl(
      str(tmp_path / "in" / f"{i}.jsonl")
      if (tmp_path / "in").exists()
      else (os.makedirs(tmp_path / "in") or str(tmp_path / "in" / f"{i}.jsonl")),
      make_texts(80, seed=i),
    )
  inputs = [str(tmp_path / "in")]
  options = ConvertOptions(shard_bytes=8192)
  convert(inputs, str(tmp_path / "a"), "d", ConvertOptions(shard_bytes=8192, workers=1))
  convert(inputs, str(tmp_path / "b"), "d", ConvertOptions(shard_bytes=8192, workers=2))
  convert(inputs, str(tmp_path / "c"), "d", options)
  names = sorted(os.listdir(tmp_path / "a"))
  assert len([n for n in names if n.endswith(".array_record")]) > 2
  for other in ("b", "c"):
    assert sorted(os.listdir(tmp_path / other)) == names
    match, mismatch, errors = filecmp.cmpfiles(tmp_path / "a", tmp_path / other, names, shallow=False)
    assert (mismatch, errors) == ([], [])


def test_empty_documents_are_skipped_and_counted(tmp_path):
  src = write_jsonl(str(tmp_path / "in.jsonl"), ["a", "", "bc", "", ""])
  manifest = convert([src], str(tmp_path / "ds"), "e", ConvertOptions(workers=1))
  assert manifest.stats["skipped_empty"] == 3
  assert manifest.stats["inputs"][0]["skipped_empty"] == 3
  assert read_all(str(tmp_path / "ds")) == expected_ids(["a", "bc"])


def write_bad_jsonl(path) -> str:
  lines = [
    '{"text": "fine"}',
    '{"text": "ok too"}',
    '{"text": broken',
    '{"body": "no text"}',
    '{"text": 17}',
    "[1, 2]",
    '{"text": "last"}',
  ]
  path.write_text("\n".join(lines) + "\n")
  return str(path)


@pytest.mark.parametrize("workers", [1, 2])
def test_malformed_line_names_file_and_line(tmp_path, workers):
  src = write_bad_jsonl(tmp_path / "bad.jsonl")
  write_jsonl(str(tmp_path / "good.jsonl"), ["x"])
  with pytest.raises(InputFormatError, match=r"bad\.jsonl:3: malformed JSON"):
    convert([src, str(tmp_path / "good.jsonl")], str(tmp_path / "ds"), "b", ConvertOptions(workers=workers))
  assert not os.path.exists(tmp_path / "ds")  # nothing half-written


def test_missing_field_names_file_line_and_field(tmp_path):
  (tmp_path / "m.jsonl").write_text('{"text": "a"}\n{"content": "b"}\n')
  with pytest.raises(InputFormatError, match=r"m\.jsonl:2: missing field 'text'"):
    convert([str(tmp_path / "m.jsonl")], str(tmp_path / "ds"), "m", ConvertOptions(workers=1))


def test_skip_invalid_counts_every_skipped_record(tmp_path):
  src = write_bad_jsonl(tmp_path / "bad.jsonl")
  manifest = convert([src], str(tmp_path / "ds"), "b", ConvertOptions(skip_invalid=True, workers=1))
  assert manifest.stats["skipped_invalid"] == 4
  examples = manifest.stats["invalid_examples"]
  assert [e.split(": ")[0].rsplit(":", 1)[1] for e in examples] == ["3", "4", "5", "6"]
  assert "missing field 'text'" in examples[1]
  assert "is int, not a string" in examples[2]
  assert read_all(str(tmp_path / "ds")) == expected_ids(["fine", "ok too", "last"])
  with open(tmp_path / "ds" / "manifest.json") as f:
    assert json.load(f)["stats"]["skipped_invalid"] == 4


def test_parquet_errors_name_the_column(tmp_path):
  pq.write_table(pa.table({"body": ["a"]}), tmp_path / "a.parquet")
  with pytest.raises(InputFormatError, match=r"a\.parquet: no column 'text' \(columns: body\)"):
    convert([str(tmp_path / "a.parquet")], str(tmp_path / "ds"), "p", ConvertOptions(workers=1))
  pq.write_table(pa.table({"text": ["a", None, "b"]}), tmp_path / "n.parquet")
  with pytest.raises(InputFormatError, match=r"n\.parquet:row 1: column 'text' is null"):
    convert([str(tmp_path / "n.parquet")], str(tmp_path / "ds"), "p", ConvertOptions(workers=1))
  pq.write_table(pa.table({"text": [1, 2]}), tmp_path / "i.parquet")
  with pytest.raises(InputFormatError, match=r"i\.parquet: column 'text' has type int64"):
    convert([str(tmp_path / "i.parquet")], str(tmp_path / "ds"), "p", ConvertOptions(workers=1))


def test_bad_paths_and_options_are_named(tmp_path):
  with pytest.raises(FileNotFoundError, match="nope.jsonl does not exist"):
    convert([str(tmp_path / "nope.jsonl")], str(tmp_path / "ds"), "x")
  (tmp_path / "data.csv").write_text("a,b\n")
  with pytest.raises(ValueError, match=r"data\.csv: cannot tell the input format"):
    convert([str(tmp_path / "data.csv")], str(tmp_path / "ds"), "x")
  with pytest.raises(ValueError, match="shard_bytes"):
    ConvertOptions(shard_bytes=0)
  with pytest.raises(ValueError, match="text_mode"):
    ConvertOptions(text_mode="sentence")
  with pytest.raises(ValueError, match="cannot tell the kind"):
    TokenizerSpec.parse("gpt2")
  with pytest.raises(FileNotFoundError, match="missing.json does not exist"):
    load_tokenizer(TokenizerSpec("huggingface", str(tmp_path / "missing.json")))


def test_existing_dataset_is_not_overwritten(tmp_path):
  src = write_jsonl(str(tmp_path / "in.jsonl"), ["a"])
  convert([src], str(tmp_path / "ds"), "x", ConvertOptions(workers=1))
  before = (tmp_path / "ds" / "manifest.json").read_bytes()
  with pytest.raises(FileExistsError, match="already holds a dataset"):
    convert([src], str(tmp_path / "ds"), "x", ConvertOptions(workers=1))
  assert (tmp_path / "ds" / "manifest.json").read_bytes() == before


def test_cli_convert_reports_skips_and_errors(tmp_path, capsys, monkeypatch):
  monkeypatch.setenv("COLUMNS", "400")  # the lines checked below hold paths: unwrapped at any tmp_path length
  src = write_bad_jsonl(tmp_path / "bad.jsonl")
  out = str(tmp_path / "ds")
  assert main(["convert", "-q", src, "--out", out, "--name", "b"]) == 1
  assert "bad.jsonl:3: malformed JSON" in capsys.readouterr().err
  assert (
    main(
      ["convert", "-q", src, "--out", out, "--name", "b", "--skip-invalid", "--shard-size", "1KiB", "--workers", "1"]
    )
    == 0
  )
  printed = capsys.readouterr().out
  assert "skipped 4 invalid records" in printed
  assert "bad.jsonl:4: missing field 'text'" in printed
  assert read_all(out) == expected_ids(["fine", "ok too", "last"])


@pytest.mark.slow
@pytest.mark.parametrize("suffix", ["", ".gz", ".zst"])
@pytest.mark.parametrize("workers", [1, 2])
def test_progress_bars_count_their_own_units_and_end_at_their_totals(tmp_path, suffix, workers):
  """scan and tokenize count input bytes (a compressed file's own bytes: never past 100%); write counts
  documents. Each bar rises and ends exactly at its total."""
  path = write_jsonl(str(tmp_path / "a.jsonl"), make_texts(3_000, seed=4))
  if suffix == ".gz":
    with open(path, "rb") as f, gzip.open(path + suffix, "wb") as out:
      out.write(f.read())
  elif suffix == ".zst":
    with open(path, "rb") as f, open(path + suffix, "wb") as out:
      out.write(zstandard.ZstdCompressor().compress(f.read()))
  write_jsonl(str(tmp_path / "b.jsonl"), make_texts(500, seed=5))
  inputs = [path + suffix, str(tmp_path / "b.jsonl")]
  seen: dict[str, list[tuple[int, int]]] = {}
  manifest = convert(
    inputs,
    str(tmp_path / "out"),
    "p",
    ConvertOptions(workers=workers, unit_bytes=1 << 16),
    lambda phase, done, total, documents: seen.setdefault(phase, []).append((done, total)),
  )
  sizes = sum(os.path.getsize(p) for p in inputs)
  for phase, total in (("tokenize", sizes), ("write", manifest.num_records)):
    done = [d for d, _ in seen[phase]]
    assert {t for _, t in seen[phase]} == {total}, phase
    assert done == sorted(done) and done[-1] == total and max(done) <= total, phase


def test_ctrl_c_while_writing_shards_says_so_and_leaves_no_partial_shard(tmp_path, monkeypatch, capsys):
  src = tmp_path / "in.jsonl"
  src.write_text("".join(json.dumps({"text": f"document {i} " * 40}) + "\n" for i in range(3000)))
  written = []
  real = local_runner.write_job

  def interrupted_after_one(job, *args):
    if written:
      raise KeyboardInterrupt
    written.append(real(job, *args))
    return written[-1]

  monkeypatch.setattr(local_runner, "write_job", interrupted_after_one)
  out = tmp_path / "out"
  argv = ["convert", str(src), "--out", str(out), "--name", "x", "--workers", "1", "--shard-size", "20000", "-q"]
  assert main(argv) == 130
  assert "jaxdata convert: interrupted (Ctrl-C); what it had begun to write was removed" in capsys.readouterr().err
  assert len(written) == 1 and not out.exists()  # the finished shard went too: no dataset is half there
  leftovers = [p.name for p in tmp_path.iterdir() if p.name.startswith(".jaxdata-convert-")]
  assert not leftovers
