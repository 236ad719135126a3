"""`build_index`: lengths indices and a manifest for existing token shards.

For ArrayRecord shards of raw little-endian token ids that were written by
another tool: reads every record once (sequentially), checks its byte length
against the dtype, and writes ``<shard>.lengths.npy`` beside each shard and a
``manifest.json`` in the output directory (the shards' directory by default).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from array_record.python.array_record_module import ArrayRecordReader

from jaxdata.errors import DatasetError
from jaxdata.sources.fileutil import check_name, file_sha256, sample_sha256
from jaxdata.sources.index_target import dataset_directory, refuse_existing_index, save_index, token_dtype
from jaxdata.sources.manifest import MANIFEST_NAME, Manifest, ShardInfo
from jaxdata.sources.record_files import convert_hint, example_feature_names
from jaxdata.sources.writer import LENGTHS_DTYPE

__all__ = ["build_index", "close_reader_quietly", "dtype_suspicion", "group_by_directory", "record_byte_lengths"]

SAMPLE_RECORDS = 64  # records per shard whose tokens the dtype check looks at

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
    close_reader_quietly(reader)


def _sample_records(path: str, count: int) -> bytes:
  """The bytes of up to SAMPLE_RECORDS records spread over a shard."""
  reader = ArrayRecordReader(path)
  try:
    picks = np.unique(np.linspace(0, count - 1, min(count, SAMPLE_RECORDS)).astype(np.int64)).tolist()
    return b"".join(reader.read(picks))
  finally:
    close_reader_quietly(reader)


def close_reader_quietly(reader: ArrayRecordReader) -> None:
  """Closes a reader; a failure to close a file that already failed must not
  replace the error that says which file and why."""
  try:
    reader.close()
  except RuntimeError:
    pass


def dtype_suspicion(blob: bytes, dtype: np.dtype) -> str | None:
  """What token statistics say about ids read as `dtype` from `blob` (whole records), or None.

  uint32 ids read as uint16: every second uint16 is the high half of an
  id, below 16 for every vocabulary under a million tokens, where the low
  halves spread over 0..65,535. uint16 ids read as uint32: each value
  packs two ids, the second one in the high half, so most values are 2^20 or
  more: ids of a vocabulary of over a million tokens, which no tokenizer has.

  >>> ids = np.arange(100, 100_000, 97, dtype="<u4").tobytes()
  >>> dtype_suspicion(ids, np.dtype("<u2")), dtype_suspicion(ids, np.dtype("<u4"))
  ('looks like uint32 ids read as uint16: 100% of the odd uint16 values are below 16, 0% of the even ones', None)
  """
  if len(blob) < 64:
    return None
  if np.dtype(dtype).itemsize == 2:
    halves = np.frombuffer(blob[: len(blob) // 4 * 4], "<u2").reshape(-1, 2)
    low_small, high_small = (halves[:, 0] < 16).mean(), (halves[:, 1] < 16).mean()
    if high_small > 0.9 and low_small < 0.5:
      return (
        f"looks like uint32 ids read as uint16: {high_small:.0%} of the odd uint16 values are below 16, "
        f"{low_small:.0%} of the even ones"
      )
    return None
  values = np.frombuffer(blob[: len(blob) // 4 * 4], "<u4")
  large = (values >= 1 << 20).mean()
  return f"looks like uint16 ids read as uint32: {large:.0%} of the ids are 2^20 or more" if large > 0.5 else None


def group_by_directory(paths: Sequence[str]) -> dict[str, list[str]]:
  """Shard paths per directory (sorted), for one dataset per directory."""
  groups: dict[str, list[str]] = {}
  for path in sorted(os.path.abspath(p) for p in paths):
    groups.setdefault(os.path.dirname(path), []).append(path)
  return groups


def _checked_paths(shard_paths: Sequence[str], out_dir: str | None) -> tuple[list[str], str]:
  """The shards' absolute paths and the dataset directory that holds them all, or an error naming the
  shard or parameter."""
  if not shard_paths:
    raise ValueError("shard_paths: give at least one shard")
  paths = [os.path.abspath(p) for p in shard_paths]
  for path in paths:
    if not os.path.isfile(path):
      raise DatasetError(f"{path}: shard file does not exist")
  out_dir = dataset_directory(paths, out_dir, "shard_paths")
  for path in paths:
    if os.path.commonpath([out_dir, path]) != out_dir:
      raise ValueError(
        f"{path}: lies outside the output directory {out_dir}; a manifest names only "
        "files inside its own directory (give an `out_dir` that holds the shards)"
      )
  return paths, out_dir


def _shard_info(path: str, lengths: np.ndarray, out_dir: str, arrays: dict[str, np.ndarray]) -> ShardInfo:
  """One shard's record; its lengths go into `arrays` (path -> array) beside the shard."""
  stem = path[: -len(_SHARD_SUFFIX)] if path.endswith(_SHARD_SUFFIX) else path
  lengths_path = stem + ".lengths.npy"
  arrays[lengths_path] = lengths
  return ShardInfo(
    path=os.path.relpath(path, out_dir),
    lengths_path=os.path.relpath(lengths_path, out_dir),
    num_records=int(lengths.size),
    num_tokens=int(lengths.sum(dtype=np.int64)),
    num_bytes=os.path.getsize(path),
    sha256=file_sha256(path),
    sample_sha256=sample_sha256(path),
  )


def build_index(
  shard_paths: Sequence[str],
  dtype: str,
  out_dir: str | None = None,
  name: str | None = None,
  tokenizer: dict[str, Any] | None = None,
  on_shard: Callable[[str], None] | None = None,
  *,
  force: bool = False,
  check_dtype: bool = True,
) -> Manifest:
  """Makes ArrayRecord shards that another tool wrote (one record of raw ids per document) a dataset:
  reads every shard once, writes a lengths index beside each and a manifest. No token is copied.

  Args:
    shard_paths: the `.array_record` files; dtype: "uint16" or "uint32", the ids' type.
    out_dir: the dataset directory (it must hold the shards); default: the shards' one directory
      (shards in several: index each directory on its own, `group_by_directory`).
    name, tokenizer: the dataset's name (default: the directory's) and tokenizer identity.
    on_shard: called with each shard's path once it is indexed.
    force: rebuild an existing index; check_dtype: refuse ids whose statistics say another dtype.

  Raises `DatasetError` naming the shard (missing, unreadable, a record not a whole number of tokens,
  ids of another dtype), `FileExistsError` (a manifest, no `force`), `ValueError` naming the parameter.

  >>> import os, tempfile
  >>> from array_record.python.array_record_module import ArrayRecordWriter
  >>> root = tempfile.mkdtemp()
  >>> writer = ArrayRecordWriter(os.path.join(root, "web-00000.array_record"), "group_size:1")
  >>> for doc in ([5, 6, 7], [8, 9]):
  ...   writer.write(bytes(np.array(doc, "<u2")))
  >>> writer.close()
  >>> build_index([os.path.join(root, "web-00000.array_record")], "uint16", check_dtype=False).num_tokens
  5
  """
  np_dtype = token_dtype(dtype)
  paths, out_dir = _checked_paths(shard_paths, out_dir)
  refuse_existing_index(out_dir, force)
  name = check_name(name or os.path.basename(out_dir), "name")
  # Read and check every shard first: a bad one leaves no lengths file behind.
  checked = [(path, _shard_lengths(path, np_dtype, check_dtype)) for path in paths]
  if force and os.path.exists(os.path.join(out_dir, MANIFEST_NAME)):
    os.remove(os.path.join(out_dir, MANIFEST_NAME))
  shards: list[ShardInfo] = []
  arrays: dict[str, np.ndarray] = {}
  for path, lengths in checked:
    shards.append(_shard_info(path, lengths, out_dir, arrays))
    if on_shard is not None:
      on_shard(path)
  tokenizer = tokenizer or {"kind": "unknown"}
  manifest = Manifest(name, np_dtype.name, tokenizer, tuple(shards), stats={"indexed_by": "jaxdata index"})
  save_index(manifest, out_dir, arrays)
  return manifest


def _shard_lengths(path: str, np_dtype: np.dtype, check_dtype: bool = True) -> np.ndarray:
  """The tokens of every record of a shard; DatasetError for a record that is
  empty or not a whole number of tokens, or tokens that look like another dtype."""
  byte_lengths = record_byte_lengths(path)
  if byte_lengths.size:  # MaxText's and TFDS's records are tf.train.Example messages, not ids
    features = example_feature_names(_sample_records(path, 1))
    if features is not None:
      raise DatasetError(convert_hint(path, "ArrayRecord", features))
  if check_dtype and byte_lengths.size:
    suspicion = dtype_suspicion(_sample_records(path, byte_lengths.size), np_dtype)
    if suspicion:
      raise DatasetError(f"{path}: {suspicion}; check `dtype` (or index with `check_dtype=False`)")
  odd = np.flatnonzero(byte_lengths % np_dtype.itemsize)
  if odd.size:
    raise DatasetError(
      f"{path}: record {odd[0]} has {byte_lengths[odd[0]]} bytes, not a whole number of {np_dtype.name} tokens"
    )
  empty = np.flatnonzero(byte_lengths == 0)
  if empty.size:
    raise DatasetError(
      f"{path}: {empty.size} empty records (the first is record {int(empty[0])}); a dataset holds "
      "documents of at least one token: rewrite the shard without them"
    )
  return (byte_lengths // np_dtype.itemsize).astype(LENGTHS_DTYPE)
