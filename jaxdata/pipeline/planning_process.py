"""`ProcessPlanning`: the `Planning` of a planner process, by message.

The planner process runs `LocalPlanning` (worker_process.py); this side
starts it, takes its spans and steers it::

    restart(state)              Start(g, state, horizon)     plan on from `state`
    next_span()            <--  SpanPlanned(g, ...) + pieces  (WorkerError: raised at its step)
    span_handed_out()           Credit(g)                    plan one more span
    plan_before(horizon)        PlanBefore(g, horizon)
    adopt_updates(u, s)         UpdateMixture(g, entry)      only while `s` lies at or past every step
                                                             the planner may have planned (its horizon)

A span's pieces stay in the bytes they came in (`StepSpan.wire`), so a
reader process gets them as they are. A planner that died is raised where
its next span is awaited, never by a steering message (`PlanBefore`,
`UpdateMixture`): one sent after a batch was taken would lose that batch.
"""

from __future__ import annotations

from jaxdata.checkpoint.state import PipelineState
from jaxdata.mixture.updates import MixtureUpdates
from jaxdata.pipeline.messages import Credit, PlanBefore, SpanPlanned, Start, UpdateMixture, WorkerError
from jaxdata.pipeline.read_spans import StepSpan, decode_span
from jaxdata.pipeline.stats import StatsRecorder
from jaxdata.pipeline.worker_handle import WorkerGone, raised
from jaxdata.pipeline.worker_pool import Lifecycle, WorkerPool

__all__ = ["ProcessPlanning"]


class ProcessPlanning:
  """Spans from the pool's planner process (see the module docstring); its messages are sent only while
  the pool runs. `recorder` gets the planner's timings of the steps it plans."""

  def __init__(self, pool: WorkerPool, recorder: StatsRecorder) -> None:
    self.pool, self.recorder = pool, recorder
    self.horizon: int | None = None  # where the planner's planning stops (None: no bound)
    self.planned_below: int | None = None  # the most it can have reached in this generation

  def next_span(self, asked: bool) -> StepSpan | BaseException | None:
    handle = self.pool.planning_process
    received = handle.receive_current(self.pool.generation, wait=asked)
    if received is None:
      return None
    message, payload = received
    if isinstance(message, WorkerError):
      return raised(message)
    if not isinstance(message, SpanPlanned):
      raise RuntimeError(f"{handle.name}: sent {message} where a span was expected")
    for stats in message.stats:
      for timer, seconds in stats.time_s.items():  # the planner's
        self.recorder.timers[timer] += seconds
    steps = decode_span(message.steps, payload)
    return StepSpan(steps, message.states, message.stats, message.ended, (message.steps, payload))

  def span_handed_out(self) -> None:
    self.pool.planning_process.send(Credit(self.pool.generation))

  def restart(self, state: PipelineState) -> None:
    """Starts the planner of the pool's new generation from `state`, behind the horizon."""
    self.pool.planning_process.send(Start(self.pool.generation, state, self.horizon))
    self.planned_below = self.horizon

  def plan_before(self, horizon: int | None) -> None:
    if horizon == self.horizon:
      return
    self.horizon = horizon
    if self.pool.lifecycle is Lifecycle.RUNNING:
      try:
        self.pool.planning_process.send(PlanBefore(self.pool.generation, horizon))
      except WorkerGone:  # raised where its next span is received; its restart sends the horizon (`Start`)
        return
      if horizon is None or self.planned_below is None:
        self.planned_below = None
      else:
        self.planned_below = max(self.planned_below, horizon)

  def adopt_updates(self, updates: MixtureUpdates, at_step: int) -> bool:
    """Sends the update while the planner cannot have planned `at_step` (its horizon is at or below it)."""
    adopted = self.planned_below is not None and at_step >= self.planned_below
    if adopted:
      entry = updates.to_json_at(at_step)
      assert entry is not None  # the update just added at `at_step`
      try:
        self.pool.planning_process.send(UpdateMixture(self.pool.generation, entry))
      except WorkerGone:  # not adopted: the pipeline plans again from its state, which holds the update
        return False
    return adopted
