"""`ShardedRecords`: what every dataset reader shares, records numbered across shards.

::

    shard_num_records  [3, 2, 4]          record_starts  [0, 3, 5, 9]
    global record 6  ->  shard 2, record 1          (locate; global_index is the inverse)

Every reader is also a Grain `RandomAccessDataSource`: ``len(ds)``, ``ds[i]``
(record i's token ids, shards concatenated in manifest order), batched
``ds.__getitems__(indices)``, and a pickle of a few hundred bytes that
reopens the dataset where it is loaded (a Grain worker process) and checks
that its manifest is still the one that was opened::

    grain.MapDataset.source(jaxdata.open_dataset(path)).shuffle(seed=0).to_iter_dataset()
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any, SupportsIndex

import numpy as np

from jaxdata.errors import DatasetError
from jaxdata.sources.manifest import Manifest

__all__ = ["ShardedRecords", "check_range", "reopened"]


def check_range(values: np.ndarray, upper: int, what: str, where: str) -> None:
  """IndexError naming `where` if a value lies outside [0, upper)."""
  bad = np.flatnonzero((values < 0) | (values >= upper))
  if bad.size:
    raise IndexError(f"{where}: {what} {values[bad[0]]} out of range [0, {upper})")


class ShardedRecords:
  """Numbering of records across shards, and the names every reader has.

  Subclasses set `path`, `manifest`, `shard_num_records` (and through
  `_number_records`, `record_starts`) and implement `read` and `close`.
  """

  path: str
  manifest: Manifest
  shard_num_records: np.ndarray
  record_starts: np.ndarray
  what = "record"  # how errors name one record
  # Reads fetch byte ranges from object storage as they go (no shard cache): a read waits on the store.
  reads_ranges_from_store = False

  def _number_records(self, counts: Sequence[int] | np.ndarray) -> None:
    self.shard_num_records = np.asarray(counts, dtype=np.int64)
    # record_starts[s] = global index of shard s's first record.
    self.record_starts = np.concatenate([[0], np.cumsum(self.shard_num_records)])

  @property
  def name(self) -> str:
    return self.manifest.name

  @property
  def num_shards(self) -> int:
    return len(self.manifest.shards)

  @property
  def num_records(self) -> int:
    return int(self.record_starts[-1])

  @property
  def num_tokens(self) -> int:
    return self.manifest.num_tokens

  def transfer_stats(self) -> dict[str, float] | None:
    """Data in object storage: bytes fetched so far, the store's measured round trip
    (`latency_s`) and the requests kept in flight (`parallelism`); None for local data."""
    return None

  def global_index(self, shard_ids: np.ndarray, record_ids: np.ndarray) -> np.ndarray:
    return self.record_starts[np.asarray(shard_ids)] + np.asarray(record_ids)

  def locate(self, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Global record indices -> (shard ids, record ids within the shard)."""
    indices = np.asarray(indices, dtype=np.int64)
    check_range(indices, self.num_records, f"{self.what} index", self.path)
    shard_ids = np.searchsorted(self.record_starts, indices, side="right") - 1
    return shard_ids, indices - self.record_starts[shard_ids]

  def read_global(self, indices: Sequence[int] | np.ndarray) -> Any:
    """Reads records by global index (shards concatenated in manifest order)."""
    return self.read(*self.locate(np.asarray(indices, dtype=np.int64).ravel()))

  def read(self, shard_ids: Sequence[int] | np.ndarray, record_ids: Sequence[int] | np.ndarray) -> Any:
    raise NotImplementedError

  # ------------------------------------------- Grain's RandomAccessDataSource

  def __len__(self) -> int:
    return self.num_records

  def __getitem__(self, index: SupportsIndex) -> Any:
    """Record `index`'s token ids (negative counts from the end, as in a list); for a dataset with
    trained-token masks, {"tokens": ids, "mask": 0 / 1 per id}."""
    if isinstance(index, (bool, np.bool_)) or not hasattr(index, "__index__"):
      raise TypeError(f"{self.path}: a {self.what} index is an int, got {index!r:.100}")
    position = operator.index(index)
    if position < 0:
      position += self.num_records
    if not 0 <= position < self.num_records:
      raise IndexError(f"{self.path}: {self.what} index {index} out of range for {self.num_records} {self.what}s")
    return self.read_global([position]).to_list()[0]

  def __getitems__(self, indices: Sequence[int] | np.ndarray) -> list[Any]:
    """Records by global index in one batched read (what Grain's batched sources and torch samplers
    call); negative indices count from the end, as for `ds[i]`."""
    positions = self._positions(indices)
    return self.read_global(positions).to_list() if positions.size else []

  def _positions(self, indices: Any) -> np.ndarray:
    """Record positions of integer `indices` (a sequence or a 1-D integer array; negative from the end).
    TypeError for anything else (floats, strings, booleans, nesting), IndexError naming the value given."""
    given = indices
    if isinstance(indices, (str, bytes)) or not isinstance(indices, (Sequence, np.ndarray, range)):
      raise TypeError(f"{self.path}: __getitems__ takes a sequence of int indices, got {type(given).__name__}")
    if not isinstance(indices, np.ndarray) and any(isinstance(i, (bool, np.bool_)) for i in indices):
      raise TypeError(f"{self.path}: __getitems__ takes int indices, not booleans: {given!r:.200}")
    array = np.asarray(indices) if len(indices) else np.zeros(0, np.int64)
    if array.ndim != 1 or array.dtype.kind not in "iu":
      kind = f"{array.ndim}-D" if array.ndim != 1 else array.dtype.name
      raise TypeError(f"{self.path}: __getitems__ takes a 1-D sequence of int indices, got {kind}: {given!r:.200}")
    top = self.num_records
    if array.dtype.kind == "u":
      beyond = np.flatnonzero(array >= np.uint64(max(top, 0)))
      if beyond.size:
        raise IndexError(f"{self.path}: {self.what} index {int(array[beyond[0]])} out of range for {top} {self.what}s")
    positions = array.astype(np.int64)
    bad = np.flatnonzero((positions < -top) | (positions >= top))
    if bad.size:
      raise IndexError(f"{self.path}: {self.what} index {int(positions[bad[0]])} out of range for {top} {self.what}s")
    return np.where(positions < 0, positions + top, positions)

  _getitems = __getitems__  # the name Grain's `SupportsBatchedReadRandomAccessDataSource` reads

  def reopen_arguments(self) -> tuple[Any, ...]:
    """What the constructor needs to open this dataset again elsewhere (a small, picklable tuple)."""
    raise NotImplementedError

  def __reduce__(self) -> tuple[Any, ...]:
    # The open files and mapped memory stay here; the other process opens the dataset anew.
    return (reopened, (type(self), self.reopen_arguments(), self.manifest.fingerprint))

  def close(self) -> None:
    raise NotImplementedError

  def __enter__(self) -> Any:
    return self

  def __exit__(self, *exc: object) -> None:
    self.close()


def reopened(kind: type[ShardedRecords], arguments: tuple[Any, ...], fingerprint: str) -> ShardedRecords:
  """Opens a pickled dataset again; a DatasetError if its manifest changed since it was pickled."""
  dataset = kind(*arguments)
  if dataset.manifest.fingerprint != fingerprint:
    dataset.close()
    raise DatasetError(
      f"{dataset.path}/manifest.json: the dataset changed after it was opened and pickled "
      f"(fingerprint {dataset.manifest.fingerprint[:12]}..., was {fingerprint[:12]}...); open it again"
    )
  return dataset
