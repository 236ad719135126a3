"""`RaggedTokens`: documents as one flat id array and offsets, as every reader returns a batch of them."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

__all__ = ["RaggedTokens"]


@dataclasses.dataclass(frozen=True)
class RaggedTokens:
  """Documents as one flat id array and offsets: document i is
  ``tokens[offsets[i]:offsets[i + 1]]``.

  >>> r = RaggedTokens(np.arange(5), np.array([0, 2, 5]))
  >>> len(r), r[1].tolist(), r.lengths.tolist()
  (2, [2, 3, 4], [2, 3])
  """

  tokens: np.ndarray
  offsets: np.ndarray
  mask: np.ndarray | None = None  # uint8 0 / 1 per token, aligned with `tokens`: trained or not
  pairs: bool = False  # each document a preference pair: `mask` bit 0 trained, bit 1 the rejected side

  def __len__(self) -> int:
    return self.offsets.size - 1

  def __getitem__(self, i: int) -> np.ndarray:
    return self.tokens[self.offsets[i] : self.offsets[i + 1]]

  @property
  def lengths(self) -> np.ndarray:
    return np.diff(self.offsets)

  def to_list(self) -> list[Any]:
    """One entry per document: its ids, or with masks {"tokens": ids, "mask": 0 / 1 per id}; a
    preference pair is {"chosen": ids, "chosen_mask": 0 / 1 per id, "rejected": ..., "rejected_mask": ...}
    (a KTO example's missing side: no ids)."""
    tokens = np.split(self.tokens, self.offsets[1:-1])
    if self.mask is None:
      return tokens
    masks = np.split(self.mask, self.offsets[1:-1])
    if not self.pairs:
      return [{"tokens": t, "mask": m} for t, m in zip(tokens, masks)]
    out = []
    for ids, marks in zip(tokens, masks):
      chosen = (marks & 2) == 0  # the chosen side comes first
      cut = int(chosen.sum())
      out.append(
        {"chosen": ids[:cut], "chosen_mask": marks[:cut] & 1, "rejected": ids[cut:], "rejected_mask": marks[cut:] & 1}
      )
    return out
