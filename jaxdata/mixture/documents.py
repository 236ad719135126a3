"""`DocRef` and `DocBatch`: documents of the stream, one at a time or as columns.

>>> batch = DocBatch(("a", "b"), *(np.array(v) for v in ([0, 1], [0, 0], [7, 2], [30, 12])))
>>> batch.refs()[1]
DocRef(dataset='b', pass_index=0, record=2, length=12)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

__all__ = ["DocBatch", "DocRef"]


@dataclasses.dataclass(frozen=True)
class DocRef:
  """One document of the stream: which dataset, pass, record, and its length."""

  dataset: str
  pass_index: int
  record: int
  length: int


@dataclasses.dataclass(frozen=True)
class DocBatch:
  """Consecutive documents of the stream as arrays (`dataset` indexes `names`)."""

  names: tuple[str, ...]
  dataset: np.ndarray
  pass_index: np.ndarray
  record: np.ndarray
  length: np.ndarray

  def __len__(self) -> int:
    return int(self.dataset.size)

  def refs(self) -> list[DocRef]:
    columns = (self.dataset, self.pass_index, self.record, self.length)
    return [DocRef(self.names[d], p, r, n) for d, p, r, n in zip(*(c.tolist() for c in columns))]

  @classmethod
  def concatenate(cls, names: tuple[str, ...], batches: Sequence[DocBatch]) -> DocBatch:
    if not batches:
      empty = np.zeros(0, np.int64)
      return cls(names, empty.astype(np.int32), empty, empty, empty)
    fields = ("dataset", "pass_index", "record", "length")
    return cls(names, *(np.concatenate([getattr(b, f) for b in batches]) for f in fields))
