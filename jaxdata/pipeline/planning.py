"""Planning: where a pipeline's spans of steps come from. One interface, `Planning`, two implementations.

    LocalPlanning     the planner in this process: span growth and the horizon
                      (the planner process runs this same class, worker_process.py)
    ProcessPlanning   the planner process, by message (planning_process.py)

A span is consecutive steps, each with the state after it and its stats
(`StepSpan`). Spans start at one step (a fast first batch, also after a
restart) and double up to `read_ahead_tokens` of this host's rows::

    next_span(asked=True)    at least one step (the stream's end: an empty span that ends)
    next_span(asked=False)   a span only if planning may run ahead: not past the horizon
                             (`plan_before`); None otherwise

Mixture steering (steering.py) talks to the planning only, through
`adopt_updates` and `plan_before`. Nothing here depends on how far ahead
it plans: a step's batch is a pure function of its plan.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

from jaxdata.checkpoint.state import PipelineState
from jaxdata.mixture.updates import MixtureUpdates
from jaxdata.pipeline.planner import StepPlanner
from jaxdata.pipeline.read_spans import MAX_SPAN_STEPS, HostStep, RowsHere, StepSpan, plan_span
from jaxdata.pipeline.stats import StatsRecorder

__all__ = ["LocalPlanning", "Planning"]


class Planning(Protocol):
  """Where the spans come from (see the module docstring)."""

  def next_span(self, asked: bool) -> StepSpan | BaseException | None:
    """The next span; with `asked`, waits for it (None only without `asked`). A planning error
    comes back in its place, to be raised at the step it belongs to."""
    ...

  def span_handed_out(self) -> None:
    """The last step of a span was handed out (a planner process may plan one more)."""
    ...

  def restart(self, state: PipelineState) -> None:
    """Plan on from `state`: the next span starts at the step after it, one step long."""
    ...

  def plan_before(self, horizon: int | None) -> None:
    """Plan ahead no step that draws documents of step `horizon` or later (None: no bound)."""
    ...

  def adopt_updates(self, updates: MixtureUpdates, at_step: int) -> bool:
    """Plan every later step with `updates` if nothing from `at_step` on is planned (else False)."""
    ...


class LocalPlanning:
  """Plans spans with a `StepPlanner` in this process.

  Args:
    planner: the planner (the pipeline's own: a restart sets it first).
    recorder: counts each planned step's tokens and times its planning.
    rows_here: which global rows of a step this host holds.
    snapshot: the state after the step just planned.
    read_ahead_tokens: the most tokens of this host's rows a span grows to.
  """

  def __init__(
    self,
    planner: StepPlanner,
    recorder: StatsRecorder,
    rows_here: RowsHere,
    snapshot: Callable[[], PipelineState],
    read_ahead_tokens: int,
  ) -> None:
    self.planner, self.recorder, self.rows_here, self.snapshot = planner, recorder, rows_here, snapshot
    self.read_ahead_tokens = read_ahead_tokens
    self.span_tokens = 1  # grows to read_ahead_tokens; one step first
    # Set by the pipeline's thread, read by the one planning (an int: read whole).
    self.horizon: int | None = None

  def may_plan_ahead(self) -> bool:
    """Whether a step may be planned before it is asked for (the horizon allows one)."""
    return self.planner.steps_before(self.horizon) != 0

  def next_span(self, asked: bool) -> StepSpan | BaseException | None:
    if not asked and not self.may_plan_ahead():
      return None
    allowed = self.planner.steps_before(self.horizon)
    try:
      planned = plan_span(
        self.planner,
        self.recorder,
        self.rows_here,
        self.span_tokens,
        self.snapshot,
        MAX_SPAN_STEPS if allowed is None else allowed,  # at least one step: asked for
      )
    except Exception as error:  # noqa: BLE001 -- raised at its step, after the steps planned before it
      return error
    self.span_tokens = grown_span(planned.steps, self.read_ahead_tokens, self.span_tokens)
    return planned

  def span_handed_out(self) -> None:
    """Nothing to do: this planning plans when asked."""

  def restart(self, state: PipelineState) -> None:
    """The span starts small again; the planner itself is set by the pipeline (or `set_state` in a planner
    process) before."""
    del state
    self.span_tokens = 1

  def plan_before(self, horizon: int | None) -> None:
    self.horizon = horizon

  def adopt_updates(self, updates: MixtureUpdates, at_step: int) -> bool:
    """See `StepPlanner.adopt_updates` (it never waits for a step being planned)."""
    return self.planner.adopt_updates(updates, at_step)

  def adopt_update_entry(self, entry: Mapping[str, Any]) -> bool:
    """`adopt_updates` with one more update, as a message carries it (`MixtureUpdates.to_json_at`)."""
    stream = self.planner.stream
    updates = self.planner.latest_updates.pruned(stream.next_step - 1).added_entry(entry)
    return self.adopt_updates(updates, int(entry["step"]))


def grown_span(steps: list[HostStep], limit: int, asked: int) -> int:
  """The next span's tokens: twice what this one held, up to `limit`; never fewer than this one
  asked for (a span cut short by the planning horizon does not shrink the next)."""
  return max(asked, min(limit, 2 * max(sum(s.num_rows * s.seq_len for s in steps), 1)))
