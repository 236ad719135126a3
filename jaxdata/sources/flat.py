"""`FlatTokenDataset`: Megatron `.bin` files and flat token arrays, read in place.

`jaxdata index --format megatron|flat` writes only small metadata: a
manifest, and per token file the length and first token of every document
(`.lengths.npy`, `.starts.npy`). Reads take token ranges straight from the
files the other tool wrote::

    read (shard, record) pairs  ->  starts[record], lengths[record]  (memory-mapped metadata)
        local files              one gather per shard from np.memmap (the default: fastest here)
        tensorstore (gs://, s3://, or local when asked)
                                 sorted ranges, neighbours merged, one batched kvstore read each
    -> RaggedTokens in request order (the same interface as `TokenDataset`)

The metadata lies beside the token files, or in another directory whose
manifest names them through `data_root` (for read-only corpora).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from jaxdata.errors import DatasetError
from jaxdata.sources.block_sums import BLOCK_BYTES, blocks_digest
from jaxdata.sources.dataset import ReadOptions
from jaxdata.sources.fileutil import SAMPLE_BLOCK, SAMPLE_BLOCKS, check_inside, file_sha256, index_sha256, sample_sha256
from jaxdata.sources.lengths import DocumentLengths, load_lengths_file
from jaxdata.sources.manifest import Manifest, ShardInfo
from jaxdata.sources.ragged import RaggedTokens
from jaxdata.sources.records import ShardedRecords, check_range
from jaxdata.sources.stores import is_remote
from jaxdata.sources.token_files import (
  KvTokenFiles,
  MappedTokenFiles,
  TokenFiles,
  kv_root,
  read_object,
  read_objects,
)

__all__ = ["FlatTokenDataset"]

_CHECK_CHUNK = 1 << 22  # documents compared at a time by verify()


class FlatTokenDataset(ShardedRecords):
  """A `megatron` or `flat` dataset; the reading interface of `TokenDataset`.

  Opening checks every token file against the manifest (size, sampled
  hash) and every metadata file's shape; each failure is a `DatasetError`
  naming the file.
  """

  pass_records: int | None = None  # documents are not drawn with replacement (see WindowView)

  def __init__(self, path: str, read_options: ReadOptions = ReadOptions(), manifest: Manifest | None = None) -> None:
    self.path = os.fspath(path).rstrip("/")
    self.read_options = read_options
    self.remote = None  # no shard cache: ranges are read from the store directly
    self.manifest = manifest or (
      Manifest.parse(read_object(self.path, "manifest.json"), f"{self.path}/manifest.json")
      if self.in_store
      else Manifest.load(self.path)
    )
    if self.manifest.format == "arrayrecord":
      raise DatasetError(f"{self.path}: an ArrayRecord dataset; open it with TokenDataset")
    self.dtype = np.dtype(self.manifest.dtype).newbyteorder("<")
    root = self.manifest.data_root
    if root and not (os.path.isabs(root) or is_remote(root)):
      raise DatasetError(
        f"{self.path}/manifest.json: data_root {root!r} must be empty, absolute or a gs:// or s3:// URL"
      )
    self.data_root: str = root or self.path
    self.reads_ranges_from_store = is_remote(self.data_root)
    shards = self.manifest.shards
    self._number_records([s.num_records for s in shards])
    self.shard_tokens = np.array([s.num_tokens for s in shards], dtype=np.int64)
    # A bucket's metadata files all at once (one round trip, not one per file and shard).
    self._fetched = (
      read_objects(self.path, [r for s in shards for r in (s.lengths_path, s.starts_path, s.blocks_path) if r])
      if self.in_store
      else {}
    )
    lengths, self.doc_starts = [], []
    for shard in shards:
      lengths.append(self._metadata(shard.lengths_path, shard.num_records, shard.path, "lengths index"))
      self.doc_starts.append(self._metadata(shard.starts_path, shard.num_records, shard.path, "starts index"))
    self.lengths = DocumentLengths(lengths)
    for shard_id, (shard, total) in enumerate(zip(shards, self.lengths.part_sums)):
      if total != shard.num_tokens:
        raise DatasetError(
          f"{self._named(shard.lengths_path)}: lengths sum to {total} tokens, manifest.json lists "
          f"{shard.num_tokens} for {shard.path}"
        )
      # The ends of the starts index (the whole of it: `verify`): first document at 0, last one ending the file.
      starts, last = self.doc_starts[shard_id], int(self.lengths[int(self.record_starts[shard_id + 1]) - 1])
      if starts.size and (int(starts[0]) != 0 or int(starts[-1]) + last != total):
        raise DatasetError(
          f"{self._named(shard.starts_path)}: documents start at {int(starts[0])} and the last ends "
          f"at {int(starts[-1]) + last}; {shard.path} has {total} tokens (metadata of another file?)"
        )
    # Then the whole index against its hash: swapped starts or permuted lengths whose ends agree.
    for shard, shard_lengths, starts in zip(shards, lengths, self.doc_starts):
      if shard.index_sha256 and index_sha256(shard_lengths, starts) != shard.index_sha256:
        raise DatasetError(
          f"{self._named(shard.lengths_path)}, {self._named(shard.starts_path)}: the document "
          f"index of {shard.path} differs from the one manifest.json lists (index_sha256); "
          "edited or from another file? Rebuild it with `jaxdata index`"
        )
    self.files: TokenFiles | None = self._open_files(read_options)
    self._fetched = {}  # read: not kept

  @property
  def in_store(self) -> bool:
    """The dataset's directory is in gs:// / s3://."""
    return is_remote(self.path)

  def shard_path(self, shard: int) -> str:
    return self._data(self.manifest.shards[shard].path)

  def read(self, shard_ids: Sequence[int] | np.ndarray, record_ids: Sequence[int] | np.ndarray) -> RaggedTokens:
    """The documents at (shard_ids[i], record_ids[i]), in that order."""
    shard_ids = np.asarray(shard_ids, dtype=np.int64).ravel()
    record_ids = np.asarray(record_ids, dtype=np.int64).ravel()
    if shard_ids.shape != record_ids.shape:
      raise ValueError(f"read: {shard_ids.size} shard ids but {record_ids.size} record ids")
    check_range(shard_ids, self.num_shards, "shard id", self.path)
    bad = np.flatnonzero((record_ids < 0) | (record_ids >= self.shard_num_records[shard_ids]))
    if bad.size:
      i = bad[0]
      raise IndexError(
        f"{self.shard_path(shard_ids[i])}: record {record_ids[i]} out of range "
        f"[0, {self.shard_num_records[shard_ids[i]]})"
      )
    global_ids = self.global_index(shard_ids, record_ids)
    counts = self.lengths[global_ids].astype(np.int64)
    starts = np.empty(shard_ids.size, np.int64)
    for shard in np.unique(shard_ids).tolist():  # one gather per shard touched
      mine = shard_ids == shard
      starts[mine] = self.doc_starts[shard][record_ids[mine]]
    return self.read_ranges(shard_ids, starts, counts)

  def read_ranges(self, shard_ids: np.ndarray, starts: np.ndarray, counts: np.ndarray) -> RaggedTokens:
    """Token ranges [starts[i], starts[i] + counts[i]) of shard shard_ids[i], in that order."""
    shard_ids = np.asarray(shard_ids, np.int64)
    starts, counts = np.asarray(starts, np.int64), np.asarray(counts, np.int64)
    offsets = np.zeros(counts.size + 1, np.int64)
    np.cumsum(counts, out=offsets[1:])
    if not counts.size:
      return RaggedTokens(np.zeros(0, self.dtype), offsets)
    bad = np.flatnonzero((starts < 0) | (counts < 0) | (starts + counts > self.shard_tokens[shard_ids]))
    if bad.size:
      i = bad[0]
      raise DatasetError(
        f"{self.shard_path(shard_ids[i])}: tokens {starts[i]}..{starts[i] + counts[i]} lie past "
        f"its {self.shard_tokens[shard_ids[i]]} tokens (metadata of another file?)"
      )
    tokens = self._token_files().gather(shard_ids, starts, counts, offsets)
    return RaggedTokens(tokens, offsets)

  def verify(self) -> None:
    """Deep check that reads everything: every token file's sha256 against the manifest, and every
    document's start against the one before plus its length."""
    for shard_id, shard in enumerate(self.manifest.shards):
      first = int(self.record_starts[shard_id])
      starts = self.doc_starts[shard_id]
      for begin in range(0, starts.size, _CHECK_CHUNK):
        chunk = np.asarray(starts[begin : begin + _CHECK_CHUNK + 1], np.int64)
        lengths = self.lengths[np.arange(first + begin, first + begin + chunk.size - 1)].astype(np.int64)
        bad = np.flatnonzero(np.diff(chunk) != lengths)
        if bad.size:
          raise DatasetError(
            f"{self._named(shard.starts_path)}: document {begin + int(bad[0]) + 1} starts at "
            f"{int(chunk[bad[0] + 1])}, not right after the one before; rebuild it with `jaxdata index`"
          )
      digest = self._token_files().sha256(shard_id)
      if digest != shard.sha256:
        raise DatasetError(
          f"{self.shard_path(shard_id)}: sha256 {digest[:12]}... differs from manifest.json "
          f"({shard.sha256[:12]}...); the file changed after it was indexed"
        )

  def transfer_stats(self) -> dict[str, float] | None:
    return self.files.transfer_stats() if self.files is not None else None

  def close(self) -> None:
    files: TokenFiles | None = getattr(self, "files", None)
    self.files = None
    if files is not None:
      files.close()

  def _token_files(self) -> TokenFiles:
    if self.files is None:
      raise DatasetError(f"{self.path}: the dataset was closed")
    return self.files

  def reopen_arguments(self) -> tuple[Any, ...]:
    return (self.path, self.read_options)  # the manifest is read again, and checked by its fingerprint

  def __repr__(self) -> str:
    return (
      f"FlatTokenDataset({self.name!r}, format={self.manifest.format}, shards={self.num_shards}, "
      f"records={self.num_records}, tokens={self.num_tokens}, dtype={self.dtype.name})"
    )

  # ------------------------------------------------------------- opening

  def _named(self, relative: str) -> str:
    return f"{self.path}/{relative}" if self.in_store else os.path.join(self.path, relative)

  def _data(self, relative: str) -> str:
    root = self.data_root
    return f"{root.rstrip('/')}/{relative}" if is_remote(root) else os.path.join(root, relative)

  def _metadata(self, relative: str, num_records: int, shard: str, what: str) -> np.ndarray:
    named = self._named(relative)
    if self.in_store:
      local = self._fetched[relative] if relative in self._fetched else read_object(self.path, relative)
      return load_lengths_file(local, named, num_records, shard, what)
    if not os.path.isfile(named):
      raise DatasetError(f"{named}: {what} of {shard} is missing; rebuild it with `jaxdata index`")
    check_inside(named, self.path, "the dataset directory")
    return load_lengths_file(named, named, num_records, shard, what)

  def _block_sums(self, shard: ShardInfo) -> np.ndarray | None:
    """The token file's block checksums (None where it was indexed without them)."""
    if not shard.blocks_path:
      return None
    if shard.block_bytes != BLOCK_BYTES:
      raise DatasetError(
        f"{self.path}/manifest.json: {shard.path} has checksums of {shard.block_bytes}-byte blocks; "
        f"this jaxdata checks {BLOCK_BYTES}-byte blocks (rebuild the index with `jaxdata index`)"
      )
    sums = self._metadata(shard.blocks_path, -(-shard.num_bytes // BLOCK_BYTES), shard.path, "block checksums")
    if shard.blocks_sha256 and blocks_digest(np.asarray(sums)) != shard.blocks_sha256:
      raise DatasetError(
        f"{self._named(shard.blocks_path)}: the block checksums differ from those manifest.json records for "
        f"{shard.path}: the checksum file was rewritten or damaged (not the token file); rebuild the index with "
        "`jaxdata index`"
      )
    return sums

  def _open_files(self, read_options: ReadOptions) -> TokenFiles:
    paths = [self._data(s.path) for s in self.manifest.shards]
    if is_remote(self.data_root) or read_options.flat_reader == "tensorstore":
      kv_files = KvTokenFiles(
        kv_root(self.data_root),
        [s.path for s in self.manifest.shards],
        paths,
        self.dtype,
        [s.num_bytes for s in self.manifest.shards],
        [s.data_offset for s in self.manifest.shards],
        sums=[self._block_sums(s) for s in self.manifest.shards],
      )
      kv_files.check_samples(
        [(i, s.num_bytes, s.sample_sha256) for i, s in enumerate(self.manifest.shards)], SAMPLE_BLOCKS, SAMPLE_BLOCK
      )
      return kv_files
    external = bool(self.manifest.data_root)  # token files the manifest names in a directory of its choosing
    for path, shard in zip(paths, self.manifest.shards):
      if not os.path.isfile(path):
        raise DatasetError(f"{path}: token file is missing (listed in manifest.json)")
      check_inside(path, self.data_root, "its data_root" if external else "the dataset directory")
      size = os.path.getsize(path)
      if size != shard.num_bytes:  # (the size of a file elsewhere is not told: the manifest chose the file)
        on_disk = "its size on disk differs from" if external else f"{size} bytes on disk,"
        raise DatasetError(f"{path}: {on_disk} manifest.json lists {shard.num_bytes} (truncated or replaced?)")
      if sample_sha256(path) != shard.sample_sha256:
        raise DatasetError(f"{path}: content differs from the file manifest.json lists (sampled hash; replaced?)")
    return MappedTokenFiles(
      paths,
      self.dtype,
      [s.num_bytes for s in self.manifest.shards],
      [s.data_offset for s in self.manifest.shards],
      file_sha256,
    )
