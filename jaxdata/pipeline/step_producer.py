"""`StepProducer`: planned, read and assembled steps, one at a time.

Reads are batched across steps: the producer plans steps until it holds
its span of this host's tokens (1 to 64 steps), reads all their documents
in one call per dataset, and assembles each step only when it is asked
for. The span starts at one step (a fast first batch, also after a
restore) and doubles with every read up to `read_ahead_tokens`, where
batched reads are fastest::

    plan s, s+1, ... s+k  (state and stats snapshot after each)  -> span
    read every document of the span's pieces on this host       -> one flat token buffer
    next(): pop a step, assemble its rows (NumPy; the pipeline makes the global arrays)

With `background_reads` (the pipeline's prefetch thread is running and
the data is on disk), each span is read on a thread of its own
(`ReadThread`) while the span before it is assembled, and the span after
it is planned while it is read: reads, which run mostly without the GIL,
overlap planning and assembly, which hold it. Remote data keeps its own
fetch-ahead (the next span's shards are fetched while this one is read).
Spans planned by a planner process are read on the prefetch thread (see
worker_producer.py): there, reading ahead did not add speed and cost a
Python-bound training loop more of the GIL; only spans that wait on a
store's byte ranges (flat files in object storage) are read ahead there.

Nothing here depends on how far ahead it reads: a step's batch is a pure
function of its plan.
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import functools
import time
from collections.abc import Callable
from typing import Any, Literal

import numpy as np

from jaxdata.config.pipeline_config import PipelineConfig
from jaxdata.mixture.updates import MixtureUpdates
from jaxdata.pipeline.execution import Execution
from jaxdata.pipeline.planner import StepPlanner
from jaxdata.pipeline.producing import END, End, Prepared
from jaxdata.pipeline.read_spans import (
  MAX_SPAN_STEPS,
  HostStep,
  PlannedSpan,
  ReadStep,
  RowsHere,
  aligned_arrays,
  assemble,
  plan_span,
  read_span,
)
from jaxdata.pipeline.read_thread import ReadThread
from jaxdata.pipeline.reader import DocumentReader
from jaxdata.pipeline.stats import StatsRecorder
from jaxdata.pipeline.step_stats import StepStats
from jaxdata.transforms.assemble import FEATURES
from jaxdata.transforms.pieces import Pieces

__all__ = ["RowsHere", "StepProducer", "grown_span"]


@dataclasses.dataclass
class _Ready:
  """One step planned and read, not yet assembled."""

  item: ReadStep
  state: dict[str, Any]
  stats: StepStats


class StepProducer:
  """Produces `Prepared` steps (or `END`) from a planner and a reader.

  Args:
    rows_here: which global rows of a step this host assembles (its
      NumPy rows, which the pipeline turns into global arrays).
    snapshot: called after each planned step; gives the state to hand out with it.
    aligned: assemble into fresh 64-byte-aligned memory (`aligned_arrays`),
      which global arrays on CPU devices then use in place instead of copying.
    background_reads: read spans of data on disk on a thread of their own
      (`read_thread`), one span ahead of assembly.
  """

  makes_steps_ahead = False  # steps are made when asked for (on the prefetch thread, if any)

  def __init__(
    self,
    cfg: PipelineConfig,
    planner: StepPlanner,
    reader: DocumentReader,
    recorder: StatsRecorder,
    rows_here: RowsHere,
    read_ahead_tokens: int,
    snapshot: Callable[[], dict[str, Any]],
    aligned: bool = False,
    background_reads: bool = False,
  ) -> None:
    self.cfg = cfg
    self.aligned = aligned
    self.read_thread = None
    if background_reads and not reader.remote:
      self.read_thread = ReadThread(functools.partial(read_span, reader, pad_id=cfg.packing.fill_id))
    self.pending: collections.deque[tuple[PlannedSpan, concurrent.futures.Future]] = collections.deque()
    self.planner = planner
    self.reader = reader
    self.recorder = recorder
    self.rows_here = rows_here
    self.read_ahead_tokens = read_ahead_tokens
    self.snapshot = snapshot
    self.span: collections.deque[_Ready | Literal[End.END]] = collections.deque()
    self.span_tokens = 1  # grows to read_ahead_tokens; one step first
    self.ahead: PlannedSpan | None = None  # with remote data: the next span, its shards being fetched
    # While the loop updates the mixture: plan no step whose documents reach this one (None: no bound).
    # Set by the pipeline's thread, read by the prefetch thread (an int: read whole).
    self.horizon: int | None = None
    self._scratch: dict[str, np.ndarray] | None = None  # where features left out of the batch are written

  def produce(self) -> Prepared | Literal[End.END]:
    """The next step."""
    if not self.span:
      self._fill()
    ready = self.span.popleft()
    if ready is END:
      return END
    started = time.perf_counter()
    arrays = self.assemble_step(ready.item)
    self.recorder.time(ready.stats, "assemble", time.perf_counter() - started)
    return Prepared(arrays, ready.state, ready.stats)

  def steps_ready(self) -> int:
    """None are made ahead elsewhere: the prefetch thread's queue holds this producer's steps."""
    return 0

  def steps_ahead_at_most(self) -> int:
    return 0

  def execution(self) -> Execution:
    """Where the steps are made: here (`Pipeline.execution`)."""
    return Execution(
      processes=(),
      steps_from_processes=0,
      steps_per_reader=(),
      may_fall_back=False,
      fell_back=False,
      assembles_here=True,
      read_thread=self.read_thread is not None,
    )

  def assemble_step(self, item: ReadStep) -> dict[str, Any]:
    """A read step's rows (in fresh aligned memory when `aligned`)."""
    return assemble(item, self.cfg.packing, self.out_for(item.host.num_rows, item.host.seq_len))

  def out_for(self, num_rows: int, seq_len: int) -> dict[str, Any] | None:
    """Where a step's rows go: aligned memory, or None (NumPy's own allocations). Features the
    batch leaves out (`batch.features`) go to scratch arrays that are reused: never handed out."""
    kept = self.cfg.batch.features
    if len(kept) == len(FEATURES):
      return aligned_arrays(num_rows, seq_len) if self.aligned else None
    if self._scratch is None or self._scratch["tokens"].shape != (num_rows, seq_len):
      self._scratch = {name: np.empty((num_rows, seq_len), np.int32) for name in FEATURES}
    shape = (num_rows, seq_len)
    fresh = aligned_arrays(*shape, kept) if self.aligned else {n: np.empty(shape, np.int32) for n in kept}
    return {**self._scratch, **fresh}

  def restart(self, state: dict[str, Any]) -> None:
    """Drops what was planned ahead; the planner has been set to `state`."""
    del state  # the planner is shared and already set
    self.span.clear()
    self.span_tokens = 1
    self.ahead = None
    for _, read in self.pending:
      read.cancel()  # skipped if not begun
    # A read under way finishes unused; waited for, so that no stale read is still
    # using the reader when another thread reads next (workers.py reads on the prefetch thread).
    concurrent.futures.wait([read for _, read in self.pending])
    self.pending.clear()

  def plan_before(self, horizon: int | None) -> None:
    """Plans ahead only steps that draw no document of step `horizon` or later (None: no bound); a
    step asked for is planned all the same."""
    self.horizon = horizon

  def adopt_updates(self, updates: MixtureUpdates, at_step: int) -> bool:
    """Plans on with `updates` if nothing of `at_step` or later is planned (see `StepPlanner.adopt_updates`)."""
    return self.planner.adopt_updates(updates, at_step)

  def close(self, timeout_s: float) -> bool:
    """Stops the read thread; whether no read is still under way after
    `timeout_s` (the pipeline closes the reader only then)."""
    return self.read_thread is None or self.read_thread.close(timeout_s)

  def _fill(self) -> None:
    if self.read_thread is not None:
      self._fill_from_background()
      return
    planned, self.ahead = self.ahead or self._plan(), None
    if self.reader.remote and not planned.ended and self.planner.steps_before(self.horizon) != 0:
      # Remote shards: plan the next span now and start fetching its shards while this one is read.
      self.ahead = self._plan()
      self.reader.fetch_ahead(Pieces.concatenate([s.pieces for s in self.ahead.steps]))
    started = time.perf_counter()
    items = read_span(self.reader, planned.steps, self.cfg.packing.fill_id)
    self._queue(planned, items, time.perf_counter() - started)

  def _fill_from_background(self) -> None:
    if not self.pending:
      self._plan_and_read()
    if len(self.pending) == 1 and not self.pending[0][0].ended and self.planner.steps_before(self.horizon) != 0:
      self._plan_and_read()  # the next span: planned now, read while this one is assembled
    planned, read = self.pending.popleft()
    self._queue(planned, *read.result())

  def _queue(self, planned: PlannedSpan, items: list[ReadStep], read_s: float) -> None:
    """A read span's steps, ready to assemble (and END after the last)."""
    for stats in planned.stats:
      self.recorder.time(stats, "read", read_s / len(items))
    self.span.extend(_Ready(*ready) for ready in zip(items, planned.states, planned.stats))
    if planned.ended:
      self.span.append(END)

  def _plan_and_read(self) -> None:
    planned = self._plan()
    assert self.read_thread is not None  # planning in the background reads ahead
    self.pending.append((planned, self.read_thread.submit(planned.steps)))

  def _plan(self) -> PlannedSpan:
    allowed = self.planner.steps_before(self.horizon)
    planned = plan_span(
      self.planner,
      self.recorder,
      self.rows_here,
      self.span_tokens,
      self.snapshot,
      MAX_SPAN_STEPS if allowed is None else allowed,  # at least one step: this one is asked for
    )
    self.span_tokens = grown_span(planned.steps, self.read_ahead_tokens, self.span_tokens)
    return planned


def grown_span(steps: list[HostStep], limit: int, asked: int) -> int:
  """The next span's tokens: twice what this one held, up to `limit`; never fewer than this one
  asked for (a span cut short by the planning horizon does not shrink the next)."""
  return max(asked, min(limit, 2 * max(sum(s.num_rows * s.seq_len for s in steps), 1)))
