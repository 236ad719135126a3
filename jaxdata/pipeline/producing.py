"""The contract of every way of making steps: `StepMaker`, the `Prepared` step it hands out, `END`.

A `Pipeline` holds one `StepMaker` and nothing else decides how its steps are made::

    Steps          a planning and an assembly (steps.py): planning here or in a planner
                   process, reading here or in reader processes
    PooledSteps    process Steps behind a worker pool, with the steps made here until its
                   processes are ready and after a fall back (pooled_steps.py)

Each takes the next step (`produce`: a `Prepared` step, or `END` once the
stream is over, again on every later call), restarts from a state
(`restart`: the next step produced is the one after that state), takes a
mixture update where its planning runs without planning again
(`adopt_updates`, if nothing from the update's step on is planned yet),
keeps its planning behind a step while updates come (`plan_before`),
reports where its steps are made (`execution`) and closes (`close`). Every maker
gives the same steps from the same state: the mode never changes a batch.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any, Final, Literal, Protocol

from jaxdata.checkpoint.state import PipelineState
from jaxdata.mixture.updates import MixtureUpdates
from jaxdata.pipeline.execution import Execution
from jaxdata.pipeline.step_stats import StepStats

__all__ = ["END", "ComingStep", "End", "Prepared", "StepMaker"]


class End(enum.Enum):
  """The type of `END`, the marker of the end of the stream (an enum: the type checker knows it is one value)."""

  END = "END"

  def __repr__(self) -> str:
    return "END"


END: Final = End.END


@dataclasses.dataclass
class Prepared:
  """One step, ready to hand out, with the pipeline state after it."""

  batch: dict[str, Any]
  state: PipelineState
  stats: StepStats


@dataclasses.dataclass(frozen=True)
class ComingStep:
  """A planned step on its way to an assembly: its shape, the state after it and its stats."""

  step: int
  num_rows: int  # rows this host holds
  seq_len: int
  state: PipelineState
  stats: StepStats
  closes_span: bool  # the span's last step: handing it out lets a planner process plan one more


class StepMaker(Protocol):
  """What a `Pipeline` asks of the way its steps are made."""

  @property
  def makes_steps_ahead(self) -> bool:
    """Whether steps are made ahead elsewhere (worker processes): then the pipeline starts no
    prefetch thread of its own."""
    ...

  def produce(self) -> Prepared | Literal[End.END]:
    """The next step, or `END` (and `END` again on every later call)."""
    ...

  def steps_ready(self) -> int:
    """Steps made ahead elsewhere (`makes_steps_ahead`) and ready to hand out now; 0 otherwise."""
    ...

  def steps_ahead_at_most(self) -> int:
    """How many steps are made ahead elsewhere at most (0 where none are)."""
    ...

  def restart(self, state: PipelineState) -> None:
    """Continue from `state`: the next step produced is the one after it."""
    ...

  def adopt_updates(self, updates: MixtureUpdates, at_step: int) -> bool:
    """Plans every later step with `updates` (the new one from `at_step` on), keeping all it made:
    True if no step from `at_step` on is planned yet (else nothing changes: the caller restarts)."""
    ...

  def plan_before(self, horizon: int | None) -> None:
    """Plans ahead no step that draws documents of step `horizon` or later (None: no bound)."""
    ...

  def execution(self) -> Execution:
    """Where the steps are made now."""
    ...

  def close(self, timeout_s: float) -> bool:
    """Stops what it started (threads, processes); False if a thread did not stop in `timeout_s`."""
    ...
