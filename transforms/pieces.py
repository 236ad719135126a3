"""`Pieces`: parts of documents, as parallel arrays (the unit packing plans in).

A piece is ``length`` tokens starting at ``offset`` of a document's
*effective* sequence, ``[BOS] + tokens + [EOS]`` when those are configured,
whose full length is ``doc_length``.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import zlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from jaxdata.config.validate import is_int

__all__ = ["Pieces"]

_FIELDS = ("dataset", "pass_index", "record", "offset", "length", "doc_length")
_STORED = _FIELDS[:-1]


@dataclasses.dataclass(frozen=True)
class Pieces:
  """Parallel int64 arrays, one entry per piece."""

  dataset: np.ndarray
  pass_index: np.ndarray
  record: np.ndarray
  offset: np.ndarray
  length: np.ndarray
  doc_length: np.ndarray

  def __len__(self) -> int:
    return int(self.length.size)

  @classmethod
  def empty(cls) -> Pieces:
    return cls(*(np.zeros(0, np.int64) for _ in _FIELDS))

  @classmethod
  def concatenate(cls, parts: Sequence[Pieces]) -> Pieces:
    parts = [p for p in parts if len(p)]
    if not parts:
      return cls.empty()
    return cls(*(np.concatenate([getattr(p, f) for p in parts]) for f in _FIELDS))

  def take(self, index: np.ndarray) -> Pieces:
    return Pieces(*(getattr(self, f)[index] for f in _FIELDS))

  def to_json(self) -> str:
    """[dataset, pass, record, offset, length] per piece, flattened, as JSON,
    zlib-compressed and base64-encoded: about 7 characters a piece in a
    checkpoint instead of 20. doc_length is left out; `from_json` takes it
    from the lengths index."""
    flat = np.stack([getattr(self, f) for f in _STORED], axis=1).ravel().tolist() if len(self) else []
    return base64.b64encode(zlib.compress(json.dumps(flat, separators=(",", ":")).encode(), 9)).decode()

  @classmethod
  def from_json(cls, encoded: Any, doc_length_of: Any, max_pieces: int) -> Pieces:
    """Inverse of `to_json`; `doc_length_of(dataset, record)` gives doc
    lengths (arrays). More than `max_pieces` pieces is an error, found while
    decompressing: a small crafted string cannot expand to gigabytes."""
    width = len(_STORED)
    limit = max_pieces * width * 21 + 2  # 20 digits and a comma per int, brackets
    try:
      inflater = zlib.decompressobj()
      text = inflater.decompress(base64.b64decode(encoded, validate=True), limit)
      if inflater.unconsumed_tail or not inflater.eof:
        raise ValueError(f"more than {max_pieces} pieces, or truncated")
      flat = json.loads(text)
    except (TypeError, ValueError, zlib.error, RecursionError) as e:  # binascii.Error, JSONDecodeError: ValueErrors
      raise ValueError(f"packer state: carry is not a valid encoded piece list ({str(e)[:200]})") from e
    if not isinstance(flat, list) or len(flat) % width or any(not is_int(v) or v < 0 for v in flat):
      raise ValueError(
        f"packer state: carry must be a flat list of ints >= 0, {width} per piece ({', '.join(_STORED)})"
      )
    if not flat:
      return cls.empty()
    table = np.asarray(flat, dtype=np.int64).reshape(-1, width)
    dataset, pass_index, record, offset, length = (table[:, i] for i in range(width))
    return cls(dataset, pass_index, record, offset, length, doc_length_of(dataset, record))
