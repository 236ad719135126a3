"""Datasets on disk: validation errors name the shard; batched reads are exact."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil

import numpy as np
import pytest
from array_record.python.array_record_module import ArrayRecordWriter
from hypothesis import given
from hypothesis import strategies as st

from jaxdata import DatasetError
from jaxdata.cli import main
from jaxdata.sources import DatasetWriter, Manifest, ReadOptions, TokenDataset, build_index
from jaxdata.sources.manifest import MAX_MANIFEST_BYTES


def write_dataset(directory: str, seed: int = 0, docs: int = 200, shard_bytes: int = 1500) -> list[np.ndarray]:
  """A dataset of random uint16 documents (lengths 1..40) over several shards."""
  rng = np.random.default_rng(seed)
  lengths = rng.integers(1, 41, size=docs)
  flat = rng.integers(0, 60000, size=int(lengths.sum()))
  writer = DatasetWriter(directory, "rand", np.dtype("<u2"), {"kind": "test"}, shard_bytes)
  writer.write_documents(flat, lengths)
  writer.finish()
  return np.split(flat, np.cumsum(lengths)[:-1])


@pytest.fixture(scope="module")
def dataset_dir(tmp_path_factory) -> tuple[str, list[np.ndarray]]:
  directory = str(tmp_path_factory.mktemp("ds") / "rand")
  return directory, write_dataset(directory)


@pytest.fixture
def damaged(tmp_path, dataset_dir) -> str:
  """A private copy of the dataset that a test may break."""
  directory = str(tmp_path / "copy")
  shutil.copytree(dataset_dir[0], directory)
  return directory


def rewrite_manifest(directory: str, **shard0_changes) -> None:
  """Edits shard 0's entry and re-saves, so the manifest stays self-consistent."""
  manifest = Manifest.load(directory)
  first = dataclasses.replace(manifest.shards[0], **shard0_changes)
  os.remove(os.path.join(directory, "manifest.json"))
  dataclasses.replace(manifest, shards=(first, *manifest.shards[1:])).save(directory)


def test_dataset_opens_with_expected_counts(dataset_dir):
  directory, docs = dataset_dir
  with TokenDataset(directory) as ds:
    assert ds.num_shards > 3
    assert ds.num_records == len(docs)
    assert ds.num_tokens == sum(d.size for d in docs)
    assert ds.lengths.tolist() == [d.size for d in docs]


@pytest.mark.parametrize("num_threads", [1, 4])
@given(data=st.data())
def test_batched_read_equals_one_at_a_time_reads(dataset_dir, num_threads, data):
  directory, docs = dataset_dir
  with TokenDataset(directory, ReadOptions(num_threads=num_threads)) as ds:
    indices = data.draw(st.lists(st.integers(0, ds.num_records - 1), min_size=1, max_size=80))
    shard_ids, record_ids = ds.locate(np.array(indices))
    batched = ds.read(shard_ids, record_ids)
    singles = [ds.read([s], [r])[0] for s, r in zip(shard_ids, record_ids)]
    assert len(batched) == len(indices)
    for got, single, index in zip(batched.to_list(), singles, indices):
      assert got.tolist() == single.tolist() == docs[index].tolist()
    assert batched.tokens.dtype == np.dtype("<u2")


def test_empty_read_and_out_of_range(dataset_dir):
  directory, _ = dataset_dir
  with TokenDataset(directory) as ds:
    assert len(ds.read([], [])) == 0
    with pytest.raises(IndexError, match=r"rand-00000\.array_record: record 99999 out of range"):
      ds.read([0], [99999])
    with pytest.raises(IndexError, match="shard id 77 out of range"):
      ds.read([77], [0])
    with pytest.raises(IndexError, match="record index -1 out of range"):
      ds.read_global([-1])


def test_deleted_shard_is_named(damaged):
  os.remove(os.path.join(damaged, "rand-00002.array_record"))
  with pytest.raises(DatasetError, match=r"rand-00002\.array_record: shard file is missing"):
    TokenDataset(damaged)


def test_truncated_shard_is_named(damaged):
  path = os.path.join(damaged, "rand-00001.array_record")
  data = open(path, "rb").read()
  open(path, "wb").write(data[: len(data) // 2])
  with pytest.raises(
    DatasetError, match=r"rand-00001\.array_record: \d+ bytes on disk, manifest\.json lists \d+ \(truncated"
  ):
    TokenDataset(damaged)


def test_garbage_shard_of_the_right_size_is_named(damaged):
  path = os.path.join(damaged, "rand-00000.array_record")
  size = os.path.getsize(path)
  open(path, "wb").write(np.random.default_rng(0).bytes(size))
  with pytest.raises(
    DatasetError, match=r"rand-00000\.array_record: content differs from the shard manifest\.json lists"
  ):
    TokenDataset(damaged)


@pytest.mark.parametrize("how", ["copy", "symlink"])
def test_a_shard_swapped_for_one_of_the_same_shape_is_caught_at_open(tmp_path, how):
  # Two datasets with identical record lengths; 0.1 read the swapped shard as
  # genuine (19 of 200 documents silently came from the other dataset).
  for name, seed in (("a", 0), ("b", 1)):
    rng = np.random.default_rng(seed)
    writer = DatasetWriter(str(tmp_path / name), "ds", np.dtype("<u2"), {"kind": "test"}, 1500)
    writer.write_documents(rng.integers(0, 60000, 200 * 10), np.full(200, 10))
    writer.finish()
  target, other = tmp_path / "a" / "ds-00001.array_record", tmp_path / "b" / "ds-00001.array_record"
  assert target.stat().st_size == other.stat().st_size
  target.unlink()
  if how == "copy":
    shutil.copyfile(other, target)
    message = r"ds-00001\.array_record: content differs from the shard manifest\.json lists"
  else:
    target.symlink_to(other)
    message = r"ds-00001\.array_record: a link that resolves outside the dataset directory"
  with pytest.raises(DatasetError, match=message):
    TokenDataset(str(tmp_path / "a"))


def test_wrong_size_lengths_index_is_named(damaged):
  path = os.path.join(damaged, "rand-00001.lengths.npy")
  np.save(path, np.load(path)[:-1])
  with pytest.raises(
    DatasetError,
    match=r"rand-00001\.lengths\.npy: lengths index has \d+ entries, shard rand-00001\.array_record has \d+",
  ):
    TokenDataset(damaged)


def test_missing_lengths_index_is_named(damaged):
  os.remove(os.path.join(damaged, "rand-00003.lengths.npy"))
  with pytest.raises(
    DatasetError, match=r"rand-00003\.lengths\.npy: lengths index .* is missing; rebuild it with `jaxdata index`"
  ):
    TokenDataset(damaged)


def test_manifest_count_mismatch_is_named(damaged):
  # Manifest and lengths index both claim one record fewer than the shard holds.
  lengths_path = os.path.join(damaged, "rand-00000.lengths.npy")
  lengths = np.load(lengths_path)
  np.save(lengths_path, lengths[:-1])
  shard = Manifest.load(damaged).shards[0]
  rewrite_manifest(damaged, num_records=shard.num_records - 1, num_tokens=shard.num_tokens - int(lengths[-1]))
  with pytest.raises(
    DatasetError,
    match=rf"rand-00000\.array_record: {shard.num_records} records in the file, manifest\.json lists {shard.num_records - 1}",
  ):
    TokenDataset(damaged)


def test_lengths_sum_mismatch_is_named(damaged):
  path = os.path.join(damaged, "rand-00002.lengths.npy")
  lengths = np.load(path)
  lengths[0] += 1
  np.save(path, lengths)
  with pytest.raises(DatasetError, match=r"rand-00002\.lengths\.npy: lengths sum to \d+ tokens"):
    TokenDataset(damaged)


def test_edited_manifest_is_refused(damaged):
  path = os.path.join(damaged, "manifest.json")
  raw = json.load(open(path))
  raw["shards"][0]["num_records"] += 1
  json.dump(raw, open(path, "w"))
  with pytest.raises(DatasetError, match="fingerprint .* does not match the listed shards"):
    TokenDataset(damaged)


@pytest.mark.parametrize(
  "edit, message",
  [
    (lambda raw: raw.update(format_version=99), "format_version 99 is newer"),
    (lambda raw: raw.pop("dtype"), "missing field 'dtype'"),
    (lambda raw: raw.update(dtype="int8"), "dtype: 'int8' is not one of"),
    (lambda raw: raw["shards"][0].update(num_records="12"), r"shards\[0\]: field 'num_records' should be int"),
  ],
)
def test_bad_manifest_fields_are_named(damaged, edit, message):
  path = os.path.join(damaged, "manifest.json")
  raw = json.load(open(path))
  edit(raw)
  raw.pop("fingerprint")
  json.dump(raw, open(path, "w"))
  with pytest.raises(DatasetError, match=message):
    TokenDataset(damaged)


def test_unreadable_or_missing_manifest(damaged, tmp_path):
  open(os.path.join(damaged, "manifest.json"), "w").write("{not json")
  with pytest.raises(DatasetError, match=r"manifest\.json: not valid JSON"):
    TokenDataset(damaged)
  with pytest.raises(DatasetError, match="no manifest"):
    TokenDataset(str(tmp_path))


def flip_byte(path: str, at: int = 100) -> None:
  """Inverts one byte of a file in place (same size, same name)."""
  data = bytearray(open(path, "rb").read())
  data[at] ^= 0xFF
  open(path, "wb").write(bytes(data))


def test_verify_detects_a_changed_byte(damaged):
  TokenDataset(damaged).verify()
  flip_byte(os.path.join(damaged, "rand-00001.array_record"))
  # A small shard is sampled whole, so opening already notices; verify() rehashes everything.
  with pytest.raises(
    DatasetError, match=r"rand-00001\.array_record: (content differs|sha256 .* differs from manifest)"
  ):
    TokenDataset(damaged).verify()


def write_raw_shard(path: str, records: list[bytes]) -> None:
  writer = ArrayRecordWriter(path, "group_size:1")
  for record in records:
    writer.write(record)
  writer.close()


def test_index_builds_lengths_and_manifest_for_foreign_shards(tmp_path, capsys):
  rng = np.random.default_rng(3)
  # ids of a 256k vocabulary: too large for uint16, and what the dtype check accepts as uint32.
  docs = [rng.integers(0, 256_000, size=int(n), dtype=np.uint64).astype("<u4") for n in rng.integers(1, 30, 50)]
  write_raw_shard(str(tmp_path / "a.array_record"), [d.tobytes() for d in docs[:20]])
  write_raw_shard(str(tmp_path / "b.array_record"), [d.tobytes() for d in docs[20:]])
  shards = [str(tmp_path / "a.array_record"), str(tmp_path / "b.array_record")]
  assert main(["index", *shards, "--dtype", "uint32", "--name", "legacy"]) == 0
  assert "legacy: 2 shards, 50 documents" in capsys.readouterr().out
  with TokenDataset(str(tmp_path)) as ds:
    assert ds.dtype == np.dtype("<u4")
    assert ds.lengths.tolist() == [d.size for d in docs]
    got = ds.read_global(np.arange(50)[::-1]).to_list()
    assert [g.tolist() for g in got] == [d.tolist() for d in docs[::-1]]
    ds.verify()


def test_index_refuses_records_that_are_not_whole_tokens(tmp_path):
  write_raw_shard(str(tmp_path / "odd.array_record"), [b"\x01\x00", b"\x01\x02\x03"])
  with pytest.raises(
    DatasetError, match=r"odd\.array_record: record 1 has 3 bytes, not a whole number of uint16 tokens"
  ):
    build_index([str(tmp_path / "odd.array_record")], "uint16")
  assert main(["index", str(tmp_path / "missing.array_record"), "--dtype", "uint16"]) == 1


def test_empty_documents_are_refused_when_writing_and_indexing(tmp_path):
  write_raw_shard(str(tmp_path / "holes.array_record"), [b"\x01\x00", b"", b"\x02\x00", b""])
  with pytest.raises(DatasetError, match=r"holes\.array_record: 2 empty records \(the first is record 1\)"):
    build_index([str(tmp_path / "holes.array_record")], "uint16")
  writer = DatasetWriter(str(tmp_path / "out"), "out", np.dtype("<u2"), {"kind": "byte"}, 1 << 20)
  with pytest.raises(ValueError, match=r"lengths: 1 empty documents \(the first is document 1 of this call\)"):
    writer.write_documents(np.array([5, 6, 7]), np.array([2, 0, 1]))


def test_wrong_dtype_in_manifest_is_caught_on_read(tmp_path):
  # Records of 3 uint16 tokens (6 bytes), then the manifest claims uint32.
  write_raw_shard(str(tmp_path / "s.array_record"), [np.arange(3, dtype="<u2").tobytes()] * 4)
  build_index([str(tmp_path / "s.array_record")], "uint16")
  manifest = Manifest.load(str(tmp_path))
  os.remove(tmp_path / "manifest.json")
  dataclasses.replace(manifest, dtype="uint32").save(str(tmp_path))
  with TokenDataset(str(tmp_path)) as ds:
    with pytest.raises(
      DatasetError, match=r"s\.array_record: record 2 has 6 bytes, not a whole number of uint32 tokens"
    ):
      ds.read([0], [2])


def test_inspect_prints_table_and_json(dataset_dir, capsys):
  directory, docs = dataset_dir
  assert main(["inspect", directory, "--verify"]) == 0
  out = capsys.readouterr().out
  assert "rand" in out and f"{len(docs)}" in out and "verified" in out
  assert main(["inspect", directory, "--json"]) == 0
  (summary,) = json.loads(capsys.readouterr().out)
  lengths = np.array([d.size for d in docs])
  assert summary["documents"] == len(docs)
  assert summary["tokens"] == lengths.sum()
  assert summary["length_percentiles"]["p50"] == np.percentile(lengths, 50)
  assert summary["max_length"] == lengths.max()
  assert summary["dtype"] == "uint16"


def test_a_format_1_manifest_opens_and_its_shards_are_checked_by_full_hash(damaged):
  # jaxdata 0.1 wrote no sampled hashes; such a dataset still opens, and a
  # changed shard is caught by the full sha256 instead.
  path = os.path.join(damaged, "manifest.json")
  raw = json.load(open(path))
  raw["format_version"] = 1
  for shard in raw["shards"]:
    del shard["sample_sha256"]
  json.dump(raw, open(path, "w"))
  TokenDataset(damaged).close()
  flip_byte(os.path.join(damaged, "rand-00001.array_record"))
  with pytest.raises(
    DatasetError, match=r"rand-00001\.array_record: content differs from the shard manifest\.json lists \(sha256"
  ):
    TokenDataset(damaged)


def test_an_oversized_manifest_is_refused_naming_its_file(tmp_path):
  path = tmp_path / "manifest.json"
  with open(path, "wb") as f:  # valid JSON padding: only its size is wrong
    f.write(b"{" + b" " * MAX_MANIFEST_BYTES + b"}")
  with pytest.raises(DatasetError, match=rf"{path}: larger than 64 MiB; not a jaxdata manifest"):
    Manifest.load(str(tmp_path))


def test_every_record_compression_reads_the_same_tokens(tmp_path):
  """zstd (the default), snappy and none store the same uint32 ids; readers need no option (each
  chunk names its compression). Ids below 128,256 leave a zero top byte that zstd removes."""
  rng = np.random.default_rng(3)
  lengths = rng.integers(1, 3000, 60)
  tokens = rng.integers(0, 128_256, int(lengths.sum())).astype(np.uint32)
  read, sizes = {}, {}
  for compression in ("zstd", "snappy", "none"):
    out = str(tmp_path / compression)
    writer = DatasetWriter(out, "d", np.dtype("<u4"), {"kind": "x", "vocab_size": 128_256}, compression=compression)
    writer.write_documents(tokens, lengths)
    writer.finish()
    with TokenDataset(out) as ds:
      read[compression] = ds.read_global(np.arange(ds.num_records)).tokens.tolist()
      sizes[compression] = sum(s.num_bytes for s in ds.manifest.shards)
  assert read["zstd"] == read["snappy"] == read["none"] == tokens.tolist()
  assert sizes["zstd"] < 0.85 * sizes["none"], sizes
  with pytest.raises(ValueError, match="compression: 'lz4' is not one of"):
    DatasetWriter(str(tmp_path / "bad"), "d", np.dtype("<u4"), {"kind": "x"}, compression="lz4")


def test_convert_takes_a_compression_and_refuses_an_unknown_one(tmp_path):
  source = tmp_path / "in.jsonl"
  source.write_text("".join(json.dumps({"text": f"document {i} " * 20}) + "\n" for i in range(40)))
  for compression in ("zstd", "none"):
    out = str(tmp_path / compression)
    assert main(["convert", str(source), "--out", out, "--name", "d", "--compression", compression, "-q"]) == 0
  with TokenDataset(str(tmp_path / "zstd")) as a, TokenDataset(str(tmp_path / "none")) as b:
    everything = np.arange(a.num_records)
    assert a.read_global(everything).tokens.tolist() == b.read_global(everything).tokens.tolist()
  with pytest.raises(SystemExit):
    main(["convert", str(source), "--out", str(tmp_path / "bad"), "--name", "d", "--compression", "lz4"])
