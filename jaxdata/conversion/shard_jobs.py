"""Shards planned from lengths and written independently: the last phase of every converter.

::

    lengths of every unit, in unit order   [u0: 5 docs][u1: 3 docs][u2: 7 docs]
    plan_shards (bytes <= shard_bytes)      shard 0 = u0[0:5] + u1[0:1]   shard 1 = u1[1:3] + u2[0:4]   ...
    write_shard (any process, any order)    ArrayRecord records + lengths index -> ShardInfo

Each shard is a pure function of the documents, so the local converter's
process pool and Beam's workers write the same bytes as `DatasetWriter`
fed the same documents in order.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np
from array_record.python.array_record_module import ArrayRecordWriter

from jaxdata.sources.columns import pair_columns
from jaxdata.sources.image_records import IMAGE_COLUMNS, image_trailer, trailer_sizes
from jaxdata.sources.manifest import ShardInfo, writer_options
from jaxdata.sources.masked import records_with_masks
from jaxdata.sources.writer import finish_shard, shard_file_names

__all__ = ["IMAGE_TABLE", "ShardJob", "ShardTarget", "plan_shard_jobs", "plan_shards", "record_sizes", "write_shard"]


IMAGE_TABLE = 5  # per image: bytes, height, width, patches, token offset in its record


class UnitImageArrays(Protocol):
  """A unit's images as a shard job reads them (`vision_units.UnitImages`): per document its count; per
  image (bytes, height, width, patches, token offset); the images' bytes back to back."""

  @property
  def counts(self) -> np.ndarray: ...

  @property
  def table(self) -> np.ndarray: ...

  @property
  def blob(self) -> np.ndarray: ...


ShardJob = tuple[int, list[tuple[int, int, int]]]  # (shard index, [(unit, first document, end document)])
Loader = Callable[[int], np.ndarray]  # unit index -> its tokens, or its lengths


def plan_shards(lengths: np.ndarray, itemsize: int, shard_bytes: int) -> np.ndarray:
  """End (exclusive document index) of every shard: each the longest run of the next
  documents whose bytes fit in shard_bytes, at least one document (what DatasetWriter does).

  >>> plan_shards(np.array([3, 3, 5, 1, 1]), itemsize=2, shard_bytes=12).tolist()
  [2, 4, 5]
  """
  ends = np.cumsum(np.asarray(lengths, np.int64)) * itemsize
  cuts, start = [], 0
  while start < ends.size:
    base = int(ends[start - 1]) if start else 0
    stop = max(int(np.searchsorted(ends, base + shard_bytes, side="right")), start + 1)
    cuts.append(stop)
    start = stop
  return np.asarray(cuts, np.int64)


def record_sizes(lengths: np.ndarray, bytes_per_token: int, images: UnitImageArrays | None = None) -> np.ndarray:
  """Each record's bytes: its ids and mask bytes and, with `images`, its image header and images.

  >>> record_sizes(np.array([3, 2]), 3).tolist()
  [9, 6]
  """
  size = np.asarray(lengths, np.int64) * bytes_per_token
  if images is not None:
    counts, table = np.asarray(images.counts, np.int64), np.asarray(images.table, np.int64).reshape(-1, IMAGE_TABLE)
    owner = np.repeat(np.arange(counts.size), counts)
    size = size + trailer_sizes(counts, np.bincount(owner, table[:, 0], counts.size).astype(np.int64))
  return size


def plan_shard_jobs(unit_lengths: Sequence[tuple[int, np.ndarray]], itemsize: int, shard_bytes: int) -> list[ShardJob]:
  """Every shard's pieces of units, from (unit index, lengths) of all units in unit order.

  >>> plan_shard_jobs([(0, np.array([3, 3])), (1, np.array([5, 1]))], itemsize=2, shard_bytes=12)
  [(0, [(0, 0, 2)]), (1, [(1, 0, 2)])]
  """
  unit_starts = np.concatenate([[0], np.cumsum([lengths.size for _, lengths in unit_lengths])]).astype(np.int64)
  all_lengths = np.concatenate([lengths for _, lengths in unit_lengths] + [np.zeros(0, np.int64)])
  jobs, begin = [], 0
  for index, end in enumerate(plan_shards(all_lengths, itemsize, shard_bytes).tolist()):
    first_unit = int(np.searchsorted(unit_starts, begin, side="right")) - 1
    pieces = []
    for position in range(first_unit, len(unit_lengths)):
      start, stop = max(begin, int(unit_starts[position])), min(end, int(unit_starts[position + 1]))
      if start >= end:
        break
      if start < stop:
        pieces.append(
          (unit_lengths[position][0], start - int(unit_starts[position]), stop - int(unit_starts[position]))
        )
    jobs.append((index, pieces))
    begin = end
  return jobs


@dataclasses.dataclass(frozen=True)
class ShardTarget:
  """Where every shard job of one conversion writes, and how: the same for each job and each runner's
  workers (the local processes, Beam's `WriteShards`)."""

  out_dir: str
  name: str
  dtype: str
  scratch: str  # the units' tokens, lengths (and masks) as the tokenize phase left them
  compression: str
  masks: bool = False
  pairs: bool = False
  images: bool = False  # each record ends with its images (vision examples)


def write_shard(
  job: ShardJob,
  out_dir: str,
  name: str,
  dtype: str,
  tokens_of: Loader,
  lengths_of: Loader,
  *,
  compression: str = "zstd",
  masks_of: Loader | None = None,
  pairs: bool = False,
  images_of: Callable[[int], UnitImageArrays] | None = None,
) -> ShardInfo:
  """Writes shard `job` into `out_dir` (a local directory) from its units' tokens (and, for fine-tuning
  examples, their trained-token masks: each record its ids, then a mask byte per id); its manifest entry."""
  index, pieces = job
  np_dtype = np.dtype(dtype).newbyteorder("<")
  shard_name, _ = shard_file_names(name, index)
  writer = ArrayRecordWriter(os.path.join(out_dir, shard_name), writer_options(compression))
  all_lengths, all_marks = [], []
  image_columns: dict[str, list[np.ndarray]] = {name: [] for name in IMAGE_COLUMNS}
  records = hashlib.sha256()  # the records as written: the fingerprint's, whatever the compression
  record_size = np_dtype.itemsize + (masks_of is not None)
  try:
    for unit, first, last in pieces:
      lengths = np.asarray(lengths_of(unit), np.int64)
      starts = np.concatenate([[0], np.cumsum(lengths)])
      ids = np.asarray(tokens_of(unit)[starts[first] : starts[last]]).astype(np_dtype, copy=False)
      if masks_of is None:
        payload = ids.tobytes()
      else:
        marks = np.asarray(masks_of(unit)[starts[first] : starts[last]])
        payload = records_with_masks(ids, lengths[first:last], marks)
        if pairs:
          all_marks.append(marks)
      offsets = ((starts[first : last + 1] - starts[first]) * record_size).tolist()
      trailers = _trailers(images_of(unit), first, last, image_columns) if images_of is not None else None
      for k, (begin, end) in enumerate(zip(offsets[:-1], offsets[1:])):
        record = payload[begin:end] if trailers is None else payload[begin:end] + trailers[k]
        writer.write(record)
        if trailers is not None:
          records.update(record)
      if trailers is None:
        records.update(payload[offsets[0] : offsets[-1]])
      all_lengths.append(lengths[first:last])
  finally:
    writer.close()
  lengths = np.concatenate(all_lengths)
  columns = pair_columns(lengths, np.concatenate(all_marks)) if pairs else None
  if images_of is not None:
    columns = {name: np.concatenate(parts).astype(np.uint32) for name, parts in image_columns.items()}
  return finish_shard(out_dir, name, index, lengths, records, columns)


def _trailers(images: UnitImageArrays, first: int, last: int, columns: dict[str, list[np.ndarray]]) -> list[bytes]:
  """Documents [first, last) of a unit: each one's images as its record's trailer (`image_trailer`); their
  counts and patches added to the shard's `columns`."""
  counts, table, blob = np.asarray(images.counts, np.int64), np.asarray(images.table, np.int64), images.blob
  image_starts = np.cumsum(counts) - counts
  byte_ends = np.cumsum(table[:, 0])
  byte_starts = byte_ends - table[:, 0]
  out = []
  for doc in range(first, last):
    rows = range(int(image_starts[doc]), int(image_starts[doc] + counts[doc]))
    stored = [bytes(blob[byte_starts[i] : byte_ends[i]]) for i in rows]
    out.append(image_trailer(stored, table[rows.start : rows.stop][:, [1, 2, 4]]))
  owner = np.repeat(np.arange(counts.size), counts)  # each image's document
  patches = np.bincount(owner, weights=table[:, 3], minlength=counts.size).astype(np.int64)
  columns["num_images"].append(counts[first:last])
  columns["num_patches"].append(patches[first:last])
  return out
