"""`Pieces`: parts of documents, as parallel arrays (the unit packing plans in).

A piece is ``length`` tokens starting at ``offset`` of a document's
*effective* sequence, ``[BOS] + tokens + [EOS]`` when those are configured,
whose full length is ``doc_length``.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import numpy as np

__all__ = ["Pieces"]

_FIELDS = ("dataset", "pass_index", "record", "offset", "length", "doc_length")


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
  def empty(cls) -> "Pieces":
    return cls(*(np.zeros(0, np.int64) for _ in _FIELDS))

  @classmethod
  def concatenate(cls, parts: Sequence["Pieces"]) -> "Pieces":
    parts = [p for p in parts if len(p)]
    if not parts:
      return cls.empty()
    return cls(*(np.concatenate([getattr(p, f) for p in parts]) for f in _FIELDS))

  def take(self, index: np.ndarray) -> "Pieces":
    return Pieces(*(getattr(self, f)[index] for f in _FIELDS))

  def to_json(self) -> list[list[int]]:
    """One [dataset, pass, record, offset, length, doc_length] list per piece."""
    return np.stack([getattr(self, f) for f in _FIELDS], axis=1).tolist() if len(self) else []

  @classmethod
  def from_json(cls, rows: Any) -> "Pieces":
    if not isinstance(rows, list) or any(
        not isinstance(r, list) or len(r) != len(_FIELDS)
        or any(isinstance(v, bool) or not isinstance(v, int) or v < 0 for v in r)
        for r in rows
    ):
      raise ValueError(f"packer state: carry must be lists of {len(_FIELDS)} ints >= 0 ({', '.join(_FIELDS)})")
    if not rows:
      return cls.empty()
    table = np.asarray(rows, dtype=np.int64)
    return cls(*(table[:, i] for i in range(len(_FIELDS))))
