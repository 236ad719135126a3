"""`StepProducer`: planned, read and assembled steps, one at a time.

Reads are batched across steps: the producer plans steps until it holds
its window of this host's tokens (1 to 64 steps), reads all their documents
in one call per dataset, and assembles each step only when it is asked
for. The window starts at one step (a fast first batch, also after a
restore) and doubles with every read up to `read_ahead_tokens`, where
batched reads are fastest::

    plan s, s+1, ... s+k  (state and stats snapshot after each)  -> window
    read every document of the window's pieces on this host       -> one flat token buffer
    next(): pop a step, assemble its rows (NumPy; the pipeline makes the global arrays)

Nothing here depends on how far ahead it reads: a step's batch is a pure
function of its plan.
"""

from __future__ import annotations

import collections
import dataclasses
import time
from typing import Any, Callable

import numpy as np

from jaxdata.config.pipeline_config import PipelineConfig
from jaxdata.pipeline.planner import StepPlanner
from jaxdata.pipeline.reader import DocumentReader
from jaxdata.pipeline.stats import StatsRecorder
from jaxdata.transforms.assemble import assemble_rows, padded_buffer
from jaxdata.transforms.packing import StepPlan
from jaxdata.transforms.pieces import Pieces

__all__ = ["END", "Prepared", "RowsHere", "StepProducer"]

MAX_WINDOW_STEPS = 64

RowsHere = Callable[[int, int], np.ndarray]  # (rows, seq_len) -> sorted global rows this host holds


@dataclasses.dataclass
class Prepared:
  """One step, ready to hand out, with the pipeline state after it."""

  batch: dict[str, Any]
  state: dict[str, Any]
  stats: dict[str, Any]


class _End:
  """Marks the end of the stream."""

  def __repr__(self) -> str:
    return "END"


END = _End()


@dataclasses.dataclass
class _Planned:
  """One step planned and read, not yet assembled (shares its window's tokens)."""

  plan: StepPlan
  rows_here: np.ndarray
  index: np.ndarray  # the plan's pieces in this host's rows
  doc_tokens: np.ndarray  # the whole read window's tokens, see `padded_buffer`
  doc_start: np.ndarray  # per piece in `index`
  state: dict[str, Any]
  stats: dict[str, Any]


class StepProducer:
  """Produces `Prepared` steps (or `END`) from a planner and a reader.

  Args:
    rows_here: which global rows of a step this host assembles (its
      NumPy rows, which the pipeline turns into global arrays).
    snapshot: called after each planned step; gives the state to hand out with it.
    keep: which steps this producer reads and assembles (the others are
      planned, so the state advances, and skipped); None keeps every step.
  """

  def __init__(
      self,
      cfg: PipelineConfig,
      planner: StepPlanner,
      reader: DocumentReader,
      recorder: StatsRecorder,
      rows_here: RowsHere,
      read_ahead_tokens: int,
      snapshot: Callable[[], dict[str, Any]],
      keep: Callable[[int], bool] | None = None,
  ) -> None:
    self.cfg = cfg
    self.planner = planner
    self.reader = reader
    self.recorder = recorder
    self.rows_here = rows_here
    self.read_ahead_tokens = read_ahead_tokens
    self.snapshot = snapshot
    self.keep = keep
    self.window: collections.deque[_Planned | _End] = collections.deque()
    self.window_tokens = 1  # grows to read_ahead_tokens; one step first

  def produce(self, into: Callable[[int, int], dict[str, np.ndarray]] | None = None) -> Prepared | _End:
    """The next step; `into(local_rows, seq_len)`, if given, gives the arrays
    to assemble it in."""
    if not self.window:
      self._fill()
    item = self.window.popleft()
    if isinstance(item, _End):
      return item
    started = time.perf_counter()
    plan, index, rows_here = item.plan, item.index, item.rows_here
    arrays = assemble_rows(
        plan.pieces.take(index), np.searchsorted(rows_here, plan.row[index]), plan.column[index],
        rows_here.size, plan.seq_len, item.doc_tokens, item.doc_start, self.cfg.packing,
        out=None if into is None else into(rows_here.size, plan.seq_len),
    )
    self.recorder.time(item.stats, "assemble", time.perf_counter() - started)
    return Prepared(arrays, item.state, item.stats)

  def restart(self, state: dict[str, Any]) -> None:
    """Drops what was planned ahead; the planner has been set to `state`."""
    del state  # the planner is shared and already set
    self.window.clear()
    self.window_tokens = 1

  def close(self) -> None:
    """Nothing of its own to release (the pipeline closes the reader)."""

  def _fill(self) -> None:
    started = time.perf_counter()
    steps, local_tokens = [], 0
    while local_tokens < self.window_tokens and len(steps) < MAX_WINDOW_STEPS:
      plan = self.planner.plan()
      if plan is None:
        break
      stats = self.recorder.planned(plan, self.planner.stream.passes_completed())
      if self.keep is not None and not self.keep(plan.step):
        continue
      rows_here = self.rows_here(plan.rows, plan.seq_len)
      steps.append((plan, rows_here, plan.in_rows(rows_here), self.snapshot(), stats))
      local_tokens += rows_here.size * plan.seq_len
    self.window_tokens = min(self.read_ahead_tokens, 2 * max(local_tokens, 1))
    planned = time.perf_counter()
    pieces = Pieces.concatenate([plan.pieces.take(index) for plan, _, index, _, _ in steps])
    covered = range(steps[0][0].step, steps[-1][0].step + 1) if steps else range(0)
    parts, doc_start = self.reader.read(covered, pieces)
    longest_row = max((plan.seq_len for plan, *_ in steps), default=1)
    doc_tokens = padded_buffer(parts, longest_row, self.cfg.packing.pad_id)
    read = time.perf_counter()
    first = 0
    for plan, rows_here, index, state, stats in steps:
      self.recorder.time(stats, "plan", (planned - started) / len(steps))
      self.recorder.time(stats, "read", (read - planned) / len(steps))
      self.window.append(_Planned(
          plan, rows_here, index, doc_tokens, doc_start[first : first + index.size], state, stats
      ))
      first += index.size
    if not steps or self.planner.done:
      self.window.append(END)
