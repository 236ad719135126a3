"""Megatron and flat token files read in place: round trips, metadata only, errors that name the file,
and documents from them in a pipeline like any other dataset."""

from __future__ import annotations

import dataclasses
import functools
import gzip
import json
import os
import struct
import subprocess
import sys

import numpy as np
import pytest

from checkpoint_property import assert_restores_exactly
from flat_fixtures import (
  lying_megatron,
  random_documents,
  write_dolma_memmap,
  write_dolma_metadata,
  write_flat,
  write_megatron,
)
from jaxdata import DatasetError, Pipeline, PipelineConfig
from jaxdata.cli import main
from jaxdata.sources.boundaries import DocumentBoundaries
from jaxdata.sources.dataset import ReadOptions
from jaxdata.sources.flat_index import build_flat_index
from jaxdata.sources.manifest import Manifest
from jaxdata.sources.opening import open_dataset
from jaxdata.sources.sampling_windows import WindowOptions
from pipeline_fixtures import digest, write_coded_dataset

EOS = 0


@pytest.fixture(scope="module")
def documents() -> list[list[int]]:
  return random_documents(np.random.default_rng(3), 300, eos_id=EOS)


def megatron_corpus(directory, documents, dtype=np.dtype(np.uint16)) -> list[str]:
  """Two .bin/.idx pairs; documents of more than 3 tokens are stored as two sequences."""
  os.makedirs(directory, exist_ok=True)
  as_sequences = [[d[: len(d) // 2], d[len(d) // 2 :]] if len(d) > 3 else [d] for d in documents]
  prefixes = [os.path.join(directory, f"part{i}") for i in range(2)]
  write_megatron(prefixes[0], as_sequences[:170], dtype)
  write_megatron(prefixes[1], as_sequences[170:], dtype)
  return prefixes


@pytest.mark.parametrize("dtype", [np.dtype(np.uint16), np.dtype(np.int32)])
@pytest.mark.parametrize("reader", ["mmap", "tensorstore"])
def test_every_megatron_document_reads_back_byte_identical(tmp_path, documents, dtype, reader):
  prefixes = megatron_corpus(tmp_path / "meg", documents, dtype)
  manifest = build_flat_index("megatron", [prefixes[0] + ".idx", prefixes[1]])
  assert (manifest.num_records, manifest.dtype) == (len(documents), "uint16" if dtype == np.uint16 else "uint32")
  order = np.random.default_rng(0).permutation(len(documents))
  with open_dataset(str(tmp_path / "meg"), ReadOptions(flat_reader=reader)) as dataset:
    got = dataset.read_global(order).to_list()
    dataset.verify()
  assert [g.tolist() for g in got] == [documents[i] for i in order]


@pytest.mark.parametrize("boundaries", ["eos", "offsets"])
def test_every_flat_document_reads_back_byte_identical(tmp_path, documents, boundaries):
  corpus = tmp_path / "corpus"
  write_flat(str(corpus / "a.bin"), documents[:100], np.uint32)
  write_flat(str(corpus / "b.bin"), documents[100:], np.uint32)
  if boundaries == "offsets":
    for name, part in (("a.bin", documents[:100]), ("b.bin", documents[100:])):
      lengths = np.array([len(d) for d in part])
      np.save(corpus / f"{name}.offsets.npy", np.cumsum(lengths) - lengths)
  build_flat_index(
    "flat",
    [str(corpus / "a.bin"), str(corpus / "b.bin")],
    dtype="uint32",
    boundaries=DocumentBoundaries.eos(EOS) if boundaries == "eos" else DocumentBoundaries.offsets(),
  )
  order = np.random.default_rng(1).permutation(len(documents))
  with open_dataset(str(corpus)) as dataset:
    assert dataset.read_global(order).to_list().__len__() == len(documents)
    assert [g.tolist() for g in dataset.read_global(order).to_list()] == [documents[i] for i in order]


def test_index_writes_only_metadata_and_can_live_elsewhere(tmp_path, documents):
  """A read-only corpus keeps its files; the metadata directory names them through data_root."""
  corpus = tmp_path / "corpus"
  write_flat(str(corpus / "a.bin"), documents, np.uint16)
  before = {p: os.path.getsize(corpus / p) for p in os.listdir(corpus)}
  meta = tmp_path / "meta"
  manifest = build_flat_index(
    "flat", [str(corpus / "a.bin")], out_dir=str(meta), dtype="uint16", boundaries=DocumentBoundaries.eos(EOS)
  )
  assert {p: os.path.getsize(corpus / p) for p in os.listdir(corpus)} == before  # nothing added or changed
  assert sorted(os.listdir(meta)) == ["a.blocks.npy", "a.lengths.npy", "a.starts.npy", "manifest.json"]
  # 4 bytes of lengths + 8 of starts per document, 8 per 8 KiB block (+ .npy headers): no tokens copied.
  blocks = -(-os.path.getsize(corpus / "a.bin") // (8 << 10))
  assert sum(os.path.getsize(meta / p) for p in os.listdir(meta) if p.endswith(".npy")) <= (
    12 * len(documents) + 8 * blocks + 3 * 128
  )
  assert manifest.data_root == str(corpus)
  with open_dataset(str(meta)) as dataset:
    assert [d.tolist() for d in dataset.read_global(np.arange(len(documents))).to_list()] == documents


def test_flat_and_megatron_documents_mix_shuffle_pack_and_resume_at_every_step(tmp_path, documents):
  write_flat(str(tmp_path / "flat" / "a.bin"), documents[:150], np.uint16)
  build_flat_index("flat", [str(tmp_path / "flat" / "a.bin")], dtype="uint16", boundaries=DocumentBoundaries.eos(EOS))
  megatron_corpus(tmp_path / "meg", documents[150:] * 2)
  build_flat_index("megatron", [str(tmp_path / "meg" / "part0"), str(tmp_path / "meg" / "part1")])
  cfg = PipelineConfig.from_dict(
    {
      "seed": 5,
      "datasets": [
        {"name": "olmo", "path": str(tmp_path / "flat"), "format": "flat"},
        {"name": "meg", "path": str(tmp_path / "meg"), "shuffle_block_size": 16},
      ],
      "mixture": {"weights": {"olmo": 0.6, "meg": 0.4}},
      "shuffle_block_size": "global",
      "exhausted_policy": "repeat",
      "packing": {"mode": "best_fit", "seq_len": 32},
      "batch": {"global_batch_size": 4},
    }
  )

  def advance(pipe: Pipeline, n: int) -> list[tuple]:
    return [digest(next(pipe)) for _ in range(n)]

  assert_restores_exactly(lambda: Pipeline(cfg, prefetch=0), advance, total=12, stops=range(12))
  # Every non-pad token of a row is a document's token, in order: rebuild each row's segments.
  by_first = {}
  for d in documents:
    by_first.setdefault(d[0], []).append(d)
  with Pipeline(cfg, prefetch=0) as pipe:
    fingerprint = pipe.get_state()["fingerprint"]
    batch = next(pipe)
  for name, path in (("olmo", tmp_path / "flat"), ("meg", tmp_path / "meg")):
    with open_dataset(str(path)) as dataset:  # the checkpoint fingerprint names each manifest's content
      assert fingerprint["content"][name] == dataset.manifest.fingerprint[:12]
  tokens, segments = np.asarray(batch["tokens"]), np.asarray(batch["segment_ids"])
  for row in range(tokens.shape[0]):
    for segment in set(segments[row].tolist()) - {0}:
      piece = tokens[row][segments[row] == segment].tolist()
      assert any(piece == d[o : o + len(piece)] for ds in by_first.values() for d in ds for o in range(len(d)))


def test_the_format_a_config_names_must_match_the_manifest(tmp_path, documents):
  write_flat(str(tmp_path / "flat" / "a.bin"), documents, np.uint16)
  build_flat_index("flat", [str(tmp_path / "flat" / "a.bin")], dtype="uint16", boundaries=DocumentBoundaries.eos(EOS))
  cfg = PipelineConfig.from_dict(
    {
      "datasets": [{"name": "a", "path": str(tmp_path / "flat"), "format": "megatron"}],
      "mixture": {"weights": {"a": 1}},
      "packing": {"seq_len": 16},
    }
  )
  with pytest.raises(DatasetError, match=r"flat: the config says format megatron, its manifest\.json says flat"):
    Pipeline(cfg)


# --------------------------------------------------------------------------- bad input


def test_idx_sizes_that_disagree_with_the_bin_length_are_named(tmp_path, documents):
  prefixes = megatron_corpus(tmp_path, documents)
  with open(prefixes[0] + ".bin", "ab") as f:
    f.write(b"\x00\x00")
  with pytest.raises(
    DatasetError,
    match=r"part0\.idx: its sequence sizes add up to \d+ bytes of uint16, but "
    r".*part0\.bin has \d+ bytes",
  ):
    build_flat_index("megatron", prefixes)
  assert not os.path.exists(tmp_path / "manifest.json")


def test_a_bin_truncated_after_indexing_is_named_when_opened(tmp_path, documents):
  prefixes = megatron_corpus(tmp_path, documents)
  build_flat_index("megatron", prefixes)
  size = os.path.getsize(prefixes[1] + ".bin")
  os.truncate(prefixes[1] + ".bin", size - 6)
  with pytest.raises(DatasetError, match=rf"part1\.bin: {size - 6} bytes on disk, manifest\.json lists {size}"):
    open_dataset(str(tmp_path))
  with pytest.raises(DatasetError, match=r"part1\.bin: shorter than manifest\.json says"):  # through tensorstore
    open_dataset(str(tmp_path), ReadOptions(flat_reader="tensorstore"))


@pytest.mark.parametrize(
  "code, name",
  [
    (7, "float32 in Megatron-LM, float64 in GPT-NeoX"),  # the two tools number their floats the other way
    (6, "float64 in Megatron-LM, float32 in GPT-NeoX"),
    (99, "unknown"),
  ],
)
def test_a_wrong_dtype_code_is_named(tmp_path, code, name):
  write_megatron(str(tmp_path / "x"), [[[5, 6, 7]]], np.dtype(np.uint16), code=code)
  with pytest.raises(DatasetError, match=rf"x\.idx: dtype code {code} \({name}\) is not a token type"):
    build_flat_index("megatron", [str(tmp_path / "x")])


def test_a_truncated_or_foreign_idx_is_named(tmp_path):
  write_megatron(str(tmp_path / "x"), [[[5, 6, 7]], [[8, 9]]])
  data = (tmp_path / "x.idx").read_bytes()
  (tmp_path / "x.idx").write_bytes(data[:-8])
  with pytest.raises(DatasetError, match=r"x\.idx: \d+ bytes, but its header promises 2 sequences"):
    build_flat_index("megatron", [str(tmp_path / "x")])
  (tmp_path / "x.idx").write_bytes(b"not an index at all, just text" * 3)
  with pytest.raises(DatasetError, match=r"x\.idx: not a Megatron index"):
    build_flat_index("megatron", [str(tmp_path / "x")])
  (tmp_path / "x.idx").write_bytes(data[:9] + struct.pack("<Q", 2) + data[17:])
  with pytest.raises(DatasetError, match=r"x\.idx: index version 2"):
    build_flat_index("megatron", [str(tmp_path / "x")])


def test_sequences_not_back_to_back_are_named(tmp_path):
  write_megatron(str(tmp_path / "x"), [[[5, 6, 7]], [[8, 9]]])
  data = bytearray((tmp_path / "x.idx").read_bytes())
  pointer_at = 9 + 8 + 1 + 8 + 8 + 4 * 2 + 8  # the second sequence's pointer
  data[pointer_at : pointer_at + 8] = struct.pack("<q", 2)
  (tmp_path / "x.idx").write_bytes(bytes(data))
  with pytest.raises(DatasetError, match=r"x\.idx: sequence 1 starts at byte 2 .* not 6"):
    build_flat_index("megatron", [str(tmp_path / "x")])


def test_a_flat_file_of_odd_bytes_or_a_missing_file_is_named(tmp_path):
  (tmp_path / "odd.bin").write_bytes(b"\x01\x00\x02")
  with pytest.raises(DatasetError, match=r"odd\.bin: 3 bytes is not a whole number of uint16 tokens"):
    build_flat_index("flat", [str(tmp_path / "odd.bin")], dtype="uint16", boundaries=DocumentBoundaries.eos(0))
  with pytest.raises(DatasetError, match=r"gone\.bin: token file is missing"):
    build_flat_index("flat", [str(tmp_path / "gone.bin")], dtype="uint16", boundaries=DocumentBoundaries.eos(0))


def test_a_file_shorter_than_a_window_is_named(tmp_path):
  write_flat(str(tmp_path / "long.bin"), [list(range(1, 30))])
  write_flat(str(tmp_path / "short.bin"), [[1, 2, 3, 4]])
  build_flat_index("flat", [str(tmp_path / "long.bin"), str(tmp_path / "short.bin")], dtype="uint16")
  with pytest.raises(DatasetError, match=r"short\.bin: the file must hold at least 5 tokens for windows of 4 \+ 1"):
    open_dataset(str(tmp_path), windows=WindowOptions(4))
  assert open_dataset(str(tmp_path), windows=WindowOptions(3)).shard_num_records.tolist() == [26, 1]
  # Inside documents only: short.bin's one document is shorter than 4 + 1 tokens.
  with pytest.raises(DatasetError, match=r"short\.bin: a document must hold at least 5 tokens for windows of 4 \+ 1"):
    open_dataset(str(tmp_path), windows=WindowOptions(4, cross_documents=False))


def test_windows_of_an_arrayrecord_dataset_are_refused_with_the_reason(tmp_path):
  write_coded_dataset(str(tmp_path / "ar"), 0, [10, 20])
  with pytest.raises(DatasetError, match=r"ar: sampling: windows reads token ranges in place"):
    open_dataset(str(tmp_path / "ar"), windows=WindowOptions(4))


def test_the_index_command_indexes_in_place_and_inspect_reads_it(tmp_path, documents, capsys):
  prefixes = megatron_corpus(tmp_path / "meg", documents)
  assert main(["index", "--format", "megatron", prefixes[0] + ".bin", prefixes[1], "-q"]) == 0
  assert main(["inspect", "--json", "--verify", str(tmp_path / "meg")]) == 0
  summary = json.loads(capsys.readouterr().out.split("\n", 1)[1])[0]
  assert (summary["format"], summary["documents"]) == ("megatron", len(documents))
  write_flat(str(tmp_path / "flat" / "a.bin"), documents, np.uint16)
  assert main(["index", "--format", "flat", str(tmp_path / "flat" / "a.bin")]) == 1  # no --dtype
  assert "dtype: a flat token file does not say its dtype" in capsys.readouterr().err
  assert main(["index", str(tmp_path / "flat" / "a.bin"), "--dtype", "uint16", "--eos-id", "0"]) == 1
  assert "--eos-id: applies to --format megatron or flat only" in capsys.readouterr().err


def test_starts_metadata_that_disagrees_with_the_lengths_is_named(tmp_path, documents):
  write_flat(str(tmp_path / "a.bin"), documents, np.uint16)
  build_flat_index("flat", [str(tmp_path / "a.bin")], dtype="uint16", boundaries=DocumentBoundaries.eos(EOS))
  starts = np.load(tmp_path / "a.starts.npy")
  swapped = starts.copy()
  swapped[[3, 4]] = swapped[[4, 3]]  # the ends still agree: the index's hash in the manifest catches it
  np.save(tmp_path / "a.starts.npy", swapped)
  with pytest.raises(DatasetError, match=r"a\.starts\.npy: the document index of a\.bin differs"):
    open_dataset(str(tmp_path))
  manifest = Manifest.load(str(tmp_path))  # as indexed before the hash: only the deep check sees it
  dataclasses.replace(manifest, shards=tuple(dataclasses.replace(s, index_sha256="") for s in manifest.shards)).save(
    str(tmp_path)
  )
  with open_dataset(str(tmp_path)) as dataset, pytest.raises(DatasetError, match=r"a\.starts\.npy: document 3 starts"):
    dataset.verify()
  np.save(tmp_path / "a.starts.npy", starts + 1)
  with pytest.raises(DatasetError, match=r"a\.starts\.npy: documents start at 1"):
    open_dataset(str(tmp_path))
  np.save(tmp_path / "a.starts.npy", starts[:-1])
  with pytest.raises(DatasetError, match=r"a\.starts\.npy: starts index has \d+ entries, shard a\.bin has \d+"):
    open_dataset(str(tmp_path))


def test_a_negative_int32_megatron_id_is_refused_when_indexed_as_written(tmp_path):
  write_megatron(str(tmp_path / "x"), [[[5, 6, 7]], [[8, -5, 9]]], np.dtype(np.int32))
  with pytest.raises(DatasetError, match=r"x\.bin: token 4 is -5, a negative id \(.*x\.idx says int32\)"):
    build_flat_index("megatron", [str(tmp_path / "x")], check_dtype=False)
  assert not (tmp_path / "manifest.json").exists()  # nothing left behind


def test_megatron_empty_documents_are_left_out_and_counted(tmp_path, capsys):
  """Megatron's preprocess_data writes an empty text as a document of no sequence (a repeated
  document-index entry, `add_document([], [])`); the older add_item / end_document API can write a
  document of one empty sequence. Both index; the records are the other documents, in order."""
  documents = [[[5, 6, 7]], [], [[8, 9], [10]], [[]], [], [[11]]]
  write_megatron(str(tmp_path / "x"), documents)
  manifest = build_flat_index("megatron", [str(tmp_path / "x")], check_dtype=False)
  assert manifest.num_records == 3 and manifest.stats["skipped_empty"] == 3
  with open_dataset(str(tmp_path)) as dataset:
    got = [doc.tolist() for doc in dataset.read([0, 0, 0], [0, 1, 2]).to_list()]
  assert got == [[5, 6, 7], [8, 9, 10], [11]]
  assert main(["inspect", str(tmp_path), "--json"]) == 0
  assert json.loads(capsys.readouterr().out)[0]["skipped_empty"] == 3


def test_a_falling_megatron_document_index_names_the_entry(tmp_path):
  write_megatron(str(tmp_path / "x"), [[[5, 6]], [[7]], [[8, 9]]])
  data = bytearray((tmp_path / "x.idx").read_bytes())
  entries_at = 9 + 8 + 1 + 8 + 8 + 4 * 3 + 8 * 3  # doc_idx: 0, 1, 2, 3
  data[entries_at + 8 * 2 : entries_at + 8 * 3] = struct.pack("<q", 0)  # 0, 1, 0, 3
  (tmp_path / "x.idx").write_bytes(bytes(data))
  with pytest.raises(DatasetError, match=r"x\.idx: document index entry 2 \(0\) is below entry 1 \(1\)"):
    build_flat_index("megatron", [str(tmp_path / "x")])


def test_deepspeeds_uint32_code_reads_as_uint32(tmp_path):
  ids = [[[70_000, 5, 131_000]], [[8, 9]]]  # ids above uint16
  write_megatron(str(tmp_path / "x"), [[list(map(int, s)) for s in d] for d in ids], np.dtype(np.int32), code=9)
  manifest = build_flat_index("megatron", [str(tmp_path / "x")], check_dtype=False)
  assert manifest.dtype == "uint32"
  with open_dataset(str(tmp_path)) as dataset:
    assert dataset.read([0], [0]).to_list()[0].tolist() == [70_000, 5, 131_000]


@pytest.mark.parametrize("reader", ["mmap", "tensorstore"])
def test_plain_numpy_arrays_are_read_in_place_past_their_header(tmp_path, documents, reader):
  np.save(tmp_path / "a.npy", np.concatenate([np.asarray(d, np.uint32) for d in documents[:150]]))
  np.save(tmp_path / "b.npy", np.concatenate([np.asarray(d, np.int32) for d in documents[150:]]))
  manifest = build_flat_index(
    "flat", [str(tmp_path / "a.npy"), str(tmp_path / "b.npy")], boundaries=DocumentBoundaries.eos(EOS)
  )
  assert manifest.dtype == "uint32" and manifest.shards[0].data_offset == 128  # the .npy header
  with open_dataset(str(tmp_path), ReadOptions(flat_reader=reader)) as dataset:
    assert [d.tolist() for d in dataset.read_global(np.arange(len(documents))).to_list()] == documents
  np.save(tmp_path / "c.npy", np.zeros((3, 4), np.uint16))
  with pytest.raises(DatasetError, match=r"c\.npy: a token \.npy must be a 1-D little-endian uint16, uint32 or int32"):
    build_flat_index("flat", [str(tmp_path / "c.npy")], out_dir=str(tmp_path / "other"))
  with pytest.raises(DatasetError, match=r"a\.npy: holds uint32 ids, `dtype` says uint16"):
    build_flat_index("flat", [str(tmp_path / "a.npy")], dtype="uint16", out_dir=str(tmp_path / "other"))


def test_out_of_range_reads_name_the_shard_or_record(tmp_path, documents):
  prefixes = megatron_corpus(tmp_path / "meg", documents)
  build_flat_index("megatron", prefixes)
  with open_dataset(str(tmp_path / "meg")) as dataset:
    with pytest.raises(IndexError, match=r"meg: shard id 9 out of range \[0, 2\)"):
      dataset.read([0, 9], [0, 0])
    last = int(dataset.shard_num_records[1])
    with pytest.raises(IndexError, match=rf"record {last} out of range \[0, {last}\)"):
      dataset.read([1], [last])


@pytest.mark.parametrize(
  "stored, claimed_code, looks_like",
  [(np.int32, 8, "uint32 ids read as uint16"), (np.uint16, 4, "uint16 ids read as uint32")],
)
def test_a_megatron_idx_that_lies_about_its_dtype_is_named(tmp_path, stored, claimed_code, looks_like):
  rng = np.random.default_rng(4)
  documents = [rng.integers(1, 361, 2 * int(rng.integers(1, 40))).tolist() for _ in range(400)]  # even lengths
  lying_megatron(str(tmp_path / "m"), documents, np.dtype(stored), claimed_code)
  with pytest.raises(DatasetError, match=rf"m\.bin: looks like {looks_like}.*m\.idx says"):
    build_flat_index("megatron", [str(tmp_path / "m")])
  assert not (tmp_path / "manifest.json").exists()
  assert main(["index", "--format", "megatron", str(tmp_path / "m")]) != 0


def test_an_idx_with_trailing_bytes_is_named(tmp_path, documents):
  write_megatron(str(tmp_path / "m"), [[d] for d in documents[:20]])
  with open(tmp_path / "m.idx", "ab") as f:
    f.write(b"\0" * 7)
  with pytest.raises(DatasetError, match=r"m\.idx: 7 bytes after the 20 sequences"):
    build_flat_index("megatron", [str(tmp_path / "m")])


@pytest.mark.parametrize("eos_id", [70000, -1, 10**30, 1.5])
def test_an_eos_id_the_dtype_cannot_hold_is_refused(tmp_path, documents, eos_id):
  write_flat(str(tmp_path / "a.bin"), documents, np.uint16)
  with pytest.raises(ValueError, match=r"token_id: .*(eos id -?\d+ is not a uint16 id \(0\.\.65535\)|needs an int id)"):
    build_flat_index("flat", [str(tmp_path / "a.bin")], dtype="uint16", boundaries=DocumentBoundaries.eos(eos_id))
  assert not (tmp_path / "manifest.json").exists()


def test_a_npy_whose_header_disagrees_with_its_size_is_named(tmp_path, documents):
  np.save(tmp_path / "a.npy", np.concatenate([np.asarray(d, np.uint16) for d in documents]))
  with open(tmp_path / "a.npy", "r+b") as f:
    f.truncate(os.path.getsize(tmp_path / "a.npy") - 10)
  with pytest.raises(DatasetError, match=r"a\.npy: its \.npy header says \d+ ids \(\d+ bytes\), the file holds"):
    build_flat_index("flat", [str(tmp_path / "a.npy")], boundaries=DocumentBoundaries.eos(EOS))


TRUNCATE_DURING_A_RUN = """
import os, sys, numpy as np
from jaxdata import DatasetError, Pipeline, PipelineConfig
from jaxdata.sources import DocumentBoundaries, build_flat_index
from jaxdata.testing import wait_for_processes
root, workers = sys.argv[1], int(sys.argv[2])
cfg = PipelineConfig.from_dict({"datasets": [{"name": "a", "path": root}], "mixture": {"weights": {"a": 1}},
                                "exhausted_policy": "repeat", "packing": {"seq_len": 16},
                                "batch": {"global_batch_size": 4}})
with Pipeline(cfg, prefetch=0) as reference:
  want = [reference_batch["tokens"].tobytes() for reference_batch, _ in zip(reference, range(40))]
with Pipeline(cfg, prefetch=2 if workers else 0, workers=workers) as pipe:
  if workers:
    wait_for_processes(pipe)
  got = [next(pipe)["tokens"].tobytes() for _ in range(5)]
  # Re-indexing replaces lengths and starts by rename: the run goes on with what it opened.
  build_flat_index("flat", [os.path.join(root, "a.bin")], dtype="uint16", boundaries=DocumentBoundaries.eos(0), force=True)
  for name in ("a.lengths.npy", "a.starts.npy"):
    os.truncate(os.path.join(root, name), 0)  # small index files were read whole when opened
  got += [next(pipe)["tokens"].tobytes() for _ in range(5)]
  assert got == want[:10], "the batches changed"
  os.truncate(os.path.join(root, "a.bin"), 64)
  try:
    for _ in range(30):
      next(pipe)
  except DatasetError as e:
    print("named:", e)
"""


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.parametrize("workers", [0, 2])
def test_truncating_the_files_of_a_running_flat_dataset_is_a_named_error_not_sigbus(tmp_path, documents, workers):
  write_flat(str(tmp_path / "a.bin"), documents, np.uint16)
  build_flat_index("flat", [str(tmp_path / "a.bin")], dtype="uint16", boundaries=DocumentBoundaries.eos(EOS))
  done = subprocess.run(
    [sys.executable, "-c", TRUNCATE_DURING_A_RUN, str(tmp_path), str(workers)],
    capture_output=True,
    text=True,
    timeout=120,
  )
  assert done.returncode == 0, (done.returncode, done.stderr[-2000:])  # SIGBUS: -7
  assert "a.bin: 64 bytes now" in done.stdout and "truncated during the run" in done.stdout, done.stdout


def test_links_out_of_the_dataset_or_its_data_root_are_refused(tmp_path, documents):
  write_flat(str(tmp_path / "ds" / "a.bin"), documents, np.uint16)
  build_flat_index("flat", [str(tmp_path / "ds" / "a.bin")], dtype="uint16", boundaries=DocumentBoundaries.eos(EOS))
  open_dataset(str(tmp_path / "ds")).close()
  (tmp_path / "elsewhere").mkdir()
  for name in ("a.bin", "a.starts.npy"):  # a token file, then an index file, moved out and linked back
    os.replace(tmp_path / "ds" / name, tmp_path / "elsewhere" / name)
    os.symlink(tmp_path / "elsewhere" / name, tmp_path / "ds" / name)
    with pytest.raises(DatasetError, match=rf"ds/{name}: a link that resolves outside the dataset directory"):
      open_dataset(str(tmp_path / "ds"))
    os.remove(tmp_path / "ds" / name)
    os.replace(tmp_path / "elsewhere" / name, tmp_path / "ds" / name)


def test_a_data_root_elsewhere_does_not_tell_the_sizes_of_its_files(tmp_path, documents):
  write_flat(str(tmp_path / "corpus" / "a.bin"), documents, np.uint16)
  build_flat_index(
    "flat",
    [str(tmp_path / "corpus" / "a.bin")],
    out_dir=str(tmp_path / "meta"),
    dtype="uint16",
    boundaries=DocumentBoundaries.eos(EOS),
  )
  secret = tmp_path / "corpus" / "a.bin"
  secret.write_bytes(b"\0" * 1234)  # another file where the manifest points
  with pytest.raises(DatasetError, match=r"a\.bin: its size on disk differs from manifest\.json") as error:
    open_dataset(str(tmp_path / "meta"))
  assert "1234" not in str(error.value)


def test_dolma_metadata_gives_the_document_boundaries(tmp_path, capsys):
  documents = [[70_000, 5, 6], [7, 8], [131_000]]  # no EOS needed: the metadata says where each ends
  write_dolma_memmap(str(tmp_path / "part-0-00000.npy"), documents)
  write_dolma_metadata(str(tmp_path / "part-0-00000.csv.gz"), documents)
  argv = ["index", "--format", "flat", "--dtype", "uint32", "--dolma-metadata", "--no-dtype-check", "-q"]
  assert main([*argv, str(tmp_path / "part-0-00000.npy")]) == 0
  with open_dataset(str(tmp_path)) as dataset:
    assert [d.tolist() for d in dataset.read([0, 0, 0], [0, 1, 2]).to_list()] == documents
  # Rows that do not tile the file are named.
  index_again = functools.partial(
    build_flat_index,
    "flat",
    [str(tmp_path / "part-0-00000.npy")],
    dtype="uint32",
    boundaries=DocumentBoundaries.dolma_metadata(),
    check_dtype=False,
    force=True,
  )
  with gzip.open(tmp_path / "part-0-00000.csv.gz", "wt") as f:
    f.write("0,3,a,s,1\n4,5,b,s,2\n5,6,c,s,3\n")
  with pytest.raises(DatasetError, match=r"part-0-00000\.csv\.gz: row 2 covers tokens \[4, 5\), .* start at 3"):
    index_again()
  with gzip.open(tmp_path / "part-0-00000.csv.gz", "wt") as f:
    f.write("0,3,a,s,1\n3,5,b,s,2\n")
  with pytest.raises(DatasetError, match=r"documents end at token 5, but .*part-0-00000\.npy holds 6 tokens"):
    index_again()


def test_dolmas_headerless_npy_is_read_as_raw_ids_when_dtype_is_given(tmp_path, capsys):
  documents = [[70_000, 5, 6, 0], [7, 8, 0], [131_000, 0]]  # uint32 ids, EOS 0
  write_dolma_memmap(str(tmp_path / "part-0-00000.npy"), documents)
  with pytest.raises(DatasetError, match=r"part-0-00000\.npy: named \.npy but has no NumPy header .* give `dtype`"):
    build_flat_index("flat", [str(tmp_path / "part-0-00000.npy")], boundaries=DocumentBoundaries.eos(0))
  assert main(["index", "--format", "flat", str(tmp_path / "part-0-00000.npy"), "--eos-id", "0", "-q"]) == 1
  assert "give --dtype" in capsys.readouterr().err  # the CLI's words
  manifest = build_flat_index(
    "flat",
    [str(tmp_path / "part-0-00000.npy")],
    dtype="uint32",
    boundaries=DocumentBoundaries.eos(0),
    check_dtype=False,
  )
  assert manifest.num_records == 3 and manifest.shards[0].data_offset == 0
  with open_dataset(str(tmp_path)) as dataset:
    assert [d.tolist() for d in dataset.read([0, 0, 0], [0, 1, 2]).to_list()] == documents


def test_a_bos_delimited_corpus_splits_before_each_bos(tmp_path, capsys):
  # BOS = 1 begins every document; ids before the first BOS are a document of their own.
  ids = [9, 9, 1, 5, 6, 1, 7, 1, 8, 8, 8]
  np.array(ids, "<u2").tofile(tmp_path / "bos.bin")
  manifest = build_flat_index(
    "flat", [str(tmp_path / "bos.bin")], dtype="uint16", boundaries=DocumentBoundaries.bos(1), check_dtype=False
  )
  with open_dataset(str(tmp_path)) as dataset:
    got = [d.tolist() for d in dataset.read([0] * manifest.num_records, range(manifest.num_records)).to_list()]
  assert got == [[9, 9], [1, 5, 6], [1, 7], [1, 8, 8, 8]]
  argv = ["index", "--format", "flat", "--dtype", "uint16", "--bos-id", "1", "--eos-id", "0", "--force"]
  assert main([*argv, str(tmp_path / "bos.bin")]) == 1
  assert (
    "--eos-id: give one of --eos-id, --bos-id, --offsets, --dolma-metadata, not --eos-id and --bos-id"
    in capsys.readouterr().err
  )
  with pytest.raises(ValueError, match=r"token_id: bos id 70000 is not a uint16 id"):
    build_flat_index(
      "flat", [str(tmp_path / "bos.bin")], dtype="uint16", boundaries=DocumentBoundaries.bos(70_000), force=True
    )


def test_a_read_after_close_is_a_named_error(tmp_path):
  write_flat(str(tmp_path / "data.bin"), [[1, 2, 0], [3, 0]])
  build_flat_index("flat", [str(tmp_path / "data.bin")], dtype="uint16", boundaries=DocumentBoundaries.eos(0))
  dataset = open_dataset(str(tmp_path))
  assert dataset.read_global(np.arange(2)).tokens.tolist() == [1, 2, 0, 3, 0]
  dataset.close()
  with pytest.raises(DatasetError, match=r": the dataset was closed"):
    dataset.read_global(np.arange(2))


def test_a_rewritten_blocks_file_is_named_not_the_token_file(tmp_path, documents):
  """Block checksums that differ from the manifest's record blame the checksum file (was: the .bin)."""
  prefixes = megatron_corpus(tmp_path, documents)
  build_flat_index("megatron", prefixes)
  blocks = [n for n in os.listdir(tmp_path) if n.endswith(".blocks.npy")][0]
  sums = np.load(tmp_path / blocks)
  np.save(tmp_path / blocks, sums + 1)  # a checksum file rewritten (same shape, other sums)
  with pytest.raises(DatasetError, match=rf"{blocks}: the block checksums differ from those manifest.json records"):
    open_dataset(str(tmp_path), ReadOptions(flat_reader="tensorstore"))


def test_token_files_of_one_name_in_several_directories_index_together(tmp_path):
  """OLMo's layout: part-0.npy in each of several directories. Each file keeps its own metadata (named by
  its path below their common directory) and every document is read from its own file."""
  arrays = {"a": np.array([5, 6, 0, 7, 0], "<u2"), "b": np.array([8, 0, 9, 9, 9, 0], "<u2")}
  paths = []
  for name, ids in arrays.items():
    (tmp_path / name).mkdir()
    np.save(tmp_path / name / "part-0.npy", ids)
    paths.append(str(tmp_path / name / "part-0.npy"))
  manifest = build_flat_index(
    "flat", paths, out_dir=str(tmp_path / "meta"), dtype="uint16", boundaries=DocumentBoundaries.eos(0)
  )
  assert [s.lengths_path for s in manifest.shards] == ["a__part-0.lengths.npy", "b__part-0.lengths.npy"]
  with open_dataset(str(tmp_path / "meta")) as dataset:
    documents = [d.tolist() for d in dataset.read_global(np.arange(4)).to_list()]
  assert documents == [[5, 6, 0], [7, 0], [8, 0], [9, 9, 9, 0]]
  with pytest.raises(ValueError, match="inputs: a token file is given twice"):
    build_flat_index("flat", [paths[0], paths[0]], out_dir=str(tmp_path / "m2"), dtype="uint16")
