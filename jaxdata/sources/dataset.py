"""`TokenDataset`: a validated dataset directory with batched random reads.

A read takes many (shard, record) positions at once::

    positions (request order)   (2,7) (0,3) (2,1) (0,9)
        group by shard           shard 0: [3, 9]      shard 2: [1, 7]
        one multi-index read     reader0.read([3,9])  reader2.read([1,7])   (thread pool)
        back to request order    b"".join(...) -> one np.frombuffer -> RaggedTokens

so the per-record cost is the ArrayRecord decode itself; there is no Python
loop over documents, and records are raw little-endian ids (never pickle).
"""

from __future__ import annotations

import concurrent.futures
import operator
import os
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
from array_record.python.array_record_module import ArrayRecordReader

from jaxdata.errors import DatasetError
from jaxdata.sources.columns import check_pair_columns, load_column
from jaxdata.sources.fileutil import check_inside, file_sha256, sample_sha256
from jaxdata.sources.image_records import ImageEntry, split_image_trailer
from jaxdata.sources.index import record_byte_lengths
from jaxdata.sources.lengths import DocumentLengths, load_lengths_file
from jaxdata.sources.manifest import Manifest, ShardInfo
from jaxdata.sources.masked import split_masked
from jaxdata.sources.ragged import RaggedTokens
from jaxdata.sources.read_options import ReadOptions
from jaxdata.sources.records import ShardedRecords, check_range
from jaxdata.sources.remote import RemoteShards
from jaxdata.sources.shard_cache import CacheOptions, default_cache_options
from jaxdata.sources.stores import is_remote

__all__ = ["RaggedTokens", "ReadOptions", "TokenDataset"]


class TokenDataset(ShardedRecords):
  """A dataset directory, checked against its manifest when opened.

  Opening checks, for every shard: the file exists and has the listed size;
  its lengths index exists, has one entry per record and sums to the listed
  tokens; the ArrayRecord footer opens and counts the listed records. Reads
  check every record's byte length against the lengths index and the dtype.
  Each failure is a `DatasetError` naming the shard file.
  """

  pass_records: int | None = None  # documents are not drawn with replacement (see WindowView)

  def __init__(self, path: str, read_options: ReadOptions = ReadOptions(), cache: CacheOptions | None = None) -> None:
    self.path = os.fspath(path)
    self.read_options = read_options
    self.cache_options = cache
    # One reader per shard, shared by all threads: ArrayRecord readers are
    # thread-safe for reads. A remote shard's reader opens once its file is cached.
    self._readers: list[ArrayRecordReader | None] = []
    self._readers_lock = threading.Lock()
    self._pool: concurrent.futures.ThreadPoolExecutor | None = None
    self.remote: RemoteShards | None = None
    if is_remote(self.path):
      self.remote = RemoteShards(self.path, cache or default_cache_options(), self._drop_reader)
      self.manifest = self.remote.manifest
    else:
      self.manifest = Manifest.load(self.path)
    if self.manifest.format != "arrayrecord":
      self.close()
      raise DatasetError(f"{self.path}: a {self.manifest.format} dataset; open it with open_dataset")
    self.dtype = np.dtype(self.manifest.dtype).newbyteorder("<")
    lengths = []
    try:
      for i, shard in enumerate(self.manifest.shards):
        if self.remote is None:
          lengths.append(self._check_shard_files(shard))
          self._readers.append(self._open_reader(shard, os.path.join(self.path, shard.path)))
        else:
          lengths.append(
            self._check_lengths(shard, self.remote.lengths_file(i), os.path.join(self.path, shard.lengths_path))
          )
          self._readers.append(None)
      # Memory-mapped, smallest dtype; totals computed once, a shard at a time.
      self.lengths = DocumentLengths(lengths)
      self._check_totals()
      self.columns = self._load_columns()
    except BaseException:  # re-raised: the readers opened so far are closed first
      self.close()
      raise
    self._number_records([s.num_records for s in self.manifest.shards])

  def shard_path(self, shard: int) -> str:
    return os.path.join(self.path, self.manifest.shards[shard].path)

  def _load_columns(self) -> dict[str, np.ndarray]:
    """Every per-record column the shards list (`jaxdata.sources.columns`), concatenated in record order."""
    shards = self.manifest.shards
    names = list(shards[0].columns) if shards else []
    columns: dict[str, np.ndarray] = {}
    for name in names:
      parts = []
      for i, shard in enumerate(shards):
        if name not in shard.columns:
          raise DatasetError(f"{self.path}: manifest.json: shards[{i}] lists no column {name!r} (shards[0] does)")
        named = os.path.join(self.path, shard.columns[name])
        local = named if self.remote is None else self.remote.column_file(i, name)
        parts.append(load_column(local, named, shard.num_records))
      columns[name] = np.concatenate(parts)
    if self.manifest.holds_pairs:  # what planning reads instead of the records: checked once, here
      first = 0
      for shard in shards:
        cut = slice(first, first + shard.num_records)
        lengths = np.asarray(self.lengths[np.arange(cut.start, cut.stop)])
        named = f"{os.path.join(self.path, shard.columns['chosen_length'])} / {shard.columns['prompt_length']}"
        check_pair_columns(lengths, columns["chosen_length"][cut], columns["prompt_length"][cut], named)
        first = cut.stop
    return columns

  def read(
    self,
    shard_ids: Sequence[int] | np.ndarray,
    record_ids: Sequence[int] | np.ndarray,
  ) -> RaggedTokens:
    """Reads the records at (shard_ids[i], record_ids[i]), in that order.

    Records are grouped per shard into one multi-index ArrayRecord read each;
    shards run on a thread pool. The returned tokens are read-only.
    """
    return self.read_with_images(shard_ids, record_ids, images=False)[0]

  def read_with_images(
    self, shard_ids: Sequence[int] | np.ndarray, record_ids: Sequence[int] | np.ndarray, images: bool = True
  ) -> tuple[RaggedTokens, list[list[ImageEntry]]]:
    """`read`, and of an image-text dataset each record's images (bytes as stored, height, width, where its
    image tokens start) from the same read; an empty list per record for other datasets (or without `images`)."""
    shard_ids = np.asarray(shard_ids, dtype=np.int64).ravel()
    record_ids = np.asarray(record_ids, dtype=np.int64).ravel()
    if shard_ids.shape != record_ids.shape:
      raise ValueError(f"read: {shard_ids.size} shard ids but {record_ids.size} record ids")
    count = shard_ids.size
    if count == 0:
      return RaggedTokens(np.zeros(0, self.dtype), np.zeros(1, np.int64), self._no_mask()), []
    blobs, token_lengths = self._record_bytes(shard_ids, record_ids)
    found: list[list[ImageEntry]] = [[] for _ in range(count)]
    if self.manifest.holds_images:  # the text part (a masked record), then the images
      cut = (token_lengths * self.manifest.record_itemsize).tolist()
      if images:
        where = [f"{self.shard_path(int(s))}: record {int(r)}" for s, r in zip(shard_ids, record_ids)]
        found = [split_image_trailer(b[n:], w) for b, n, w in zip(blobs, cut, where)]
      blobs = tuple(b[:n] for b, n in zip(blobs, cut))
    byte_lengths = np.fromiter(map(len, blobs), dtype=np.int64, count=count)
    self._check_byte_lengths(byte_lengths, token_lengths, shard_ids, record_ids)
    offsets = np.zeros(count + 1, np.int64)
    np.cumsum(token_lengths, out=offsets[1:])
    if not self.manifest.has_mask:
      return RaggedTokens(np.frombuffer(b"".join(blobs), dtype=self.dtype), offsets), found
    return self._split_masks(tuple(blobs), token_lengths, offsets, shard_ids, record_ids), found

  def _record_bytes(self, shard_ids: np.ndarray, record_ids: np.ndarray) -> tuple[tuple[bytes, ...], np.ndarray]:
    """The records' bytes in request order and their token lengths: one multi-index read per shard."""
    count = shard_ids.size
    check_range(shard_ids, self.num_shards, "shard id", self.path)
    for_shard = self.shard_num_records[shard_ids]
    bad = np.flatnonzero((record_ids < 0) | (record_ids >= for_shard))
    if bad.size:
      i = bad[0]
      raise IndexError(f"{self.shard_path(shard_ids[i])}: record {record_ids[i]} out of range [0, {for_shard[i]})")
    order = np.lexsort((record_ids, shard_ids))
    sorted_shards = shard_ids[order]
    cuts = np.flatnonzero(np.diff(sorted_shards)) + 1
    groups = np.split(order, cuts)
    jobs = [(int(shard_ids[g[0]]), record_ids[g].tolist()) for g in groups]
    keep = {shard for shard, _ in jobs}
    if self.remote is not None:
      self.remote.want([shard for shard, _ in jobs])  # fetched in parallel, as many as fit
    if len(jobs) == 1 or self.read_options.num_threads == 1:
      parts = [self._read_shard(shard, records, keep) for shard, records in jobs]
    else:
      parts = list(self._thread_pool().map(lambda job: self._read_shard(job[0], job[1], keep), jobs))
    sorted_blobs = [blob for part in parts for blob in part]
    # position_in_sorted[i] = where request i landed in the sorted reads.
    position_in_sorted = np.empty(count, np.int64)
    position_in_sorted[order] = np.arange(count)
    if count == 1:
      blobs = tuple(sorted_blobs)
    else:
      blobs = operator.itemgetter(*position_in_sorted.tolist())(sorted_blobs)
    return tuple(blobs), self.lengths[self.global_index(shard_ids, record_ids)].astype(np.int64)

  def read_images(
    self, shard_ids: Sequence[int] | np.ndarray, record_ids: Sequence[int] | np.ndarray
  ) -> list[list[ImageEntry]]:
    """Each record's images as stored, with their (height, width) and where their image tokens start: an
    image-text dataset's (`WITH_IMAGES`)."""
    if not self.manifest.holds_images:
      raise DatasetError(f"{self.path}: holds no images (its records are {list(self.manifest.features)})")
    return self.read_with_images(shard_ids, record_ids)[1]

  def _no_mask(self) -> np.ndarray | None:
    return np.zeros(0, np.uint8) if self.manifest.has_mask else None

  def _split_masks(
    self,
    joined: tuple[bytes, ...],
    token_lengths: np.ndarray,
    offsets: np.ndarray,
    shard_ids: np.ndarray,
    record_ids: np.ndarray,
  ) -> RaggedTokens:
    """Records of ids then one mask byte per id: both, vectorised (no loop over records)::

    record i   | n_i ids (n_i x itemsize bytes) | n_i mask bytes |
    """
    highest = 3 if self.manifest.holds_pairs else 1  # a pair's byte: bit 0 trained, bit 1 rejected side
    tokens, mask, bad = split_masked(joined, token_lengths, self.dtype, highest=highest)
    if bad >= 0:
      document = int(np.searchsorted(offsets, bad, side="right")) - 1
      raise DatasetError(
        f"{self.shard_path(shard_ids[document])}: record {record_ids[document]} holds a mask byte above "
        f"{highest} (damaged, or not a {'pair' if highest == 3 else 'masked'} record)"
      )
    return RaggedTokens(tokens, offsets, mask, self.manifest.holds_pairs)

  def verify(self) -> None:
    """Deep check that reads everything: every shard's sha256 against the
    manifest and every record's byte length against the lengths index."""
    for shard_id, shard in enumerate(self.manifest.shards):
      path = self.shard_path(shard_id) if self.remote is None else self.remote.shard_file(shard_id, {shard_id})
      digest = file_sha256(path)
      if digest != shard.sha256:
        raise DatasetError(
          f"{path}: sha256 {digest[:12]}... differs from manifest.json "
          f"({shard.sha256[:12]}...); the shard changed after it was written"
        )
      byte_lengths = record_byte_lengths(path)
      records = np.arange(shard.num_records)
      token_lengths = self.lengths[self.record_starts[shard_id] + records].astype(np.int64)
      if self.manifest.holds_images:  # the text part, then at least the images' header
        text = token_lengths * self.manifest.record_itemsize
        byte_lengths = np.where(byte_lengths >= text + 4, text, byte_lengths)
      self._check_byte_lengths(byte_lengths, token_lengths, np.full(shard.num_records, shard_id), records)

  def transfer_stats(self) -> dict[str, float] | None:
    return self.remote.transfer_stats() if self.remote is not None else None

  def close(self) -> None:
    if self._pool is not None:
      self._pool.shutdown(wait=True)
      self._pool = None
    if self.remote is not None:
      self.remote.close()
    for reader in self._readers:
      if reader is not None:
        reader.close()
    self._readers = []

  def reopen_arguments(self) -> tuple[Any, ...]:
    return (self.path, self.read_options, self.cache_options)

  def __repr__(self) -> str:
    return (
      f"TokenDataset({self.name!r}, shards={self.num_shards}, "
      f"records={self.num_records}, tokens={self.num_tokens}, dtype={self.dtype.name})"
    )

  def _thread_pool(self) -> concurrent.futures.ThreadPoolExecutor:
    if self._pool is None:
      self._pool = concurrent.futures.ThreadPoolExecutor(
        self.read_options.num_threads, thread_name_prefix=f"jaxdata-read-{self.name}"
      )
    return self._pool

  def _read_shard(self, shard: int, records: list[int], keep: set[int]) -> list[bytes]:
    reader = self._readers[shard] if self.remote is None else self._remote_reader(self.remote, shard, keep)
    assert reader is not None  # a local shard's reader is opened with the dataset
    try:
      return reader.read(records)
    except RuntimeError as e:
      raise DatasetError(f"{self.shard_path(shard)}: read failed: {e}") from e

  def _remote_reader(self, remote: RemoteShards, shard: int, keep: set[int]) -> ArrayRecordReader:
    """The reader of a remote shard's cached file (fetched now if need be)."""
    local = remote.shard_file(shard, keep)
    with self._readers_lock:
      if self._readers[shard] is None:
        self._readers[shard] = self._open_reader(self.manifest.shards[shard], local, self.shard_path(shard))
      return self._readers[shard]

  def _drop_reader(self, shard: int) -> None:
    """The shard's file left the cache: its reader closes (reopened on the next fetch)."""
    with self._readers_lock:
      reader, self._readers[shard] = self._readers[shard], None
    if reader is not None:
      reader.close()

  def _check_shard_files(self, shard: ShardInfo) -> np.ndarray:
    """Checks a shard's files against the manifest; returns its lengths index."""
    shard_file = os.path.join(self.path, shard.path)
    if not os.path.isfile(shard_file):
      raise DatasetError(f"{shard_file}: shard file is missing (listed in manifest.json)")
    for listed in (shard.path, shard.lengths_path):
      check_inside(os.path.join(self.path, listed), self.path, "the dataset directory")
    size = os.path.getsize(shard_file)
    if size != shard.num_bytes:
      raise DatasetError(
        f"{shard_file}: {size} bytes on disk, manifest.json lists {shard.num_bytes} (truncated or replaced?)"
      )
    if shard.sample_sha256:
      if sample_sha256(shard_file) != shard.sample_sha256:
        raise DatasetError(
          f"{shard_file}: content differs from the shard manifest.json lists (sampled "
          "hash; replaced or swapped with another file?)"
        )
    elif file_sha256(shard_file) != shard.sha256:  # a format 1 manifest: the full hash, slower
      raise DatasetError(
        f"{shard_file}: content differs from the shard manifest.json lists "
        "(sha256; replaced or swapped with another file?)"
      )
    lengths_file = os.path.join(self.path, shard.lengths_path)
    if not os.path.isfile(lengths_file):
      raise DatasetError(
        f"{lengths_file}: lengths index of shard {shard.path} is missing; rebuild it with `jaxdata index`"
      )
    return self._check_lengths(shard, lengths_file, lengths_file)

  @staticmethod
  def _check_lengths(shard: ShardInfo, local_file: str, lengths_file: str) -> np.ndarray:
    """A shard's lengths index (memory-mapped from `local_file`), checked;
    errors name `lengths_file` (its place in the dataset)."""
    return load_lengths_file(local_file, lengths_file, shard.num_records, shard.path)

  def _check_totals(self) -> None:
    """Each shard's lengths: none negative, and they sum to the manifest's tokens."""
    for shard, total, low in zip(self.manifest.shards, self.lengths.part_sums, self.lengths.part_mins):
      lengths_file = os.path.join(self.path, shard.lengths_path)
      if low is not None and low < 0:
        raise DatasetError(f"{lengths_file}: lengths index holds a negative length ({low})")
      if total != shard.num_tokens:
        raise DatasetError(
          f"{lengths_file}: lengths sum to {total} tokens, manifest.json lists {shard.num_tokens} for {shard.path}"
        )

  def _open_reader(self, shard: ShardInfo, local_file: str, shard_file: str | None = None) -> ArrayRecordReader:
    """An ArrayRecord reader of `local_file`, checked; errors name `shard_file` (default: the local file)."""
    shard_file = shard_file or local_file
    reader = ArrayRecordReader(local_file, self.read_options.reader_options)
    if not reader.ok():
      try:
        reader.read([0])  # surfaces the reader's own description of the fault
        detail = "reader is not ok"
      except RuntimeError as e:
        detail = str(e)
      raise DatasetError(f"{shard_file}: not a readable ArrayRecord file ({detail})")
    found = reader.num_records()
    if found != shard.num_records:
      reader.close()
      raise DatasetError(f"{shard_file}: {found} records in the file, manifest.json lists {shard.num_records}")
    return reader

  def _check_byte_lengths(
    self,
    byte_lengths: np.ndarray,
    token_lengths: np.ndarray,
    shard_ids: np.ndarray,
    record_ids: np.ndarray,
  ) -> None:
    size = self.manifest.record_itemsize  # an id, and its mask byte in a masked dataset
    bad = np.flatnonzero(byte_lengths != token_lengths * size)
    if not bad.size:
      return
    i = bad[0]
    where = f"{self.shard_path(shard_ids[i])}: record {record_ids[i]}"
    what = f"{self.dtype.name} tokens" + (" with their mask bytes" if self.manifest.has_mask else "")
    if byte_lengths[i] % size:
      raise DatasetError(
        f"{where} has {byte_lengths[i]} bytes, not a whole number of {what} (wrong dtype in manifest.json?)"
      )
    raise DatasetError(f"{where} has {byte_lengths[i] // size} tokens, the lengths index says {token_lengths[i]}")
