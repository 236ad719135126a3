"""Rows with three budgets (tokens, patches, images): whole examples, first fit. Checked against the
one-budget placer it generalises (`fit.first_fit`, with no patches and no images) and against a plain
nested-loop reading of its rule, on generated amounts; the budgets always hold."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jaxdata.transforms.budgets import RowBudgets, fit_budgets, over_budget
from jaxdata.transforms.fit import best_fit, first_fit

amounts = st.lists(st.tuples(st.integers(1, 40), st.integers(0, 30), st.integers(0, 3)), min_size=0, max_size=60)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(1, 40), max_size=60), st.integers(0, 9), st.integers(1, 50))
def test_without_images_it_places_as_the_one_budget_first_fit(lengths, rows, seq_len):
  none = np.zeros(len(lengths), np.int64)
  placed = fit_budgets(np.array(lengths, np.int64), none, none, rows, RowBudgets(seq_len, 0, 0))
  assert placed.tolist() == first_fit([length for length in lengths], rows, seq_len)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(1, 40), max_size=60), st.integers(0, 9), st.integers(1, 50), st.integers(0, 4))
def test_without_images_best_fit_and_a_segment_cap_place_as_the_one_budget_placers(lengths, rows, seq_len, cap):
  none = np.zeros(len(lengths), np.int64)
  budgets = RowBudgets(seq_len, 0, 0)
  for best, reference in ((False, first_fit), (True, best_fit)):
    placed = fit_budgets(np.array(lengths, np.int64), none, none, rows, budgets, best=best, max_segments=cap)
    assert placed.tolist() == reference(list(lengths), rows, seq_len, max_segments=cap), (best, cap)


def _reference(examples, rows: int, budgets: RowBudgets) -> list[int]:
  """The rule read plainly: each example into the lowest row where all three amounts fit."""
  free = [[budgets.tokens, budgets.patches, budgets.images] for _ in range(rows)]
  out = []
  for example in examples:
    row = next((r for r in range(rows) if all(free[r][j] >= example[j] for j in range(3))), -1)
    if row >= 0:
      free[row] = [free[row][j] - example[j] for j in range(3)]
    out.append(row)
  return out


@settings(max_examples=200, deadline=None)
@given(amounts, st.integers(0, 8), st.integers(20, 60), st.integers(0, 60), st.integers(0, 4))
def test_first_fit_over_three_budgets_and_the_budgets_hold(examples, rows, seq_len, patches, images):
  budgets = RowBudgets(seq_len, patches, images)
  columns = [np.array([e[j] for e in examples], np.int64) for j in range(3)]
  placed = fit_budgets(*columns, rows, budgets)
  assert placed.tolist() == _reference(examples, rows, budgets)
  for j, limit in enumerate((seq_len, patches, images)):  # no row over any budget
    used = np.bincount(placed[placed >= 0], weights=columns[j][placed >= 0], minlength=rows)
    assert (used <= limit).all()
  assert not (placed[over_budget(*columns, budgets)] >= 0).any()  # an example over a budget never placed
  assert fit_budgets(*columns, rows, budgets).tolist() == placed.tolist()  # a pure function


def test_budgets_are_checked_by_name():
  with pytest.raises(ValueError, match="RowBudgets.tokens: a whole number >= 1, got 0"):
    RowBudgets(0, 1, 1)
  with pytest.raises(ValueError, match="RowBudgets.images: a whole number >= 0, got -1"):
    RowBudgets(8, 1, -1)
  with pytest.raises(ValueError, match="one amount per example, of one length"):
    fit_budgets(np.array([1, 2]), np.array([1]), np.array([0, 0]), 2, RowBudgets(8, 4, 1))
  assert over_budget(np.array([9, 3, 3]), np.array([0, 5, 0]), np.array([0, 0, 2]), RowBudgets(8, 4, 1)).tolist() == [
    True,
    True,
    True,
  ]
