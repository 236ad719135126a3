"""`build_index`: lengths indices and a manifest for existing token shards.

For ArrayRecord shards of raw little-endian token ids that were written by
another tool: reads every record once (sequentially), checks its byte length
against the dtype, and writes ``<shard>.lengths.npy`` beside each shard and a
``manifest.json`` in the output directory (the shards' directory by default).
"""

from __future__ import annotations

import os
from typing import Any, Callable, Sequence

import numpy as np
from array_record.python.array_record_module import ArrayRecordReader

from jaxdata.errors import DatasetError
from jaxdata.sources.fileutil import check_name, file_sha256, sample_sha256
from jaxdata.sources.manifest import MANIFEST_NAME, Manifest, ShardInfo
from jaxdata.sources.writer import LENGTHS_DTYPE

__all__ = ["build_index", "record_byte_lengths"]

_CHUNK = 8192
_SHARD_SUFFIX = ".array_record"


def record_byte_lengths(path: str) -> np.ndarray:
  """Byte length of every record of one ArrayRecord file, read sequentially.
  A file that is not a readable ArrayRecord file is a DatasetError naming it."""
  try:
    reader = ArrayRecordReader(path)
  except RuntimeError as e:  # the reader's constructor rejects empty and foreign files
    raise DatasetError(f"{path}: not a readable ArrayRecord file ({str(e)[:200]})") from e
  try:
    if not reader.ok():
      raise DatasetError(f"{path}: not a readable ArrayRecord file")
    total = reader.num_records()
    pieces = []
    for start in range(0, total, _CHUNK):
      try:
        blobs = reader.read(start, min(start + _CHUNK, total))
      except RuntimeError as e:
        raise DatasetError(f"{path}: read failed near record {start}: {str(e)[:200]}") from e
      pieces.append(np.fromiter(map(len, blobs), dtype=np.int64, count=len(blobs)))
    return np.concatenate(pieces) if pieces else np.zeros(0, np.int64)
  finally:
    _close_quietly(reader)


def _close_quietly(reader: ArrayRecordReader) -> None:
  """Closes a reader; a failure to close a file that already failed must not
  replace the error that says which file and why."""
  try:
    reader.close()
  except RuntimeError:
    pass


def build_index(
    shard_paths: Sequence[str],
    dtype: str,
    out_dir: str | None = None,
    name: str | None = None,
    tokenizer: dict[str, Any] | None = None,
    on_shard: Callable[[str], None] | None = None,
) -> Manifest:
  """Writes lengths indices for `shard_paths` and a manifest; returns it.

  Raises `DatasetError` naming the shard for a missing or unreadable file or
  a record whose byte length is not a whole number of `dtype` tokens, and
  `FileExistsError` if the output directory already has a manifest.
  """
  if not shard_paths:
    raise ValueError("shard_paths: give at least one shard")
  np_dtype = np.dtype(dtype)
  if np_dtype.name not in ("uint16", "uint32"):
    raise ValueError(f"dtype: {dtype!r} is not uint16 or uint32")
  paths = [os.path.abspath(p) for p in shard_paths]
  for path in paths:
    if not os.path.isfile(path):
      raise DatasetError(f"{path}: shard file does not exist")
  if out_dir is None:
    out_dir = os.path.commonpath([os.path.dirname(p) for p in paths])
  out_dir = os.path.abspath(out_dir)
  for path in paths:
    if os.path.commonpath([out_dir, path]) != out_dir:
      raise ValueError(f"{path}: lies outside the output directory {out_dir}; a manifest names only "
                       "files inside its own directory (pass --out a directory that holds the shards)")
  if os.path.exists(os.path.join(out_dir, MANIFEST_NAME)):
    raise FileExistsError(f"{out_dir}: already has a {MANIFEST_NAME}")
  name = check_name(name or os.path.basename(out_dir), "name")
  # Read and check every shard first: a bad one leaves no lengths file behind.
  checked = [(path, _shard_lengths(path, np_dtype)) for path in paths]
  shards, written = [], []
  try:
    for path, lengths in checked:
      stem = path[: -len(_SHARD_SUFFIX)] if path.endswith(_SHARD_SUFFIX) else path
      lengths_path = stem + ".lengths.npy"
      np.save(lengths_path, lengths)
      written.append(lengths_path)
      shards.append(
          ShardInfo(
              path=os.path.relpath(path, out_dir),
              lengths_path=os.path.relpath(lengths_path, out_dir),
              num_records=int(lengths.size),
              num_tokens=int(lengths.sum(dtype=np.int64)),
              num_bytes=os.path.getsize(path),
              sha256=file_sha256(path),
              sample_sha256=sample_sha256(path),
          )
      )
      if on_shard is not None:
        on_shard(path)
    manifest = Manifest(
        name=name,
        dtype=np_dtype.name,
        tokenizer=tokenizer or {"kind": "unknown"},
        shards=tuple(shards),
        stats={"indexed_by": "jaxdata index"},
    )
    os.makedirs(out_dir, exist_ok=True)
    manifest.save(out_dir)
  except BaseException:
    for lengths_path in written:  # remove what this call wrote, nothing else
      os.remove(lengths_path)
    raise
  return manifest


def _shard_lengths(path: str, np_dtype: np.dtype) -> np.ndarray:
  """The tokens of every record of a shard; DatasetError for a record that is
  empty or not a whole number of tokens."""
  byte_lengths = record_byte_lengths(path)
  odd = np.flatnonzero(byte_lengths % np_dtype.itemsize)
  if odd.size:
    raise DatasetError(
        f"{path}: record {odd[0]} has {byte_lengths[odd[0]]} bytes, not a whole "
        f"number of {np_dtype.name} tokens"
    )
  empty = np.flatnonzero(byte_lengths == 0)
  if empty.size:
    raise DatasetError(
        f"{path}: {empty.size} empty records (the first is record {int(empty[0])}); a dataset holds "
        "documents of at least one token: rewrite the shard without them"
    )
  return (byte_lengths // np_dtype.itemsize).astype(LENGTHS_DTYPE)
