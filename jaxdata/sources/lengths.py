"""`DocumentLengths`: every document's token count by global record index, not held in RAM.

A dataset's lengths live in one `.npy` file per shard (integers of at most
32 bits). They are memory-mapped, never copied to int64; small datasets
(up to `IN_MEMORY_RECORDS` documents) are concatenated into one array of
the smallest sufficient dtype, which gathers fastest::

    shard files   [5 9 2] [7 7] [3 1 4 1]       (memory maps, as written)
    global index   0 1 2   3 4   5 6 7 8
    lengths[[6, 0, 3]]  ->  shard of each (searchsorted) -> one gather per shard touched -> [1 5 7]

Totals (sum, min, max) are computed once when opened, a shard at a time,
so planning and checks never scan all documents again.

>>> lengths = DocumentLengths([np.array([5, 9, 2], np.uint32), np.array([7, 7], np.uint32)])
>>> lengths[np.array([4, 0])].tolist(), len(lengths), lengths.sum(), lengths.max(), lengths.dtype.name
([7, 5], 5, 30, 9, 'uint16')
"""

from __future__ import annotations

import io
import mmap
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from jaxdata.errors import DatasetError

__all__ = [
  "ConstantLengths",
  "DocumentLengths",
  "IN_MEMORY_BYTES",
  "IN_MEMORY_RECORDS",
  "LengthsBase",
  "load_lengths_file",
]

IN_MEMORY_RECORDS = 1 << 24  # up to 16M documents (<= 64 MB) are concatenated into RAM
IN_MEMORY_BYTES = 1 << 27  # per-document .npy files up to 128 MiB (16M starts, 32M lengths) are read, not mapped
_SCAN_CHUNK = 1 << 22  # totals are computed this many lengths at a time (bounded memory)


def smallest_dtype(max_length: int) -> np.dtype:
  """uint16 or uint32: the smallest unsigned type that holds `max_length`."""
  return np.dtype(np.uint16) if max_length < (1 << 16) else np.dtype(np.uint32)


def _release_pages(array: np.ndarray) -> None:
  """Drops a memory map's scanned pages from this process (they stay in the
  page cache: opening a 10^9-document dataset must not leave gigabytes
  resident) and marks it for random access (no read-ahead from disk).
  Lookups while planning map the pages they touch: file-backed, shared and
  reclaimable, never anonymous memory."""
  mapping = getattr(array, "_mmap", None)
  if mapping is None or not hasattr(mapping, "madvise"):
    return
  for advice in ("MADV_DONTNEED", "MADV_RANDOM"):
    if hasattr(mmap, advice):
      mapping.madvise(getattr(mmap, advice))


class LengthsBase:
  """What every kind of lengths shares: a 1-D shape of `size` records, totals computed once."""

  ndim = 1
  size: int
  _sum: int
  _min: int
  _max: int

  @property
  def shape(self) -> tuple[int]:
    return (self.size,)

  def __len__(self) -> int:
    return self.size

  def __getitem__(self, index: Any) -> Any:
    """The lengths at `index` (an int or an array of record indices), as NumPy indexing gives them."""
    raise NotImplementedError

  def sum(self) -> int:
    return self._sum

  def min(self) -> int:
    return self._min

  def max(self) -> int:
    return self._max

  def mean(self) -> float:
    return self.sum() / self.size if self.size else 0.0

  def tolist(self) -> list[int]:
    return np.asarray(self).tolist()


class DocumentLengths(LengthsBase):
  """Read-only lengths of all documents, indexed like one 1-D integer array.

  Supports what planning needs: `len`, `size`, gathers by integer arrays,
  scalar indexing, `sum()`, `min()`, `max()`, `mean()` (precomputed), and
  `np.asarray` / `tolist()` (these materialise all lengths: for tools and
  tests on small datasets).
  """

  def __init__(self, parts: Sequence[np.ndarray]) -> None:
    parts = [p if isinstance(p, np.ndarray) else np.asarray(p) for p in parts] or [np.zeros(0, np.uint16)]
    for part in parts:
      if part.ndim != 1 or part.dtype.kind not in "iu":
        raise ValueError(f"lengths: 1-D integer arrays expected, got {part.dtype} of shape {part.shape}")
    sizes = np.array([p.size for p in parts], dtype=np.int64)
    self.starts = np.concatenate([[0], np.cumsum(sizes)])
    self.size = int(self.starts[-1])
    # Per part: token sum and smallest length (a dataset checks them against its manifest).
    self.part_sums: list[int] = []
    self.part_mins: list[int | None] = []
    high = 0
    for part in parts:
      total, low = 0, None
      for begin in range(0, part.size, _SCAN_CHUNK):
        chunk = np.asarray(part[begin : begin + _SCAN_CHUNK])
        total += int(chunk.sum(dtype=np.int64))
        low = int(chunk.min()) if low is None else min(low, int(chunk.min()))
        high = max(high, int(chunk.max()))
      _release_pages(part)
      self.part_sums.append(total)
      self.part_mins.append(low)  # None for an empty part
    present = [low for low in self.part_mins if low is not None]
    self._sum, self._min, self._max = sum(self.part_sums), min(present, default=0), high
    self.dtype = smallest_dtype(high)
    if len(parts) > 1 and self.size <= IN_MEMORY_RECORDS:
      parts = [np.concatenate(parts, dtype=self.dtype, casting="unsafe")]  # values fit: checked above
      self.starts = np.array([0, self.size], dtype=np.int64)
    self.parts = parts

  def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
    whole = np.concatenate(self.parts) if len(self.parts) > 1 else np.asarray(self.parts[0])
    return whole.astype(dtype) if dtype is not None else whole

  def __getitem__(self, index: Any) -> Any:
    if isinstance(index, (int, np.integer)):
      position = int(index) + (self.size if int(index) < 0 else 0)
      if not 0 <= position < self.size:
        raise IndexError(f"lengths: index {int(index)} out of range [0, {self.size})")
      part = int(np.searchsorted(self.starts, position, side="right")) - 1
      return self.parts[part][position - self.starts[part]]
    index = np.asarray(index)
    if index.dtype.kind not in "iu":
      raise TypeError(f"lengths: index with integers, got {index.dtype}")
    if len(self.parts) == 1:
      return self.parts[0][index]
    flat = index.ravel().astype(np.int64)
    if flat.size and (flat.min() < 0 or flat.max() >= self.size):
      raise IndexError(f"lengths: an index out of range [0, {self.size})")
    part_of = np.searchsorted(self.starts, flat, side="right") - 1
    out = np.empty(flat.size, self.dtype)
    # One gather per part touched: parts in order, each part's indices contiguous.
    order = np.argsort(part_of, kind="stable")
    sorted_parts = part_of[order]
    bounds = np.flatnonzero(np.diff(sorted_parts)) + 1
    for group in np.split(order, bounds):
      if group.size:
        part = int(part_of[group[0]])
        out[group] = self.parts[part][flat[group] - self.starts[part]]
    return out.reshape(index.shape)

  def __repr__(self) -> str:
    return f"DocumentLengths({self.size} documents, {len(self.parts)} part(s), max {self._max})"


class ConstantLengths(LengthsBase):
  """`size` records of the same length (a window dataset's samples): the
  `DocumentLengths` interface in O(1) memory, however many records.

  >>> lengths = ConstantLengths(4, 10**12)
  >>> lengths[np.array([0, 10**11])].tolist(), lengths.sum(), lengths.mean()
  ([4, 4], 4000000000000, 4.0)
  """

  def __init__(self, length: int, size: int) -> None:
    if length < 1 or size < 0:
      raise ValueError(f"lengths: a constant length >= 1 and a size >= 0 expected, got {length}, {size}")
    self.length, self.size = int(length), int(size)
    self.dtype = smallest_dtype(self.length)

  def sum(self) -> int:
    return self.length * self.size

  def min(self) -> int:
    return self.length

  def max(self) -> int:
    return self.length

  def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
    return np.full(self.size, self.length, dtype or self.dtype)

  def __getitem__(self, index: Any) -> Any:
    if isinstance(index, (int, np.integer)):
      if not -self.size <= int(index) < self.size:
        raise IndexError(f"lengths: index {int(index)} out of range [0, {self.size})")
      return self.dtype.type(self.length)
    index = np.asarray(index)
    if index.size and (index.min() < 0 or index.max() >= self.size):
      raise IndexError(f"lengths: an index out of range [0, {self.size})")
    return np.full(index.shape, self.length, self.dtype)

  def __repr__(self) -> str:
    return f"ConstantLengths({self.size} records of {self.length})"


def load_lengths_file(
  local_file: str | bytes, named: str, num_records: int, shard: str, what: str = "lengths index"
) -> np.ndarray:
  """A shard's per-record .npy (memory-mapped from `local_file`, or parsed
  from its bytes), checked to be 1-D integers with `num_records` entries;
  errors name `named`."""
  try:
    if isinstance(local_file, bytes):
      values = np.load(io.BytesIO(local_file), allow_pickle=False)
    else:
      # Read whole up to IN_MEMORY_BYTES: a file truncated while a run maps it would end the process
      # with SIGBUS; larger ones stay mapped (docs/formats.md: replace them by rename, as `jaxdata index` does).
      small = os.path.getsize(local_file) <= IN_MEMORY_BYTES
      values = np.load(local_file, mmap_mode=None if small else "r", allow_pickle=False)
  except (ValueError, EOFError, OSError) as e:  # a zero-byte or foreign file raises EOFError
    raise DatasetError(f"{named}: not a readable .npy array ({str(e)[:200] or type(e).__name__})") from e
  widest = 8 if what != "lengths index" else 4
  if values.ndim != 1 or values.dtype.kind not in "iu" or values.dtype.itemsize > widest:
    raise DatasetError(
      f"{named}: {what} should be a 1-D array of integers of at most {8 * widest} bits, "
      f"got shape {values.shape} dtype {values.dtype}"
    )
  if values.size != num_records:
    raise DatasetError(
      f"{named}: {what} has {values.size} entries, shard {shard} has {num_records} records in manifest.json"
    )
  return values
