"""`build_flat_index`: jaxdata metadata for Megatron and flat token files, tokens left in place.

Per token file it writes three small arrays and, last, one manifest::

    OUT/manifest.json            format megatron|flat, dtype, data_root, per file: size, sha256, counts
    OUT/<stem>.lengths.npy       uint32 tokens of every document
    OUT/<stem>.starts.npy        int64 first token of every document
    OUT/<stem>.blocks.npy        uint64 checksum of every 8 KiB block (block_sums: reads from a store are checked)

OUT defaults to the token files' directory (`data_root` stays empty and
the directory moves as a whole). Another OUT, for a corpus that must stay
read-only, records the files' directory as `data_root`, or the URL given
(files to be read from a bucket). The token files are read once: for
their sha256, and for the EOS scan of a flat file.

>>> import tempfile
>>> root = tempfile.mkdtemp()
>>> np.array([5, 6, 0, 7, 0], np.uint16).tofile(os.path.join(root, "part0.bin"))
>>> m = build_flat_index("flat", [os.path.join(root, "part0.bin")], dtype="uint16",
...                      boundaries=DocumentBoundaries.eos(0))
>>> m.format, m.num_records, m.num_tokens, m.data_root
('flat', 2, 5, '')
"""

from __future__ import annotations

import hashlib
import os
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from array_record.python.array_record_module import ArrayRecordReader

from jaxdata.errors import DatasetError
from jaxdata.sources.block_sums import BLOCK_BYTES, blocks_digest, file_block_sums
from jaxdata.sources.boundaries import DocumentBoundaries
from jaxdata.sources.fileutil import check_name, file_sha256, index_sha256, sample_sha256
from jaxdata.sources.flat_format import (
  bos_lengths,
  dolma_metadata_lengths,
  dolma_metadata_path,
  eos_lengths,
  first_negative_id,
  offsets_lengths,
  read_megatron_index,
  token_layout,
)
from jaxdata.sources.index import close_reader_quietly, dtype_suspicion
from jaxdata.sources.index_target import dataset_directory, refuse_existing_index, save_index, token_dtype
from jaxdata.sources.manifest import Manifest, ShardInfo
from jaxdata.sources.record_files import convert_hint, example_feature_names, record_file_kind
from jaxdata.sources.stores import is_remote
from jaxdata.sources.writer import LENGTHS_DTYPE

__all__ = ["build_flat_index"]

FLAT_FORMATS = ("megatron", "flat")
OFFSETS_SUFFIX = ".offsets.npy"  # beside a flat token file: its document starts
WHOLE_FILES = DocumentBoundaries()  # no boundaries given: each file one document


def _token_path(fmt: str, given: str) -> str:
  """The token file an input names (a Megatron prefix, .bin or .idx: the .bin)."""
  if fmt == "megatron":
    stem = given[:-4] if given.endswith((".bin", ".idx")) else given
    return os.path.abspath(stem + ".bin")
  return os.path.abspath(given)


def _refuse_record_file(path: str) -> None:
  """A DatasetError saying to convert, for an ArrayRecord or TFRecord file given as raw token ids."""
  if not os.path.isfile(path):
    return  # token_layout names the missing file
  with open(path, "rb") as f:
    head = f.read(64)
    kind = record_file_kind(head)
    if kind is None:
      return
    features = None
    if kind == "TFRecord":
      (length,) = struct.unpack("<Q", head[:8])
      f.seek(12)
      features = example_feature_names(f.read(min(length, 1 << 20)))
  if kind == "ArrayRecord":
    reader = ArrayRecordReader(path)
    try:
      features = example_feature_names(reader.read([0])[0]) if reader.num_records() else None
    finally:
      close_reader_quietly(reader)
  raise DatasetError(convert_hint(path, kind, features))


def _document_lengths(
  fmt: str, path: str, dtype: str | None, boundaries: DocumentBoundaries, check_dtype: bool
) -> tuple[str, int, np.ndarray, int]:
  """(dtype, byte offset of the first token, lengths of the non-empty documents, empty documents
  left out) of one token file."""
  if fmt == "megatron":
    index = read_megatron_index(path[:-4] + ".idx", path)
    if dtype is not None and dtype != index.dtype:
      raise DatasetError(f"{path[:-4]}.idx: holds {index.dtype} tokens, dtype says {dtype}")
    negative = first_negative_id(path) if index.signed else None
    if negative is not None:
      raise DatasetError(
        f"{path}: token {negative[0]} is {negative[1]}, a negative id ({path[:-4]}.idx says int32); token ids are >= 0"
      )
    if check_dtype:  # the .idx's dtype code is only what its writer said
      _check_ids_look_like(path, np.dtype(index.dtype), f"{path[:-4]}.idx says {index.dtype}")
    return index.dtype, 0, index.lengths, index.empty
  _refuse_record_file(path)
  layout = token_layout(path, np.dtype(dtype) if dtype is not None else None)
  negative = first_negative_id(path, layout.offset) if layout.signed else None
  if negative is not None:
    raise DatasetError(
      f"{path}: id {negative[0]} is {negative[1]}, a negative id (the .npy holds int32); token ids are >= 0"
    )
  if check_dtype and layout.offset == 0:  # no NumPy header: the dtype is only what `dtype` says
    _check_ids_look_like(path, layout.dtype, f"dtype says {layout.dtype.name}")
  boundaries.check_id_fits(layout.dtype)
  rule, token_id = boundaries.rule, int(boundaries.token_id or 0)
  if rule == "offsets":
    lengths = offsets_lengths(path, layout, path + OFFSETS_SUFFIX)
  elif rule == "dolma_metadata":
    lengths = dolma_metadata_lengths(path, layout, dolma_metadata_path(path))
  elif rule == "eos":
    lengths = eos_lengths(path, layout, token_id)
  elif rule == "bos":
    lengths = bos_lengths(path, layout, token_id)
  else:
    lengths = np.array([layout.count], np.int64)  # no boundaries: the file is one document
  return layout.dtype.name, layout.offset, lengths, 0


def _check_ids_look_like(path: str, dtype: np.dtype, claim: str) -> None:
  """A `DatasetError` where the file's first MiB of ids looks like another dtype (`dtype_suspicion`)."""
  with open(path, "rb") as f:
    suspicion = dtype_suspicion(f.read(1 << 20), dtype)
  if suspicion:
    raise DatasetError(
      f"{path}: {suspicion} ({claim}); check `dtype`, or index with `check_dtype=False` if the ids really are so"
    )


def _metadata_stems(paths: list[str]) -> list[str]:
  """Each token file's stem for its metadata files: its name less .bin / .npy; where two files share a name
  (OLMo's layout: part-0.npy in several directories), its path below their common directory, "/" as "__".

  >>> _metadata_stems(["/d/a/part-0.npy", "/d/b/part-0.npy", "/d/b/part-1.npy"])
  ['a__part-0', 'b__part-0', 'b__part-1']
  """
  cut = [p[:-4] if p.endswith((".bin", ".npy")) else p for p in paths]
  stems = [os.path.basename(c) for c in cut]
  if len(set(stems)) < len(stems):
    root = os.path.commonpath([os.path.dirname(p) for p in paths])
    stems = [os.path.relpath(c, root).replace(os.sep, "__") for c in cut]
  if len(set(stems)) < len(stems):
    raise ValueError("inputs: a token file is given twice")
  return stems


@dataclass(frozen=True)
class _FlatTarget:
  """Where an index goes: the token files, their metadata stems, the metadata directory, the directory
  shard paths are relative to, and the `data_root` the manifest records."""

  paths: list[str]
  stems: list[str]
  out_dir: str
  root_dir: str
  data_root: str


def _flat_target(fmt: str, inputs: Sequence[str], out_dir: str | None, data_root: str | None) -> _FlatTarget:
  """The files an index covers and where its metadata goes, or a `ValueError` naming the parameter."""
  if not inputs:
    raise ValueError("inputs: give at least one token file")
  paths = [_token_path(fmt, p) for p in inputs]
  stems = _metadata_stems(paths)
  out_dir = dataset_directory(paths, out_dir, "inputs")
  files_dir = os.path.commonpath(sorted({os.path.dirname(p) for p in paths}))
  inside = all(os.path.commonpath([out_dir, p]) == out_dir for p in paths)
  root_dir = out_dir if inside and data_root is None else files_dir
  if data_root is None:
    data_root = "" if inside else root_dir
  elif not (os.path.isabs(data_root) or is_remote(data_root)):
    raise ValueError(f"data_root: {data_root!r} must be an absolute path or a gs:// or s3:// URL")
  return _FlatTarget(paths, stems, out_dir, root_dir, data_root)


def _check_arguments(fmt: str, dtype: str | None, boundaries: DocumentBoundaries) -> None:
  """A `ValueError` naming `format`, `dtype` or `boundaries` where they cannot go together."""
  if fmt not in FLAT_FORMATS:
    raise ValueError(f"format: {fmt!r} is not one of {FLAT_FORMATS}")
  if dtype is not None:
    token_dtype(dtype)
  if not isinstance(boundaries, DocumentBoundaries):
    raise ValueError(f"boundaries: expected a DocumentBoundaries, got {boundaries!r}")
  if fmt == "megatron" and boundaries != WHOLE_FILES:
    raise ValueError(f"boundaries: a Megatron .idx gives its own document boundaries, not {boundaries.rule!r}")


def _one_dtype(paths: list[str], found: list[tuple[str, int, np.ndarray, int]]) -> str:
  """The files' one token dtype, after checking every document fits a uint32 length."""
  dtypes = {d for d, _, _, _ in found}
  if len(dtypes) > 1:
    raise DatasetError(f"{paths[0]}: token files of different dtypes {sorted(dtypes)}; index them separately")
  for path, (_, _, lengths, _) in zip(paths, found):
    if int(lengths.max()) >= 1 << 32:
      raise DatasetError(
        f"{path}: a document of {int(lengths.max())} tokens (2^32 or more); give document "
        "`boundaries` (DocumentBoundaries: eos, bos, offsets or dolma_metadata)"
      )
  return dtypes.pop()


def _index_file(
  path: str, stem: str, found: tuple[str, int, np.ndarray, int], target: _FlatTarget, arrays: dict[str, np.ndarray]
) -> ShardInfo:
  """One token file's shard record; its lengths, starts and block sums go into `arrays` (path -> array)."""
  _, data_offset, lengths, _ = found
  lengths_name, starts_name, blocks_name = f"{stem}.lengths.npy", f"{stem}.starts.npy", f"{stem}.blocks.npy"
  stored_lengths, starts = lengths.astype(LENGTHS_DTYPE), (np.cumsum(lengths) - lengths).astype(np.int64)
  arrays[os.path.join(target.out_dir, lengths_name)] = stored_lengths
  arrays[os.path.join(target.out_dir, starts_name)] = starts
  digest = hashlib.sha256()  # fed by the same read as the block sums
  blocks = file_block_sums(path, digest)  # store reads are checked against them
  arrays[os.path.join(target.out_dir, blocks_name)] = blocks
  return ShardInfo(
    path=os.path.relpath(path, target.root_dir),
    lengths_path=lengths_name,
    starts_path=starts_name,
    num_records=int(lengths.size),
    num_tokens=int(lengths.sum()),
    num_bytes=os.path.getsize(path),
    sha256=digest.hexdigest(),
    sample_sha256=sample_sha256(path),
    data_offset=data_offset,
    index_sha256=index_sha256(stored_lengths, starts),
    blocks_path=blocks_name,
    block_bytes=BLOCK_BYTES,
    blocks_sha256=blocks_digest(blocks),
  )


def _index_stats(fmt: str, paths: list[str], found: list[tuple[str, int, np.ndarray, int]]) -> dict[str, Any]:
  """The manifest's `stats`: how it was indexed, the empty documents left out and, for Megatron, what each
  .idx said when indexed (from-megatron rebuilds an index whose .idx changed)."""
  return {
    "indexed_by": f"jaxdata index --format {fmt}",
    "skipped_empty": sum(f[3] for f in found),
    **({"idx_sha256": [file_sha256(p[:-4] + ".idx") for p in paths]} if fmt == "megatron" else {}),
  }


def build_flat_index(
  fmt: str,
  inputs: Sequence[str],
  *,
  boundaries: DocumentBoundaries = WHOLE_FILES,
  dtype: str | None = None,
  out_dir: str | None = None,
  name: str | None = None,
  tokenizer: dict[str, Any] | None = None,
  data_root: str | None = None,
  on_file: Callable[[str], None] | None = None,
  force: bool = False,
  check_dtype: bool = True,
) -> Manifest:
  """Makes Megatron `.bin` / `.idx` pairs (`fmt` "megatron") or flat token files ("flat") a dataset, read
  in place: reads every file once (sha256, block checksums) and writes lengths, starts and block sums
  beside a manifest. No token is copied. The module's docstring has an example.

  Args:
    inputs: Megatron prefixes (or their `.bin` / `.idx`), or flat files (raw ids, or `.npy`).
    boundaries: flat files: where documents begin (`DocumentBoundaries`: eos, bos, offsets,
      dolma_metadata); default: each file is one document. A `.idx` says its own.
    dtype: "uint16" or "uint32"; required for raw flat files.
    out_dir, name, tokenizer: the metadata directory (default: the files'), name, tokenizer identity.
    data_root: where readers find the files when not beside the metadata (a directory or a URL).
    on_file: called with each file's path once it is indexed.
    force: rebuild an existing index; check_dtype: refuse ids whose statistics say another dtype.

  Raises `DatasetError` naming the file, `FileExistsError` (a manifest, no `force`), `ValueError` naming
  the parameter. Nothing is left behind on an error.
  """
  _check_arguments(fmt, dtype, boundaries)
  target = _flat_target(fmt, inputs, out_dir, data_root)
  refuse_existing_index(target.out_dir, force)
  name = check_name(name or os.path.basename(target.out_dir), "name")
  # Every file is checked before anything is written.
  found = [_document_lengths(fmt, p, dtype, boundaries, check_dtype) for p in target.paths]
  token_dtype_name = _one_dtype(target.paths, found)
  os.makedirs(target.out_dir, exist_ok=True)
  shards: list[ShardInfo] = []
  arrays: dict[str, np.ndarray] = {}
  for path, stem, one in zip(target.paths, target.stems, found):
    shards.append(_index_file(path, stem, one, target, arrays))
    if on_file is not None:
      on_file(path)
  manifest = Manifest(
    name=name,
    dtype=token_dtype_name,
    tokenizer=tokenizer or {"kind": "unknown"},
    shards=tuple(shards),
    stats=_index_stats(fmt, target.paths, found),
    format=fmt,
    data_root=target.data_root,
  )
  save_index(manifest, target.out_dir, arrays)
  return manifest
