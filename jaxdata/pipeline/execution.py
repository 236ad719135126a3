"""`Execution`: where a pipeline's steps are made, as a snapshot for logs and checks.

>>> Execution(processes=("jaxdata planner",), steps_from_processes=3, steps_per_reader=(), may_fall_back=True,
...           fell_back=False, assembles_here=True, read_thread=False).planner_process
True
"""

from __future__ import annotations

import dataclasses

__all__ = ["Execution"]


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
