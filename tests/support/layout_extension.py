"""A feature of its own dtype and extent, as a user adds one: one `batch.extra_features` entry and this
function (tests/test_step_layout.py, and the equivalence matrix's "extra-feature" cell)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

ROW_SUMMARY = {
  "name": "row_summary",
  "dtype": "uint8",
  "extent": [5],
  "fill": 0,
  "assemble": "layout_extension:row_summary",
}


def row_summary(
  batch: Mapping[str, np.ndarray], pieces: object, host_row: np.ndarray, column: np.ndarray
) -> np.ndarray:
  """Per row, uint8 [5]: its documents, its tokens, its trained tokens, its first token, its pieces (mod 256)."""
  rows = batch["tokens"].shape[0]
  summary = np.stack(
    [
      batch["segment_ids"].max(axis=1),
      (batch["segment_ids"] > 0).sum(axis=1),
      batch["loss_mask"].sum(axis=1),
      batch["tokens"][:, 0],
      np.bincount(host_row, minlength=rows)[:rows],
    ],
    axis=1,
  )
  return (summary % 256).astype(np.uint8)


def expected_summary(batch: Mapping[str, np.ndarray]) -> np.ndarray:
  """What `row_summary` gives, from a handed-out batch (all but the pieces column, which the batch lacks)."""
  return row_summary(batch, None, np.zeros(0, np.int64), np.zeros(0, np.int64))[:, :4]
