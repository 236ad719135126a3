"""`Execution`: where a pipeline's steps are made, as a snapshot for logs and checks.

>>> Execution(processes=("jaxdata planner",), steps_from_processes=3, steps_per_reader=(), may_fall_back=True,
...           fell_back=False, assembles_here=True, read_thread=False).planner_process
True
"""

from __future__ import annotations

import dataclasses
import warnings

__all__ = ["PLANNINGS", "Execution", "StepMaking", "asked_making"]


@dataclasses.dataclass(frozen=True)
class Execution:
  """How a `Pipeline` runs now (`Pipeline.execution()`); the batches never depend on it.

  Attributes:
    processes: its worker processes by name ("jaxdata planner", "jaxdata reader 0", ...);
      empty when everything runs in this process (or after a fall back).
    steps_from_processes: steps handed out that those processes made (planned, or read and assembled).
    steps_per_reader: of those, how many each reader process made (empty without readers).
    may_fall_back: the planner process is the default, not asked for: if it cannot run, planning goes
      on in this process with a warning (asked for, its failure is an error).
    fell_back: it could not run; every step is now made here.
    assembles_here: this process reads and assembles the steps (by its prefetch thread, if any).
    read_thread: reads from disk in this process run on a thread of their own, a read span ahead.
    updates_adopted: mixture updates that reached the planning with nothing made ahead dropped.
    updates_replanned: mixture updates for a step already planned: the steps made ahead were planned again.
  """

  processes: tuple[str, ...]
  steps_from_processes: int
  steps_per_reader: tuple[int, ...]
  may_fall_back: bool
  fell_back: bool
  assembles_here: bool
  read_thread: bool
  updates_adopted: int = 0
  updates_replanned: int = 0

  @property
  def planner_process(self) -> bool:
    """Whether a process of its own plans the steps."""
    return "jaxdata planner" in self.processes


PLANNINGS = ("auto", "here", "process")


@dataclasses.dataclass(frozen=True)
class StepMaking:
  """Where a `Pipeline` makes its steps, on two axes; the batches and states never depend on it.

  Attributes:
    planning: "here" (this process, on its prefetch thread), "process" (a planner process of its
      own, which imports no jax; a failure to start it is an error) or "auto" (the default: a planner
      process with a mesh on >= PLANNER_PROCESS_MIN_CORES usable cores, falling back to here with a
      warning if it cannot start; here otherwise).
    reader_processes: processes that read and assemble the steps into shared memory (each up to
      `prefetch` + 1 steps ahead); 0: this process reads and assembles. They need the planner
      process: "auto" then means "process".

  >>> StepMaking("process", reader_processes=2).planner_process_asked
  True
  >>> StepMaking("here", reader_processes=1)
  Traceback (most recent call last):
  ...
  ValueError: reader_processes: reader processes take their spans from a planner process; use planning='process' (or 'auto'), got planning='here'
  """

  planning: str = "auto"
  reader_processes: int = 0

  def __post_init__(self) -> None:
    if self.planning not in PLANNINGS:
      raise ValueError(f"planning: must be one of {', '.join(PLANNINGS)}, got {self.planning!r}")
    readers = self.reader_processes
    if isinstance(readers, bool) or not isinstance(readers, int) or readers < 0:
      raise ValueError(f"reader_processes: must be an int >= 0, got {readers!r}")
    if readers and self.planning == "here":
      raise ValueError(
        "reader_processes: reader processes take their spans from a planner process; use "
        f"planning='process' (or 'auto'), got planning={self.planning!r}"
      )

  @property
  def planner_process_asked(self) -> bool:
    """Whether a planner process was asked for (then a failure to start it is an error, not a fall back)."""
    return self.planning == "process" or self.reader_processes > 0

  @classmethod
  def of(cls, making: StepMaking | str) -> StepMaking:
    """A `StepMaking`, or its planning alone ("auto", "here", "process")."""
    return making if isinstance(making, StepMaking) else cls(making)


def asked_making(making: StepMaking | str, workers: int | None, planner_process: bool | None) -> StepMaking:
  """The `StepMaking` asked for, also by the deprecated `workers=` / `planner_process=`."""
  if workers is None and planner_process is None:
    return StepMaking.of(making)
  if making != "auto":
    raise ValueError("making: give it alone, without the deprecated workers= or planner_process=")
  if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 0):
    raise ValueError(f"workers: must be an int >= 0, got {workers!r}")
  if planner_process is not None and not isinstance(planner_process, bool):
    raise ValueError(f"planner_process: must be True, False or None, got {planner_process!r}")
  readers = workers or 0
  planning = "process" if readers or planner_process else ("here" if planner_process is False else "auto")
  new = StepMaking(planning, readers)
  warnings.warn(
    f"Pipeline(workers=, planner_process=) is deprecated: use making={new!r}",
    DeprecationWarning,
    stacklevel=3,
  )
  return new
