"""Rows with three budgets: at most `tokens` tokens, `patches` image patches and `images` images a row.

An image-text example is never split (as a pair is not): it goes whole into one row where all three of its
amounts fit, first fit (or best fit: the row with least free tokens) in placement order::

    examples (tokens, patches, images), in order
        |  over a budget on its own (no empty row holds it): planned as longer than a row, so packing drops and
        |  counts it (`mixture.image_budgets`), or the pipeline refuses to open
        v
    each into the lowest row whose free tokens, patches and images all hold it      -> row, or -1 (next step)

With no patches and no images it places exactly as `fit.first_fit` and `fit.best_fit` do (tested against
them). The loop is sequential by nature; each example costs a few vectorised comparisons over the rows.
`BudgetFit` is the packing strategy built on it: a `Fit` whose pieces carry their records' patches and images.

>>> fit_budgets(np.array([5, 3, 3]), np.array([4, 4, 0]), np.array([1, 1, 0]), 2, RowBudgets(8, 6, 2)).tolist()
[0, 1, 0]
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from jaxdata.config.packing_config import PackingConfig
from jaxdata.transforms.balance import balanced_rows
from jaxdata.transforms.kernels import first_fit_rows
from jaxdata.transforms.pieces import Pieces
from jaxdata.transforms.strategies import Fit, Placement, placed_by_row

__all__ = ["BudgetFit", "RowBudgets", "fit_budgets", "over_budget"]


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
  tokens: np.ndarray,
  patches: np.ndarray,
  images: np.ndarray,
  rows: int,
  budgets: RowBudgets,
  *,
  best: bool = False,
  max_segments: int = 0,
) -> np.ndarray:
  """Row of each example (-1: no row has room for all its amounts now), lowest row first (with `best`: the
  fitting row with least free tokens, the lowest of equals), in order; with `max_segments` > 0 a row holds
  at most that many examples."""
  amounts = [np.asarray(a, np.int64) for a in (tokens, patches, images)]
  if len({a.shape for a in amounts}) != 1 or amounts[0].ndim != 1:
    raise ValueError("fit_budgets: tokens, patches and images are one amount per example, of one length")
  limits = [budgets.tokens, budgets.patches, budgets.images] + ([max_segments] if max_segments > 0 else [])
  amounts += [np.ones_like(amounts[0])] if max_segments > 0 else []
  free = np.array(limits, np.int64)[:, None].repeat(rows, 1)  # [budgets, rows]
  need = np.stack(amounts)  # [budgets, examples]
  out = np.full(need.shape[1], -1, np.int64)
  if not rows:
    return out
  for i in range(need.shape[1]):
    fits: np.ndarray = np.all(free >= need[:, i : i + 1], axis=0)
    row = int(np.where(fits, free[0], np.iinfo(np.int64).max).argmin()) if best else int(fits.argmax())
    if fits[row]:
      out[i] = row
      free[:, row] -= need[:, i]
  return out


class BudgetFit(Fit):
  """`Fit` over three budgets: each piece (a whole example) needs its record's patches and images too.

  `amounts[d]` is dataset d's [records, 2] (patches, images), None for a dataset of text alone."""

  def __init__(self, packing: PackingConfig, amounts: Sequence[np.ndarray | None], windows: tuple[bool, ...] = ()):
    super().__init__(packing, first_fit_rows, windows)
    assert packing.images is not None  # a BudgetFit is made for packing.images only
    self.images = packing.images
    self.amounts = amounts

  @staticmethod
  def amounts_of(amounts: Sequence[np.ndarray | None], pieces: Pieces) -> np.ndarray:
    """[pieces, 2]: each piece's record's patches and images from per-dataset `amounts` (0 for a dataset of
    text alone, None)."""
    out = np.zeros((len(pieces), 2), np.int64)
    for d, table in enumerate(amounts):
      mine = np.flatnonzero(pieces.dataset == d)
      if mine.size and table is not None and table.size:
        out[mine] = np.asarray(table, np.int64)[pieces.record[mine]]
    return out

  def place(self, carry: Pieces, new: Pieces, rows: int, seq_len: int) -> Placement:
    pool = Pieces.concatenate([carry, new.take(np.argsort(-new.length, kind="stable"))])
    amounts = self.amounts_of(self.amounts, pool)
    budgets = RowBudgets(seq_len, self.images.max_patches, self.images.max_images)
    best, cap = self.packing.mode == "best_fit", self.packing.max_segments_per_row or 0
    row_of = fit_budgets(pool.length, amounts[:, 0], amounts[:, 1], rows, budgets, best=best, max_segments=cap)
    placed, row, column, rest = placed_by_row(pool, row_of)
    return placed, balanced_rows(np.bincount(row, minlength=rows))[row], column, rest
