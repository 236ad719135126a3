"""`DocumentLengths`: memory-mapped lengths that gather like one array."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import jaxdata.sources.lengths as lengths_module
from jaxdata.sources import TokenDataset
from jaxdata.sources.lengths import DocumentLengths
from pipeline_fixtures import write_coded_dataset

parts_strategy = st.lists(st.lists(st.integers(1, 70_000), min_size=0, max_size=30), min_size=1, max_size=6)


@pytest.mark.parametrize("in_memory_limit", [0, 1 << 24])  # 0: one gather per part touched
@given(parts=parts_strategy, picks=st.lists(st.integers(0, 10**6), max_size=50))
def test_gathers_and_totals_equal_the_concatenation(in_memory_limit, parts, picks):
  arrays = [np.array(p, dtype=np.uint32) for p in parts]
  whole = np.concatenate(arrays)
  with pytest.MonkeyPatch.context() as patch:
    patch.setattr(lengths_module, "IN_MEMORY_RECORDS", in_memory_limit)
    lengths = DocumentLengths(arrays)
  assert len(lengths) == lengths.size == whole.size
  if not whole.size:
    return
  index = np.array([p % whole.size for p in picks], dtype=np.int64).reshape(-1)
  np.testing.assert_array_equal(lengths[index], whole[index])
  np.testing.assert_array_equal(lengths[index.reshape(-1, 1)], whole[index.reshape(-1, 1)])
  assert lengths[int(index[0]) if index.size else 0] == whole[int(index[0]) if index.size else 0]
  assert (lengths.sum(), lengths.min(), lengths.max()) == (whole.sum(), whole.min(), whole.max())
  assert lengths.dtype == (np.uint16 if whole.max() < 65536 else np.uint32)
  assert lengths.part_sums == [int(a.sum()) for a in arrays]
  assert lengths.tolist() == whole.tolist()


def test_out_of_range_and_non_integer_indices_are_refused():
  lengths = DocumentLengths([np.array([3, 4], np.uint16), np.array([5], np.uint16)])
  with pytest.raises(IndexError, match=r"index 3 out of range \[0, 3\)"):
    lengths[3]
  with pytest.raises(TypeError, match="integers"):
    lengths[np.array([0.5])]


def test_a_dataset_reads_small_lengths_files_and_keeps_large_ones_memory_mapped(tmp_path, monkeypatch):
  write_coded_dataset(str(tmp_path / "one"), 0, [3, 9, 4] * 50, shard_bytes=1 << 20)
  with TokenDataset(str(tmp_path / "one")) as one:  # read whole: truncating the file cannot end the process
    assert one.num_shards == 1 and not isinstance(one.lengths.parts[0], np.memmap)
  monkeypatch.setattr(lengths_module, "IN_MEMORY_BYTES", 0)  # the layout of a huge dataset
  with TokenDataset(str(tmp_path / "one")) as one:
    assert one.num_shards == 1 and isinstance(one.lengths.parts[0], np.memmap)  # no copy at all
  write_coded_dataset(str(tmp_path / "many"), 0, [3, 9, 4] * 50)
  monkeypatch.setattr(lengths_module, "IN_MEMORY_RECORDS", 0)
  with TokenDataset(str(tmp_path / "many")) as many:
    assert many.num_shards > 1
    assert all(isinstance(p, np.memmap) for p in many.lengths.parts)
    records = np.arange(many.num_records)[::-1]
    np.testing.assert_array_equal(many.read_global(records).lengths, np.array([3, 9, 4] * 50)[records])


def _resident_mb() -> float:
  with open("/proc/self/status") as f:
    return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024


def test_opening_scans_lengths_without_keeping_them_resident(tmp_path, monkeypatch):
  """The totals are computed from memory maps whose pages are dropped after
  the scan: 32 MB of lengths add far less than that to resident memory."""
  monkeypatch.setattr(lengths_module, "IN_MEMORY_RECORDS", 0)  # the layout of a huge dataset
  monkeypatch.setattr(lengths_module, "IN_MEMORY_BYTES", 0)
  paths = []
  for s in range(2):
    path = str(tmp_path / f"shard-{s}.npy")
    out = np.lib.format.open_memmap(path, mode="w+", dtype=np.uint16, shape=(8 << 20,))
    out[:] = 1 + s
    out.flush()
    del out
    paths.append(path)
  parts = [np.load(p, mmap_mode="r") for p in paths]
  before = _resident_mb()
  lengths = DocumentLengths(parts)
  assert _resident_mb() - before < 8  # 32 MB were read
  assert (lengths.sum(), lengths.min(), lengths.max()) == (3 * (8 << 20), 1, 2)
  assert lengths[np.array([0, (8 << 20) + 5])].tolist() == [1, 2]
