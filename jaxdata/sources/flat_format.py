"""Document boundaries of token files that other tools wrote, found without copying tokens.

Two layouts, both a flat run of little-endian token ids with documents one
after another::

    megatron   PREFIX.bin  tokens of every sequence, back to back
               PREFIX.idx  b"MMIDIDX\\0\\0" | version u64 = 1 | dtype code u8 | sequences u64 | doc_idx entries u64
                           | sizes int32[sequences] | pointers int64[sequences] (byte offsets into .bin)
                           | doc_idx int64[documents + 1] (first sequence of each document, then the end)
    flat       FILE        raw uint16 / uint32 ids (OLMo / Dolma style), or a 1-D .npy array of them;
                           a document ends with (and includes) each `eos_id`, or FILE.offsets.npy
                           lists the document starts

A document is the tokens of one Megatron document (its sequences, which
must lie back to back) or one EOS-terminated run of a flat file; tokens
after the last EOS form a final document. Every function returns the
document lengths, checked to tile the token file exactly; problems are a
`DatasetError` naming the file.

>>> import tempfile, os
>>> path = os.path.join(tempfile.mkdtemp(), "t.bin")
>>> np.array([5, 6, 0, 7, 0, 8], np.uint16).tofile(path)
>>> eos_lengths(path, token_layout(path, np.dtype(np.uint16)), eos_id=0).tolist()
[3, 2, 1]
"""

from __future__ import annotations

import csv
import dataclasses
import gzip
import os

import numpy as np

from jaxdata.errors import DatasetError

__all__ = [
  "MegatronIndex",
  "TokenLayout",
  "bos_lengths",
  "dolma_metadata_lengths",
  "dolma_metadata_path",
  "eos_lengths",
  "first_negative_id",
  "offsets_lengths",
  "read_megatron_index",
  "token_layout",
]

MEGATRON_MAGIC = b"MMIDIDX\x00\x00"
# The dtype codes of Megatron-LM's index, with DeepSpeed's code 9 (uint32). jaxdata reads the ones
# that hold token ids; int32 ids are read as uint32 (the same bytes for every id below 2^31: a
# negative id is refused at indexing, shown as written).
MEGATRON_DTYPES = {8: "uint16", 4: "uint32", 9: "uint32"}
_MEGATRON_CODE_NAMES = {
  1: "uint8",
  2: "int8",
  3: "int16",
  4: "int32",
  5: "int64",
  6: "float64 in Megatron-LM, float32 in GPT-NeoX",
  7: "float32 in Megatron-LM, float64 in GPT-NeoX",
  8: "uint16",
  9: "uint32, DeepSpeed's code",
}
SIGNED_CODE = 4  # int32: ids are checked for negatives when indexed
_HEADER = len(MEGATRON_MAGIC) + 8 + 1 + 8 + 8
_SCAN_TOKENS = 1 << 24  # an EOS scan reads this many tokens at a time (bounded memory)


@dataclasses.dataclass(frozen=True)
class MegatronIndex:
  """The parts of a `.idx` file jaxdata uses."""

  dtype: str  # "uint16" or "uint32"
  lengths: np.ndarray  # tokens per non-empty document (int64)
  empty: int = 0  # documents of no tokens (Megatron writes one for an empty text), left out of `lengths`
  signed: bool = False  # the .idx says int32: a negative id is possible and refused
  empty_positions: np.ndarray | None = None  # the empty documents' numbers in the .idx (Megatron's numbering)

  def records_before(self, documents: np.ndarray | int) -> np.ndarray | int:
    """How many non-empty documents (jaxdata records) come before each Megatron document number."""
    empty = self.empty_positions if self.empty_positions is not None else np.zeros(0, np.int64)
    return documents - np.searchsorted(empty, documents, side="left")


def _megatron_header(idx_path: str) -> tuple[int, int, int]:
  """(dtype code, sequences, document index entries) of a `.idx`, checked against its size."""
  size = os.path.getsize(idx_path)
  with open(idx_path, "rb") as f:
    header = f.read(_HEADER)
  if len(header) < _HEADER or not header.startswith(MEGATRON_MAGIC):
    raise DatasetError(f"{idx_path}: not a Megatron index (no MMIDIDX header)")
  at = len(MEGATRON_MAGIC)
  version = int.from_bytes(header[at : at + 8], "little")
  code = header[at + 8]
  sequences = int.from_bytes(header[at + 9 : at + 17], "little")
  doc_entries = int.from_bytes(header[at + 17 : at + 25], "little")
  if version != 1:
    raise DatasetError(f"{idx_path}: index version {version}; jaxdata reads version 1")
  if code not in MEGATRON_DTYPES:
    name = _MEGATRON_CODE_NAMES.get(code, "unknown")
    raise DatasetError(
      f"{idx_path}: dtype code {code} ({name}) is not a token type jaxdata reads "
      "(codes 8 = uint16, 4 = int32, 9 = uint32)"
    )
  needed = _HEADER + 4 * sequences + 8 * sequences + 8 * doc_entries
  if size < needed or doc_entries < 1:
    raise DatasetError(
      f"{idx_path}: {size} bytes, but its header promises {sequences} sequences and "
      f"{doc_entries} document index entries ({needed} bytes); truncated?"
    )
  if size > needed:
    raise DatasetError(
      f"{idx_path}: {size - needed} bytes after the {sequences} sequences and {doc_entries} "
      f"document index entries its header promises ({needed} bytes); jaxdata reads text-only "
      "indexes (no multimodal sequence modes): another file appended, or a wrong header?"
    )
  return code, sequences, doc_entries


def _check_sequences(idx_path: str, bin_path: str, sizes: np.ndarray, pointers: np.ndarray, dtype: str) -> None:
  """A `DatasetError` unless the sequences lie back to back from byte 0 and fill `bin_path` exactly."""
  itemsize = np.dtype(dtype).itemsize
  if (sizes < 0).any():
    raise DatasetError(f"{idx_path}: a negative sequence size (sequence {int(np.flatnonzero(sizes < 0)[0])})")
  ends = np.cumsum(sizes) * itemsize
  expected = ends - sizes * itemsize
  off = np.flatnonzero(pointers != expected)
  if off.size:
    i = int(off[0])
    raise DatasetError(
      f"{idx_path}: sequence {i} starts at byte {int(pointers[i])} of {bin_path}, not "
      f"{int(expected[i])} right after the one before; jaxdata reads sequences stored back to back"
    )
  total, bin_size = (int(ends[-1]) if sizes.size else 0), os.path.getsize(bin_path)
  if total != bin_size:
    raise DatasetError(
      f"{idx_path}: its sequence sizes add up to {total} bytes of {dtype}, but {bin_path} "
      f"has {bin_size} bytes (truncated .bin, or .idx of another file?)"
    )


def _check_document_index(idx_path: str, doc_idx: np.ndarray, sequences: int) -> None:
  """A `DatasetError` unless the document index runs from 0 to `sequences` and never falls."""
  if doc_idx[0] != 0 or doc_idx[-1] != sequences:
    raise DatasetError(
      f"{idx_path}: the document index must run from 0 to {sequences} (the sequence count); "
      f"got {doc_idx[:3].tolist()}...{doc_idx[-2:].tolist()}"
    )
  falling = np.flatnonzero(np.diff(doc_idx) < 0)
  if falling.size:
    i = int(falling[0]) + 1
    raise DatasetError(
      f"{idx_path}: document index entry {i} ({int(doc_idx[i])}) is below entry {i - 1} "
      f"({int(doc_idx[i - 1])}); it must not fall (an equal entry is an empty document)"
    )


def read_megatron_index(idx_path: str, bin_path: str) -> MegatronIndex:
  """Parses `idx_path` and checks it against `bin_path`'s size: sequences
  back to back from byte 0, documents a partition of the sequences."""
  if not os.path.isfile(idx_path):
    raise DatasetError(f"{idx_path}: Megatron index file is missing")
  if not os.path.isfile(bin_path):
    raise DatasetError(f"{bin_path}: Megatron token file is missing (the .idx names no other)")
  code, sequences, doc_entries = _megatron_header(idx_path)
  dtype = MEGATRON_DTYPES[code]
  mapped = np.memmap(idx_path, np.uint8, "r")
  sizes = np.frombuffer(mapped, "<i4", sequences, _HEADER).astype(np.int64)
  pointers = np.frombuffer(mapped, "<i8", sequences, _HEADER + 4 * sequences)
  doc_idx = np.frombuffer(mapped, "<i8", doc_entries, _HEADER + 12 * sequences)
  _check_sequences(idx_path, bin_path, sizes, pointers, dtype)
  _check_document_index(idx_path, doc_idx, sequences)
  starts = np.concatenate([[0], np.cumsum(sizes)])
  lengths = np.diff(starts[doc_idx])
  # An empty text becomes a document of no sequence (a repeated entry) or of empty sequences:
  # Megatron reads it as a document of no tokens; here it is left out of the records and counted.
  kept = lengths[lengths > 0]
  if kept.size == 0:
    raise DatasetError(f"{idx_path}: its {lengths.size} documents hold no token")
  empty_positions = np.flatnonzero(lengths == 0)
  return MegatronIndex(dtype, kept, int(empty_positions.size), code == SIGNED_CODE, empty_positions)


def first_negative_id(bin_path: str, offset: int = 0) -> tuple[int, int] | None:
  """(position, id) of the first negative id of an int32 token file (ids from byte `offset`), read in
  bounded chunks; None if none."""
  size = os.path.getsize(bin_path) - offset
  ids = np.memmap(bin_path, "<i4", "r", offset=offset, shape=(size // 4,)) if size >= 4 else np.zeros(0, "<i4")
  for start in range(0, ids.size, _SCAN_TOKENS):
    below = np.flatnonzero(ids[start : start + _SCAN_TOKENS] < 0)
    if below.size:
      return start + int(below[0]), int(ids[start + int(below[0])])
  return None


@dataclasses.dataclass(frozen=True)
class TokenLayout:
  """Where a flat file's ids lie: `count` ids of `dtype` from byte `offset`."""

  dtype: np.dtype
  offset: int
  count: int
  signed: bool = False  # a .npy of int32 ids, read as uint32: a negative id is refused when indexed


def has_npy_header(path: str) -> bool:
  """Whether a file starts with NumPy's magic (Dolma names its raw, headerless memmaps `.npy` too)."""
  with open(path, "rb") as f:
    return f.read(len(np.lib.format.MAGIC_PREFIX)) == np.lib.format.MAGIC_PREFIX


def token_layout(path: str, dtype: np.dtype | None) -> TokenLayout:
  """A raw file (`dtype` required) or a .npy file (its header says; `dtype`, if given, must agree).
  A `.npy` name without NumPy's header is a raw file: Dolma's memmaps are named so."""
  if not os.path.isfile(path):
    raise DatasetError(f"{path}: token file is missing")
  size = os.path.getsize(path)
  offset = 0
  numpy_header = path.endswith(".npy") and has_npy_header(path)
  if path.endswith(".npy") and not numpy_header and dtype is None:
    raise DatasetError(
      f"{path}: named .npy but has no NumPy header (a raw memmap, as Dolma writes them); give `dtype` "
      "(uint16 or uint32)"
    )
  if numpy_header:
    with open(path, "rb") as f:
      try:
        version = np.lib.format.read_magic(f)
        header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, fortran, found = header(f)
      except ValueError as e:
        raise DatasetError(f"{path}: not a readable .npy file ({str(e)[:200]})") from e
      offset = f.tell()
    name = {"<u2": "uint16", "<u4": "uint32", "<i4": "uint32", "|u1": None}.get(found.str)
    if len(shape) != 1 or fortran or name is None:
      raise DatasetError(
        f"{path}: a token .npy must be a 1-D little-endian uint16, uint32 or int32 array, got "
        f"shape {shape} dtype {found}"
      )
    if shape[0] * found.itemsize != size - offset:
      raise DatasetError(
        f"{path}: its .npy header says {shape[0]} ids ({shape[0] * found.itemsize} bytes), the file "
        f"holds {size - offset} bytes after the header (truncated, or the header of another array?)"
      )
    if dtype is not None and np.dtype(dtype).name != name:
      raise DatasetError(f"{path}: holds {found} ids, `dtype` says {np.dtype(dtype).name}")
    dtype = np.dtype(name)
  elif dtype is None:
    raise ValueError("dtype: a flat token file does not say its dtype; give uint16 or uint32")
  dtype = np.dtype(dtype)
  if (size - offset) % dtype.itemsize:
    raise DatasetError(f"{path}: {size - offset} bytes is not a whole number of {dtype.name} tokens (wrong `dtype`?)")
  if size == offset:
    raise DatasetError(f"{path}: empty token file")
  return TokenLayout(dtype, offset, (size - offset) // dtype.itemsize, numpy_header and found.str == "<i4")


def dolma_metadata_path(path: str) -> str:
  """Where Dolma's tokenizer writes a memmap's document metadata: `part-0-00000.npy` -> `part-0-00000.csv.gz`."""
  stem = path[: -len(".npy")] if path.endswith(".npy") else path
  return stem + ".csv.gz"


def dolma_metadata_lengths(path: str, layout: TokenLayout, metadata_path: str) -> np.ndarray:
  """Document lengths from Dolma's metadata: one CSV row per document, `start,end,id,src,loc`, the
  token range [start, end) of the memmap. The rows must tile the file in order."""
  try:
    with gzip.open(metadata_path, "rt", encoding="utf-8", newline="") as f:
      ranges = [(row[0], row[1]) for row in csv.reader(f) if row]
  except (OSError, EOFError, UnicodeDecodeError, csv.Error) as e:
    raise DatasetError(f"{metadata_path}: not a readable gzipped CSV of document ranges ({str(e)[:200]})") from e
  try:
    bounds = np.array(ranges, dtype=np.int64).reshape(-1, 2)
  except ValueError as e:
    first_bad = next((i for i, r in enumerate(ranges) if not (r[0].isdigit() and r[1].isdigit())), 0)
    raise DatasetError(
      f"{metadata_path}: row {first_bad + 1}: start and end must be token offsets, got {list(ranges[first_bad])}"
    ) from e
  if not bounds.size:
    raise DatasetError(f"{metadata_path}: no document rows")
  starts, ends = bounds[:, 0], bounds[:, 1]
  expected = np.concatenate([[0], ends[:-1]])
  off = np.flatnonzero((starts != expected) | (ends <= starts))
  if off.size:
    i = int(off[0])
    raise DatasetError(
      f"{metadata_path}: row {i + 1} covers tokens [{int(starts[i])}, {int(ends[i])}), but documents must "
      f"follow each other from token 0 (this one should start at {int(expected[i])} and end after it)"
    )
  if ends[-1] != layout.count:
    raise DatasetError(
      f"{metadata_path}: its documents end at token {int(ends[-1])}, but {path} holds {layout.count} tokens"
    )
  return ends - starts


def bos_lengths(path: str, layout: TokenLayout, bos_id: int) -> np.ndarray:
  """Document lengths of a flat token file in which every document begins with `bos_id` (the BOS
  stays with its document; ids before the first BOS are a document too)."""
  count = layout.count
  ids = np.memmap(path, layout.dtype.newbyteorder("<"), "r", offset=layout.offset, shape=(count,))
  found = [
    np.flatnonzero(ids[begin : begin + _SCAN_TOKENS] == bos_id) + begin for begin in range(0, count, _SCAN_TOKENS)
  ]
  starts: np.ndarray = np.concatenate(found + [np.zeros(0, np.int64)]).astype(np.int64)
  if not starts.size and count > 1:
    raise DatasetError(
      f"{path}: bos_id {bos_id} never occurs in its {count} ids: the whole file would be one document; "
      "check the id, or give the boundaries another way (eos_id, offsets)"
    )
  if not starts.size or starts[0] != 0:
    starts = np.concatenate([[0], starts])
  lengths = np.diff(np.append(starts, count))
  _check_nonempty(lengths, path)
  return lengths


def eos_lengths(path: str, layout: TokenLayout, eos_id: int) -> np.ndarray:
  """Document lengths of a flat token file split after every `eos_id`."""
  count = layout.count
  ids = np.memmap(path, layout.dtype.newbyteorder("<"), "r", offset=layout.offset, shape=(count,))
  found = [
    np.flatnonzero(ids[begin : begin + _SCAN_TOKENS] == eos_id) + begin + 1 for begin in range(0, count, _SCAN_TOKENS)
  ]
  ends: np.ndarray = np.concatenate(found + [np.zeros(0, np.int64)]).astype(np.int64)
  if not ends.size and count > 1:
    raise DatasetError(
      f"{path}: eos_id {eos_id} never occurs in its {count} ids: the whole file would be one document; "
      "check the id, or give the boundaries another way (bos_id, offsets)"
    )
  if not ends.size or ends[-1] != count:
    ends = np.append(ends, count)  # tokens after the last EOS: one more document
  lengths = np.diff(np.concatenate([[0], ends]))
  _check_nonempty(lengths, path)
  return lengths


def offsets_lengths(path: str, layout: TokenLayout, offsets_path: str) -> np.ndarray:
  """Document lengths of a flat token file from its document start offsets
  (an .npy of integers: 0, then each later document's first token)."""
  count = layout.count
  try:
    offsets = np.load(offsets_path, allow_pickle=False)
  except (OSError, ValueError, EOFError) as e:
    raise DatasetError(f"{offsets_path}: not a readable .npy array of document offsets ({str(e)[:200]})") from e
  if offsets.ndim != 1 or offsets.dtype.kind not in "iu" or not offsets.size or offsets[0] != 0:
    raise DatasetError(f"{offsets_path}: document offsets must be a 1-D integer array starting at 0")
  bounds = np.append(offsets.astype(np.int64), count)
  if (np.diff(bounds) <= 0).any():
    bad = int(np.flatnonzero(np.diff(bounds) <= 0)[0])
    raise DatasetError(
      f"{offsets_path}: offsets must rise strictly and stay below the {count} tokens of "
      f"{path}; entry {bad} is {int(bounds[bad])}, then {int(bounds[bad + 1])}"
    )
  return np.diff(bounds)


def _check_nonempty(lengths: np.ndarray, path: str) -> None:
  if not lengths.size:
    raise DatasetError(f"{path}: holds no documents")
  empty = np.flatnonzero(lengths == 0)
  if empty.size:
    raise DatasetError(f"{path}: document {int(empty[0])} has no tokens; every document needs at least one")
