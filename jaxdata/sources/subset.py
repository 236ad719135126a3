"""`SubsetView` / `RangeView`: a dataset seen through a subset of its records (held-out documents, or
all the others; or a range of documents in stored order, as Megatron's train / valid / test split cuts).

Records keep their shards; the view renumbers them densely::

    records of the dataset   0 1 2 3 4 5 6 7 8 9        held out: [2, 7]
    SubsetView(keep=True)    view 0 -> 2, 1 -> 7        (the eval split)
    SubsetView(keep=False)   view j -> j + #{held out h : h - rank(h) <= j}
                             0->0 1->1 2->3 3->4 4->5 5->6 6->8 7->9   (the training split)

Both maps are vectorised; nothing of dataset size is built, so a training
view of 10^9 documents costs the held-out list only.

>>> import tempfile, os
>>> from jaxdata.sources.writer import DatasetWriter
>>> out = tempfile.mkdtemp()
>>> w = DatasetWriter(out, "t", np.dtype("<u2"), {"kind": "x"})
>>> w.write_documents(np.arange(10), np.ones(10, np.int64)); _ = w.finish()
>>> from jaxdata.sources.dataset import TokenDataset
>>> rest = SubsetView(TokenDataset(out), np.array([2, 7]), keep=False)
>>> rest.num_records, rest.read_global(np.arange(8)).tokens.tolist()
(8, [0, 1, 3, 4, 5, 6, 8, 9])
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from jaxdata.errors import DatasetError
from jaxdata.sources.lengths import LengthsBase
from jaxdata.sources.ragged import RaggedTokens
from jaxdata.sources.records import ShardedRecords

__all__ = ["RangeView", "SubsetView"]

_CHUNK = 1 << 22


class _MappedLengths(LengthsBase):
  """Lengths of the view's records (gathers go through the view's map)."""

  def __init__(self, base: Any, to_base: Any, size: int, total: int, low: int, high: int) -> None:
    self._base, self._to_base, self.size = base, to_base, size
    self._sum, self._min, self._max, self.dtype = total, low, high, base.dtype

  def __getitem__(self, index: Any) -> Any:
    if isinstance(index, (int, np.integer)):
      return self._base[int(self._to_base(np.array([int(index)]))[0])]
    return self._base[self._to_base(np.asarray(index))]

  def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
    values = self[np.arange(self.size)]
    return values.astype(dtype) if dtype is not None else values


class _View(ShardedRecords):
  """A dataset seen through a map of record indices (`to_base`): reads, paths and checks go to it."""

  dataset: Any

  def to_base(self, indices: np.ndarray) -> np.ndarray:
    raise NotImplementedError

  def shard_path(self, shard: int) -> str:
    return self.dataset.shard_path(shard)

  def read(self, shard_ids: Sequence[int] | np.ndarray, record_ids: Sequence[int] | np.ndarray) -> RaggedTokens:
    return self.dataset.read_global(self.to_base(self.global_index(np.asarray(shard_ids), np.asarray(record_ids))))

  def verify(self) -> None:
    self.dataset.verify()

  def transfer_stats(self) -> dict[str, float] | None:
    return self.dataset.transfer_stats()

  def close(self) -> None:
    self.dataset.close()


class SubsetView(_View):
  """The records `records` (sorted global indices) of `dataset` (`keep`), or all the others."""

  pass_records = None

  def __init__(self, dataset: Any, records: np.ndarray, keep: bool) -> None:
    records = np.unique(np.asarray(records, np.int64))
    if records.size and (records[0] < 0 or records[-1] >= dataset.num_records):
      raise ValueError(f"{dataset.path}: held-out records outside [0, {dataset.num_records})")
    self.dataset, self.records, self.keep = dataset, records, keep
    self.path, self.manifest, self.dtype, self.remote = dataset.path, dataset.manifest, dataset.dtype, dataset.remote
    per_shard = np.bincount(
      np.searchsorted(dataset.record_starts, records, side="right") - 1, minlength=dataset.num_shards
    )
    self._number_records(per_shard if keep else dataset.shard_num_records - per_shard)
    self._gaps = records - np.arange(records.size)  # non-decreasing: the complement's map
    subset_lengths = np.asarray(dataset.lengths[records], np.int64) if records.size else np.zeros(0, np.int64)
    base = dataset.lengths
    if keep:
      total, low, high = (
        int(subset_lengths.sum()),
        int(subset_lengths.min(initial=0)),
        int(subset_lengths.max(initial=0)),
      )
    else:  # bounds of the rest: the base's (every document has at least one token)
      total, low, high = int(base.sum()) - int(subset_lengths.sum()), int(base.min()), int(base.max())
    self.lengths = _MappedLengths(base, self.to_base, self.num_records, total, low, high)

  def to_base(self, indices: np.ndarray) -> np.ndarray:
    """The dataset's global record index of each of the view's."""
    indices = np.asarray(indices, np.int64)
    if self.keep:
      return self.records[indices]
    return indices + np.searchsorted(self._gaps, indices, side="right")

  def reopen_arguments(self) -> tuple[Any, ...]:
    return (self.dataset, self.records, self.keep)


class RangeView(_View):
  """Records [start, stop) of `dataset` in stored order; nothing of the range's size is built.

  >>> import tempfile
  >>> from jaxdata.sources.writer import DatasetWriter
  >>> from jaxdata.sources.dataset import TokenDataset
  >>> out = tempfile.mkdtemp()
  >>> w = DatasetWriter(out, "t", np.dtype("<u2"), {"kind": "x"})
  >>> w.write_documents(np.arange(10), np.ones(10, np.int64)); _ = w.finish()
  >>> middle = RangeView(TokenDataset(out), 3, 7)
  >>> middle.num_records, middle.read_global(np.arange(4)).tokens.tolist()
  (4, [3, 4, 5, 6])
  """

  pass_records = None

  def __init__(self, dataset: Any, start: int, stop: int) -> None:
    if not 0 <= start < stop <= dataset.num_records:
      raise DatasetError(
        f"{dataset.path}: documents [{start}, {stop}) asked of a dataset of {dataset.num_records} documents"
      )
    self.dataset, self.start, self.stop = dataset, start, stop
    self.path, self.manifest, self.dtype, self.remote = dataset.path, dataset.manifest, dataset.dtype, dataset.remote
    starts = dataset.record_starts
    self._number_records(np.clip(starts[1:], start, stop) - np.clip(starts[:-1], start, stop))
    total, low, high = 0, np.iinfo(np.int64).max, 0  # (the range is not empty: low is set)
    for begin in range(start, stop, _CHUNK):  # one pass over the range's lengths, a chunk at a time
      part = np.asarray(dataset.lengths[np.arange(begin, min(begin + _CHUNK, stop))], np.int64)
      total, high = total + int(part.sum()), max(high, int(part.max()))
      low = min(low, int(part.min()))
    self.lengths = _MappedLengths(dataset.lengths, self.to_base, self.num_records, total, low, high)

  def to_base(self, indices: np.ndarray) -> np.ndarray:
    return np.asarray(indices, np.int64) + self.start

  def reopen_arguments(self) -> tuple[Any, ...]:
    return (self.dataset, self.start, self.stop)
