"""`balanced_rows`: spread a step's rows so every host's block of rows reads a similar amount.

Fit packing puts the largest pieces in the lowest rows; hosts take
contiguous blocks of rows. Re-ordering rows (the plan stays the same on
every host) keeps any aligned block's total of pieces near the mean.
"""

from __future__ import annotations

import functools

import numpy as np

__all__ = ["balanced_rows"]


def balanced_rows(counts: np.ndarray) -> np.ndarray:
  """A new position for every row, so that any aligned block of positions
  (one host's rows, for any host count) holds a similar total of `counts`.

  Rows sorted by count, most first, are split recursively into halves by the
  pattern A B B A A B B A ... (the first half takes the A rows), which keeps
  the two halves' totals within about one row of each other at every level::

      counts 9 7 5 3 2 1 1 0  ->  halves {9, 3, 2, 0} | {7, 5, 1, 1}  ->  quarters ...

  >>> balanced_rows(np.array([0, 9, 1, 7, 2, 5, 1, 3])).tolist()  # halves of 14 and 14
  [1, 0, 7, 4, 3, 6, 5, 2]

  With few rows per block, one very full row can still dominate its block.
  """
  order = np.argsort(-counts, kind="stable")  # rows by rank, most first
  position = np.empty(counts.size, dtype=np.int64)
  position[order] = _position_of_rank(counts.size)
  return position


@functools.lru_cache(maxsize=64)
def _position_of_rank(rows: int) -> np.ndarray:
  """Where the row of rank r (0 = most) goes: a function of the row count
  alone, so it is computed once per count (read-only)."""
  # Rank r in a segment of n positions: the A half holds ranks r % 4 in
  # {0, 3}, 2 (n // 4) + (n % 4 > 0) of them; either way r // 2 is its rank inside the half.
  rank = np.arange(rows, dtype=np.int64)
  start = np.zeros(rows, dtype=np.int64)
  size = np.full(rows, rows, dtype=np.int64)
  while (size > 1).any():
    in_a = (rank % 4 == 0) | (rank % 4 == 3)
    a_size = 2 * (size // 4) + (size % 4 > 0)
    split = size > 1
    start = np.where(split & ~in_a, start + a_size, start)
    size = np.where(split, np.where(in_a, a_size, size - a_size), size)
    rank = np.where(split, rank // 2, rank)
  start.setflags(write=False)
  return start
