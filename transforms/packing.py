"""Packing: documents into rows of seq_len, planned from lengths only.

Per step, `Packer.plan` takes the carry of the previous step plus new
documents from a `DocumentSource` and decides, from lengths alone, which
piece of which document goes to which (row, column)::

    carry (placed first, in order)  +  new documents (largest first)
        |  long documents: split into seq_len pieces, truncated, or dropped (counted)
        v
    concat      one long sequence cut into rows (a cut document continues in the next row)
    first_fit   each piece into the lowest row with room         (segment tree over free space)
    best_fit    each piece into the row with least room that fits (sorted free-space keys)
    none        one document per row, truncated
        |
        +--> StepPlan(row, column of every piece)     +--> carry: what did not fit
             (every host computes the same plan)           (part of the state)

Carried pieces are placed first at the next step, in order. New documents
are pulled only while carry + new stay below the step's capacity, so the
carry never reaches capacity + the longest document (with BOS / EOS): once
it is at least the capacity, nothing is pulled and it only shrinks. The
pieces of a split document are placed in offset order: a later piece never
goes into a step before an earlier one. Placing new pieces largest first
(first-fit decreasing) is what gets the non-padding fraction above 0.99 for
typical length mixes.

The mode string is read once, by `packing_strategy` (`strategies.py`); the
packer then talks to a `PackingStrategy` object (`budgets.BudgetFit` with
packing.images: every example whole, in rows of three budgets). Its state is a `PackerState`
(`packer_state.py`).
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from jaxdata.config.packing_config import PackingConfig
from jaxdata.config.pipeline_config import PipelineConfig
from jaxdata.transforms.budgets import BudgetFit
from jaxdata.transforms.packer_state import Carry, PackerState
from jaxdata.transforms.pieces import Pieces
from jaxdata.transforms.strategies import (
  DocumentColumns,
  DocumentSource,
  PackingStrategy,
  packing_strategy,
)

__all__ = ["DocumentSource", "Packer", "PackingStrategy", "StepImages", "StepPlan", "packing_strategy"]


@dataclasses.dataclass(frozen=True)
class StepImages:
  """A step's images per dataset and its patches, against the patch slots of its rows (packing.images)."""

  per_dataset: np.ndarray
  patches: int
  patch_slots: int


@dataclasses.dataclass(frozen=True)
class StepPlan:
  """Where every piece of one step goes: `pieces[i]` at (`row[i]`, `column[i]`)."""

  step: int
  rows: int
  seq_len: int
  pieces: Pieces
  row: np.ndarray
  column: np.ndarray
  final: bool  # the last, partial step of a stream that ended (padded)
  truncated_tokens: int  # dropped by long_docs: truncate (and mode none)
  split_pieces: int  # pieces that are not a whole document
  dropped_documents: int = 0  # long_docs: drop: documents longer than a row, left out (counted, never silent)
  images: StepImages | None = None  # packing.images: the step's images and patches

  @property
  def tokens(self) -> int:
    return int(self.pieces.length.sum())

  @property
  def padding_fraction(self) -> float:
    return 1.0 - self.tokens / (self.rows * self.seq_len)

  def in_rows(self, rows: np.ndarray) -> np.ndarray:
    """Indices of the pieces that lie in `rows` (row numbers of this step)."""
    inside = np.zeros(self.rows, bool)  # a lookup table: no sort, unlike np.isin
    inside[rows] = True
    return np.flatnonzero(inside[self.row])


class Packer:
  """Plans steps from a `DocumentSource`; state: the carry and whether it is done.

  The caller (`jaxdata.pipeline.StepPlanner`) owns the step counter and
  asks for steps in order.
  """

  def __init__(
    self, cfg: PipelineConfig, source: DocumentSource, image_amounts: Sequence[np.ndarray | None] = ()
  ) -> None:
    self.cfg = cfg
    self.source = source
    self.image_amounts = image_amounts
    self.strategy: PackingStrategy = (
      BudgetFit(cfg.packing, image_amounts, cfg.window_datasets)
      if cfg.packing.images is not None and cfg.packing.mode != "none"
      else packing_strategy(cfg.packing, cfg.window_datasets, cfg.seed)
    )
    self.carry = Pieces.empty()
    self.done = False
    # Per dataset index, documents of the final partial step that batch.drop_remainder left out (not state:
    # the stream's end is replanned from a state as it was first planned).
    self.unseen_at_end: dict[int, int] = {}

  def state(self) -> PackerState:
    """The state now (nothing encoded: the carry's pieces are immutable)."""
    return PackerState(self.done, Carry.of_pieces(self.carry))

  def restore(self, state: PackerState) -> None:
    """Continues from `state`; a `ValueError` names a carry this data cannot hold (nothing changes then)."""
    carry = state.carry.pieces
    if carry is None:  # a saved state's: the carry never exceeds a step plus one document (a generous bound)
      carry = Pieces.from_json(state.carry.text, self._effective_lengths, 2 * self.cfg.tokens_per_step + (1 << 16))
    if len(carry) and ((carry.offset + carry.length) > carry.doc_length).any():
      raise ValueError("packer state: a carried piece lies past the end of its document")
    self.carry, self.done = carry, state.done

  def get_state(self) -> dict[str, Any]:
    return self.state().to_json()

  def set_state(self, state: Mapping[str, Any]) -> None:
    self.restore(PackerState.from_json(state))

  def _effective_lengths(self, dataset: np.ndarray, record: np.ndarray) -> np.ndarray:
    try:
      lengths = self.source.document_lengths(dataset, record)
    except ValueError as e:
      raise ValueError(f"packer state: the carry names {e}") from e
    return self.strategy.document_lengths(dataset, lengths)[0]

  def plan(self, step: int) -> StepPlan | None:
    """The plan of `step`, or None once the source (and carry) is exhausted
    or the final partial step is dropped (batch.drop_remainder)."""
    if self.done:
      return None
    seq_len = self.cfg.packing.seq_len_at(step)
    rows = self.cfg.rows_at(step)
    new, truncated, dropped = self._pull(step, rows, seq_len)
    placed, row, column, carry = self.strategy.place(self.carry, new, rows, seq_len)
    ended = self.source.ended and len(carry) == 0
    final = ended and not self.strategy.is_full(placed, rows, seq_len)
    if (ended and not len(placed)) or (final and self.cfg.batch.drop_remainder):
      self.done = True
      if final and len(placed):
        self._warn_unseen(step, placed)
      if dropped:  # no step holds them: said here, since no step's stats can
        warnings.warn(
          f"jaxdata: long_docs: drop left out {dropped} documents longer than a row after the last step "
          "(the stream ended)",
          RuntimeWarning,
          stacklevel=2,
        )
      return None
    self.carry = carry
    self.done = ended
    split = int(np.count_nonzero(placed.length < placed.doc_length - self.strategy.tail(placed.dataset)))
    images = self._images(placed, rows)
    return StepPlan(step, rows, seq_len, placed, row, column, final, truncated, split, dropped, images)

  def _images(self, placed: Pieces, rows: int) -> StepImages | None:
    """With packing.images, the step's images per dataset and its patches (from the records' columns)."""
    budgets = self.cfg.packing.images
    if budgets is None:
      return None
    amounts = BudgetFit.amounts_of(self.image_amounts, placed)
    per_dataset = np.bincount(placed.dataset, weights=amounts[:, 1], minlength=len(self.cfg.names)).astype(np.int64)
    return StepImages(per_dataset, int(amounts[:, 0].sum()), rows * budgets.max_patches)

  def _warn_unseen(self, step: int, placed: Pieces) -> None:
    """The final partial step is dropped (batch.drop_remainder): its documents begun there are never seen
    in this run. Counted per dataset and said once, never silent."""
    begun = placed.offset == 0
    counts = np.bincount(placed.dataset[begun], minlength=len(self.cfg.names))
    self.unseen_at_end = {int(d): int(n) for d, n in enumerate(counts.tolist()) if n}
    if not self.unseen_at_end:
      return
    shown = ", ".join(f"{self.cfg.names[d]} {n}" for d, n in self.unseen_at_end.items())
    warnings.warn(
      f"jaxdata: the stream ended inside step {step}; batch.drop_remainder drops that partial step, so "
      f"{sum(self.unseen_at_end.values())} documents of the last pass are never seen ({shown}); set "
      "batch.drop_remainder: false to pad the step instead",
      RuntimeWarning,
      stacklevel=3,
    )

  def _pull(self, step: int, rows: int, seq_len: int) -> tuple[Pieces, int, int]:
    """New pieces from the source until, with the carry, they fill the step.
    Returns them, the tokens truncation dropped and the documents long_docs: drop left out."""
    need = self.strategy.shortfall(self.carry, rows, seq_len)
    parts, truncated, dropped_documents = [], 0, 0
    while need > 0 and not self.source.ended:
      docs = self.strategy.take(self.source, step, need)
      if self.cfg.packing.long_docs == "drop":
        docs, count = _without_long(docs, self.cfg.packing, seq_len)
        dropped_documents += count
      pieces, dropped = self.strategy.to_pieces(docs, seq_len)
      parts.append(pieces)
      truncated += dropped
      need -= self.strategy.amount(pieces)
    return Pieces.concatenate(parts), truncated, dropped_documents


@dataclasses.dataclass(frozen=True)
class _Documents:
  """Documents as columns (a `DocumentColumns`)."""

  dataset: np.ndarray
  pass_index: np.ndarray
  record: np.ndarray
  length: np.ndarray


def _without_long(docs: DocumentColumns, packing: PackingConfig, seq_len: int) -> tuple[DocumentColumns, int]:
  """The documents whose pieces fit one row (BOS / EOS counted), and how many were left out:
  those `packing.kept_tokens` counts as 0, so the mixture counted none of their tokens."""
  keep = packing.kept_tokens(docs.length, seq_len) > 0
  if keep.all():
    return docs, 0
  kept = _Documents(docs.dataset[keep], docs.pass_index[keep], docs.record[keep], docs.length[keep])
  return kept, int((~keep).sum())
