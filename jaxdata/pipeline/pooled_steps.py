"""`PooledSteps`: steps made by worker processes, and made here while they cannot.

It holds two `Steps`: `here` (planning and assembly in this process) and
`there` (a planner process, with this process's assembly or reader
processes), and the `WorkerPool` both process implementations use. The
pool's lifecycle decides which makes the next step::

    NOT_SPAWNED   here makes the first step (the first batch does not wait for process start-up), then spawn
    STARTING      here, until every worker has opened its files; then `there` starts from the state
                  after the last step made and the pool runs
    RUNNING       there; a restart starts it again from the given state (a dead worker: STARTING again)
    FELL_BACK     here, for good (the processes were not asked for and could not start)

Outputs and states are exactly those of `here` alone.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from typing import Literal

from jaxdata.checkpoint.state import PipelineState
from jaxdata.mixture.updates import MixtureUpdates
from jaxdata.pipeline.execution import Execution
from jaxdata.pipeline.producing import END, End, Prepared
from jaxdata.pipeline.steps import Steps
from jaxdata.pipeline.worker_handle import WorkerGone
from jaxdata.pipeline.worker_pool import Lifecycle, WorkerPool

__all__ = ["PooledSteps"]


class PooledSteps:
  """A step maker over a worker pool (see the module docstring)."""

  def __init__(self, pool: WorkerPool, here: Steps, there: Steps, start_state: PipelineState) -> None:
    self.pool, self.here, self.there = pool, here, there
    self.last_state = start_state  # after the last step made: where the processes start from
    self.updates: MixtureUpdates | None = None  # adopted since `last_state`'s step was planned
    self.from_processes = 0  # steps handed out that the processes made
    # Orders starts with steering: a start may run on the prefetch thread while the loop updates.
    self._control = threading.Lock()

  @property
  def makes_steps_ahead(self) -> bool:
    return self.there.makes_steps_ahead

  def produce(self) -> Prepared | Literal[End.END]:
    if self.pool.lifecycle is Lifecycle.NOT_SPAWNED:
      item = self._here()
      self.pool.guarded(self.pool.spawn)
      return item
    if self.pool.lifecycle is Lifecycle.STARTING and self.pool.guarded(self.pool.ready):
      self.pool.guarded(lambda: self._start(self.last_state))
    if self.pool.lifecycle is not Lifecycle.RUNNING:  # not ready yet, a worker being replaced, or fell back
      return self._here()
    item = self.there.produce()
    if item is not END:
      self.from_processes += 1
    return item

  def _here(self) -> Prepared | Literal[End.END]:
    item = self.here.produce()
    if item is not END:
      self.last_state = item.state
    return item

  def _start(self, state: PipelineState) -> None:
    if self.pool.replace_dead():
      return  # steps are made here until the new ones are ready
    with self._control:
      self.pool.new_generation()
      self.here.restart(state)  # what it planned and read ahead is dropped
      if self.updates is not None:  # adopted after `state` was made: the planner plans with them too
        state = state.with_updates(self.updates)
      try:
        self.there.restart(state)
      except WorkerGone:  # died since `replace_dead` looked: started again like it, no error (the state is set)
        if not self.pool.replace_dead():
          raise
        return
      self.pool.move(Lifecycle.RUNNING)

  def restart(self, state: PipelineState) -> None:
    """Continue from `state` (the pipeline's planner is already set to it)."""
    self.here.restart(state)
    self.last_state, self.updates = state, None  # (the updates are in the state)
    if self.pool.lifecycle is Lifecycle.RUNNING:
      self.pool.guarded(lambda: self._start(state))

  def plan_before(self, horizon: int | None) -> None:
    self.here.plan_before(horizon)
    with self._control:
      self.there.plan_before(horizon)

  def adopt_updates(self, updates: MixtureUpdates, at_step: int) -> bool:
    """To the planning that runs now: the planner process, or before it runs the steps made here."""
    with self._control:
      running = self.pool.lifecycle is Lifecycle.RUNNING
      adopted = (self.there if running else self.here).adopt_updates(updates, at_step)
      if adopted:
        self.updates = updates
      return adopted

  def steps_ready(self) -> int:
    """Steps the processes were given (none while they do not run: what they held was dropped)."""
    return self.there.steps_ready() if self.pool.lifecycle is Lifecycle.RUNNING else 0

  def steps_ahead_at_most(self) -> int:
    return self.there.steps_ahead_at_most()

  def execution(self) -> Execution:
    """Where the steps are made now (`Pipeline.execution`)."""
    if self.pool.lifecycle is Lifecycle.FELL_BACK:
      return dataclasses.replace(self.here.execution(), may_fall_back=True, fell_back=True)
    return Execution(
      processes=self.pool.names_of_processes,
      steps_from_processes=self.from_processes,
      steps_per_reader=self.there.assembly.steps_per_reader(),
      may_fall_back=self.pool.fall_back,
      fell_back=False,
      assembles_here=not self.makes_steps_ahead,
      read_thread=self.there.assembly.reads_on_thread(),
    )

  def close(self, timeout_s: float) -> bool:
    """Stops the processes, then this process's read thread (`timeout_s` in all)."""
    self.pool.close()
    deadline = time.monotonic() + timeout_s
    return self.there.close(timeout_s) and self.here.close(max(0.0, deadline - time.monotonic()))
