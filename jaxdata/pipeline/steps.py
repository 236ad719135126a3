"""`Steps`: a step maker made of a planning and an assembly, the two axes of where steps are made.

    planning (planning.py)             assembly (assembly.py)
    LocalPlanning    this process      LocalAssembly     this process (a read thread, fetch-ahead)
    ProcessPlanning  a planner process ReaderProcesses   reader processes, slot rings in shared memory

`Steps` takes spans from its planning and hands them to its assembly, as
many ahead as the assembly wants; then hands out one step at a time::

    planning.next_span() --span--> assembly.accept(span)     (ahead: while it holds fewer than it wants)
    produce(): the oldest step -> assembly.take(step) -> Prepared(rows, state, stats)
               its span's last step -> planning.span_handed_out()   (a planner process plans one more)

Any pair gives the same steps from the same state: a step's batch is a
pure function of its plan. A new way of making steps is a new planning or
a new assembly; this class does not change.
"""

from __future__ import annotations

import collections
from typing import Literal

from jaxdata.checkpoint.state import PipelineState
from jaxdata.mixture.updates import MixtureUpdates
from jaxdata.pipeline.assembly import Assembly
from jaxdata.pipeline.execution import Execution
from jaxdata.pipeline.planning import Planning
from jaxdata.pipeline.producing import END, ComingStep, End, Prepared
from jaxdata.pipeline.read_spans import StepSpan

__all__ = ["Steps"]


class Steps:
  """Makes steps with `planning` and `assembly` (see the module docstring)."""

  def __init__(self, planning: Planning, assembly: Assembly) -> None:
    self.planning, self.assembly = planning, assembly
    self.coming: collections.deque[ComingStep | BaseException | Literal[End.END]] = collections.deque()
    self.ended = False  # the stream's last span (or a planning error) was taken: ask for no more

  @property
  def makes_steps_ahead(self) -> bool:
    return self.assembly.makes_steps_ahead

  def produce(self) -> Prepared | Literal[End.END]:
    self._take_spans(asked=False)
    while not self.coming:
      self._take_spans(asked=True)
    coming = self.coming[0]
    if coming is END:
      return END  # (and END again on every later call)
    self.coming.popleft()
    if isinstance(coming, BaseException):
      raise coming
    arrays = self.assembly.take(coming)
    if coming.closes_span:
      self.planning.span_handed_out()
    return Prepared(arrays, coming.state, coming.stats)

  def _take_spans(self, asked: bool) -> None:
    """Spans from the planning to the assembly: one if `asked`, then those it wants ahead."""
    while not self.ended and (asked or self.assembly.spans_held() < self.assembly.spans_wanted()):
      span = self.planning.next_span(asked)
      if span is None:
        return
      asked = False
      if isinstance(span, BaseException):
        self.coming.append(span)  # raised at the step it belongs to
        self.ended = True
        return
      self._queue(span)

  def _queue(self, span: StepSpan) -> None:
    self.assembly.accept(span)
    last = len(span.steps) - 1
    for i, (host, state, stats) in enumerate(zip(span.steps, span.states, span.stats)):
      self.coming.append(ComingStep(host.step, host.num_rows, host.seq_len, state, stats, i == last))
    if span.ended:
      self.coming.append(END)
      self.ended = True

  def steps_ready(self) -> int:
    """Steps an assembly elsewhere was given and not yet handed out (made, or being made)."""
    if not self.makes_steps_ahead:
      return 0
    return min(self.steps_ahead_at_most(), sum(isinstance(c, ComingStep) for c in self.coming))

  def steps_ahead_at_most(self) -> int:
    return self.assembly.steps_ahead_at_most()

  def restart(self, state: PipelineState) -> None:
    """Drops everything planned and read; the next step is the one after `state`."""
    self.coming.clear()
    self.ended = False
    self.assembly.restart()
    self.planning.restart(state)

  def plan_before(self, horizon: int | None) -> None:
    self.planning.plan_before(horizon)

  def adopt_updates(self, updates: MixtureUpdates, at_step: int) -> bool:
    return self.planning.adopt_updates(updates, at_step)

  def execution(self) -> Execution:
    """Where the steps are made: here (a `PooledSteps` describes its processes)."""
    return Execution(
      processes=(),
      steps_from_processes=0,
      steps_per_reader=(),
      may_fall_back=False,
      fell_back=False,
      assembles_here=True,
      read_thread=self.assembly.reads_on_thread(),
    )

  def close(self, timeout_s: float) -> bool:
    return self.assembly.close(timeout_s)
