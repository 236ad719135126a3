"""Rows with three budgets: at most `tokens` tokens, `patches` image patches and `images` images a row.

An image-text example is never split (as a pair is not): it goes whole into one row where all three of its
amounts fit, first fit in placement order::

    examples (tokens, patches, images), in order
        |  over a budget on its own (no empty row holds it): `over_budget` names it, the caller drops or refuses
        v
    each into the lowest row whose free tokens, patches and images all hold it      -> row, or -1 (next step)

With no patches and no images it places exactly as `fit.first_fit` does (tested against it). The loop is
sequential by nature; each example costs three vectorised comparisons over the rows.

>>> fit_budgets(np.array([5, 3, 3]), np.array([4, 4, 0]), np.array([1, 1, 0]), 2, RowBudgets(8, 6, 2)).tolist()
[0, 1, 0]
"""

from __future__ import annotations

import dataclasses

import numpy as np

__all__ = ["RowBudgets", "fit_budgets", "over_budget"]


@dataclasses.dataclass(frozen=True)
class RowBudgets:
  """What one row holds at most: tokens (the row's seq_len), image patches and images."""

  tokens: int
  patches: int
  images: int

  def __post_init__(self) -> None:
    for name in ("tokens", "patches", "images"):
      value = getattr(self, name)
      if isinstance(value, bool) or not isinstance(value, int) or value < (1 if name == "tokens" else 0):
        raise ValueError(f"RowBudgets.{name}: a whole number >= {1 if name == 'tokens' else 0}, got {value!r}")


def over_budget(tokens: np.ndarray, patches: np.ndarray, images: np.ndarray, budgets: RowBudgets) -> np.ndarray:
  """Per example: whether it exceeds a budget on its own (no row, even empty, can hold it)."""
  return (
    (np.asarray(tokens) > budgets.tokens)
    | (np.asarray(patches) > budgets.patches)
    | (np.asarray(images) > budgets.images)
  )


def fit_budgets(
  tokens: np.ndarray, patches: np.ndarray, images: np.ndarray, rows: int, budgets: RowBudgets
) -> np.ndarray:
  """Row of each example (-1: no row has room for all three of its amounts now), lowest row first, in order."""
  amounts = [np.asarray(a, np.int64) for a in (tokens, patches, images)]
  if len({a.shape for a in amounts}) != 1 or amounts[0].ndim != 1:
    raise ValueError("fit_budgets: tokens, patches and images are one amount per example, of one length")
  free = np.array([[budgets.tokens], [budgets.patches], [budgets.images]], np.int64).repeat(rows, 1)  # [3, rows]
  need = np.stack(amounts)  # [3, examples]
  out = np.full(need.shape[1], -1, np.int64)
  for i in range(need.shape[1]):
    fits: np.ndarray = np.all(free >= need[:, i : i + 1], axis=0)
    row = int(fits.argmax()) if rows else 0
    if rows and fits[row]:
      out[i] = row
      free[:, row] -= need[:, i]
  return out
