"""`DatasetWriter`: token documents in, a validated dataset directory out.

`jaxdata convert` (and the benchmark corpus) write through this class;
`jaxdata index` (`jaxdata.sources.index`) writes the same lengths files and
manifest next to existing shards. Every dataset on disk has this layout::

    write_documents(flat, lengths)     any number of calls, in document order
      -> web-00000.array_record        group_size:1, one document per record
      -> web-00000.lengths.npy         a shard is closed once it would exceed
      -> web-00001.array_record ...    `shard_bytes`
    finish(stats) -> manifest.json     written last: no manifest, no dataset
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from collections.abc import Mapping
from typing import Any

import numpy as np
from array_record.python.array_record_module import ArrayRecordWriter

from jaxdata.sources.columns import pair_columns, pair_layout_problem, write_columns
from jaxdata.sources.fileutil import check_name, file_sha256, sample_sha256
from jaxdata.sources.manifest import (
  COMPRESSIONS,
  MANIFEST_NAME,
  TOKENS_ONLY,
  WITH_MASK,
  WITH_PAIR_MARKS,
  WRITER_OPTIONS,
  Manifest,
  ShardInfo,
  writer_options,
)
from jaxdata.sources.masked import records_with_masks

__all__ = [
  "COMPRESSIONS",
  "DatasetWriter",
  "WRITER_OPTIONS",
  "finish_shard",
  "shard_file_names",
  "writer_options",
]

LENGTHS_DTYPE = np.dtype("<u4")


def shard_file_names(name: str, index: int) -> tuple[str, str]:
  """(shard file, lengths file) names of shard `index` of dataset `name`."""
  stem = f"{name}-{index:05d}"
  return f"{stem}.array_record", f"{stem}.lengths.npy"


def finish_shard(
  out_dir: str,
  name: str,
  index: int,
  lengths: np.ndarray,
  records: Any = None,
  columns: Mapping[str, np.ndarray] | None = None,
) -> ShardInfo:
  """Writes a closed shard's lengths index (and its per-record `columns`) beside it; its manifest
  entry. (The one place shards are described: `DatasetWriter` and the Beam converter produce the
  same bytes.) `records`: a hashlib sha256 fed the shard's record bytes as written (before compression)."""
  shard_name, lengths_name = shard_file_names(name, index)
  column_files = write_columns(out_dir, shard_name.removesuffix(".array_record"), columns or {})
  lengths = np.asarray(lengths).astype(LENGTHS_DTYPE)
  np.save(os.path.join(out_dir, lengths_name), lengths)
  shard_path = os.path.join(out_dir, shard_name)
  content = ""
  if records is not None:  # the records and where they end: the same for any compression
    records.update(lengths.tobytes())
    content = records.hexdigest()
  return ShardInfo(
    path=shard_name,
    lengths_path=lengths_name,
    num_records=int(lengths.size),
    num_tokens=int(lengths.sum(dtype=np.int64)),
    num_bytes=os.path.getsize(shard_path),
    sha256=file_sha256(shard_path),
    sample_sha256=sample_sha256(shard_path),
    records_sha256=content,
    columns=column_files,
  )


@dataclasses.dataclass
class _OpenShard:
  """The shard being written: its writer, its documents' lengths and pair marks so far, its bytes, and
  the sha256 of its records as written (`finish_shard`'s `records`)."""

  writer: ArrayRecordWriter
  lengths: list[np.ndarray] = dataclasses.field(default_factory=list)
  marks: list[np.ndarray] = dataclasses.field(default_factory=list)
  size: int = 0
  records: Any = dataclasses.field(default_factory=hashlib.sha256)


class DatasetWriter:
  """Writes documents into size-bounded ArrayRecord shards plus lengths indices.

  Output is a pure function of the documents and options (no timestamps, no
  worker ids), so a second run writes byte-identical files.

  >>> import tempfile
  >>> out = tempfile.mkdtemp()
  >>> w = DatasetWriter(out, "tiny", np.dtype("<u2"), {"kind": "byte"})
  >>> w.write_documents(np.arange(5), np.array([2, 3]))
  >>> w.finish().num_records, sorted(os.listdir(out))[0]
  (2, 'manifest.json')
  """

  def __init__(
    self,
    out_dir: str,
    name: str,
    dtype: np.dtype,
    tokenizer: dict[str, Any],
    shard_bytes: int = 256 << 20,
    compression: str = "zstd",
    *,
    masks: bool = False,
    pairs: bool = False,
  ) -> None:
    check_name(name, "name")
    if not isinstance(masks, bool):
      raise TypeError(f"masks: True (a 0 / 1 mask byte per id) or False (ids only), got {masks!r}")
    if not isinstance(pairs, bool):
      raise TypeError(f"pairs: True (each record a preference pair, `pair_record`) or False, got {pairs!r}")
    # every record: its ids, then a 0 / 1 byte per id (trained or not); for pairs, bit 1 marks the rejected side
    self._masks, self._pairs = masks or pairs, pairs
    self._writer_options = writer_options(compression)
    if shard_bytes <= 0:
      raise ValueError(f"shard_bytes: must be positive, got {shard_bytes}")
    self._dtype = np.dtype(dtype).newbyteorder("<")
    if self._dtype.name not in ("uint16", "uint32"):
      raise ValueError(f"dtype: {self._dtype} is not uint16 or uint32")
    if os.path.exists(os.path.join(out_dir, MANIFEST_NAME)):
      raise FileExistsError(
        f"{out_dir}: already holds a dataset ({MANIFEST_NAME}); choose another directory or remove it"
      )
    os.makedirs(out_dir, exist_ok=True)
    self._out_dir = out_dir
    self._name = name
    self._tokenizer = tokenizer
    self._shard_bytes = shard_bytes
    vocab = tokenizer.get("vocab_size")
    self._max_id = int(np.iinfo(self._dtype).max)
    self._id_source = self._dtype.name
    if isinstance(vocab, int) and not isinstance(vocab, bool) and 0 < vocab <= self._max_id:
      self._max_id, self._id_source = vocab - 1, f"the tokenizer's vocab_size {vocab}"
    self._shards: list[ShardInfo] = []
    self._open: _OpenShard | None = None

  def write_documents(self, flat_tokens: np.ndarray, lengths: np.ndarray, mask: np.ndarray | None = None) -> None:
    """Appends documents given as one flat id array and their lengths; with `masks`, `mask` gives
    every id's trained-token flag (0 or 1), aligned with `flat_tokens`."""
    lengths = np.asarray(lengths, dtype=np.int64)
    flat_tokens = np.asarray(flat_tokens)
    if (mask is not None) != self._masks:
      raise ValueError(
        "mask: this writer stores masks (DatasetWriter(..., masks=True)): give one per document"
        if self._masks
        else "mask: this writer stores ids only; open it with masks=True to store trained-token masks"
      )
    _check_lengths(lengths, flat_tokens.size)
    if flat_tokens.size and (flat_tokens.min() < 0 or flat_tokens.max() > self._max_id):
      raise ValueError(
        f"tokens: ids must lie in [0, {self._max_id}] for {self._id_source}; "
        f"got [{flat_tokens.min()}, {flat_tokens.max()}]"
      )
    ids = flat_tokens.astype(self._dtype, copy=False)
    if mask is not None:
      mask = _checked_mask(mask, flat_tokens.size, 3 if self._pairs else 1)
      problem = pair_layout_problem(np.asarray(flat_tokens), lengths, mask) if self._pairs else None
      if problem is not None:
        raise ValueError(f"mask: document {problem[0]} of this call is not a preference pair: {problem[1]}")
    payload = ids.tobytes() if mask is None else records_with_masks(ids, lengths, mask)
    token_ends = np.cumsum(lengths)
    record_size = self._dtype.itemsize + int(self._masks)
    byte_ends = np.cumsum(lengths) * record_size
    byte_starts = byte_ends - lengths * record_size
    start = 0
    while start < lengths.size:
      shard = self._open or self._open_shard()
      # Fill the open shard up to shard_bytes (at least one document per shard).
      room = self._shard_bytes - shard.size + byte_starts[start]
      stop = int(np.searchsorted(byte_ends, room, side="right"))
      stop = max(stop, start + 1) if shard.size == 0 else stop
      stop = min(stop, lengths.size)
      if stop == start:
        self._close_shard()
        continue
      for s, e in zip(byte_starts[start:stop].tolist(), byte_ends[start:stop].tolist()):
        shard.writer.write(payload[s:e])
      shard.records.update(payload[int(byte_starts[start]) : int(byte_ends[stop - 1])])
      shard.lengths.append(lengths[start:stop])
      if self._pairs:
        assert mask is not None  # checked above
        shard.marks.append(mask[int(token_ends[start] - lengths[start]) : int(token_ends[stop - 1])])
      shard.size += int(byte_ends[stop - 1] - byte_starts[start])
      start = stop
      if shard.size >= self._shard_bytes:
        self._close_shard()

  def finish(self, stats: dict[str, Any] | None = None) -> Manifest:
    """Closes the last shard and writes the manifest; returns it."""
    if self._open is not None:
      self._close_shard()
    manifest = Manifest(
      name=self._name,
      dtype=self._dtype.name,
      tokenizer=self._tokenizer,
      shards=tuple(self._shards),
      stats=stats or {},
      features=WITH_PAIR_MARKS if self._pairs else WITH_MASK if self._masks else TOKENS_ONLY,
    )
    manifest.save(self._out_dir)
    return manifest

  def _open_shard(self) -> _OpenShard:
    shard_name, _ = shard_file_names(self._name, len(self._shards))
    self._open = _OpenShard(ArrayRecordWriter(os.path.join(self._out_dir, shard_name), self._writer_options))
    return self._open

  def _close_shard(self) -> None:
    shard, self._open = self._open, None
    assert shard is not None
    shard.writer.close()
    lengths = np.concatenate(shard.lengths) if shard.lengths else np.zeros(0, np.int64)
    columns = pair_columns(lengths, np.concatenate(shard.marks)) if self._pairs else None
    self._shards.append(finish_shard(self._out_dir, self._name, len(self._shards), lengths, shard.records, columns))


def _check_lengths(lengths: np.ndarray, tokens: int) -> None:
  """Documents' lengths: summing to the `tokens` given, each of at least one token and below 2**32."""
  if int(lengths.sum()) != tokens:
    raise ValueError(f"lengths: sum {int(lengths.sum())} != {tokens} tokens given")
  if (lengths < 0).any() or (lengths > np.iinfo(LENGTHS_DTYPE).max).any():
    raise ValueError("lengths: every document needs 0 <= length < 2**32")
  empty = np.flatnonzero(lengths == 0)
  if empty.size:
    raise ValueError(
      f"lengths: {empty.size} empty documents (the first is document {int(empty[0])} of this call); "
      "a dataset holds documents of at least one token (jaxdata convert skips and counts empty ones)"
    )


def _checked_mask(mask: np.ndarray, size: int, highest: int = 1) -> np.ndarray:
  mask = np.asarray(mask)
  if mask.shape != (size,):
    raise ValueError(f"mask: {mask.shape} values for {size} tokens; give one 0 / 1 per token")
  if mask.dtype.kind not in "biu" or (mask.size and (mask.min() < 0 or mask.max() > highest)):
    what = "0 or 1 (trained or not)" if highest == 1 else "0 to 3 (bit 0 trained, bit 1 the rejected side)"
    raise ValueError(f"mask: every value is {what}, got {np.unique(mask)[:5].tolist()}")
  return mask.astype(np.uint8, copy=False)
