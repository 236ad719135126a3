"""`WorkerPool`: a pipeline's worker processes (a planner, and any readers) and their lifecycle.

One pool serves both process implementations (`ProcessPlanning`,
`ReaderProcesses`): it spawns the processes, learns when each has opened
its files, replaces one that died, counts the (re)starts (the generation
every message carries) and, where the processes were not asked for, falls
back to making every step here::

  NOT_SPAWNED --spawn--> STARTING --all ready, started--> RUNNING
       |                   ^   |                             |
       |                   |   +--- a worker died at a (re)start
       +------+------------+-------------+-------------------+
              v  (a worker cannot start, and falling back is allowed)
          FELL_BACK   (final)
"""

from __future__ import annotations

import dataclasses
import enum
import warnings
import weakref
from collections.abc import Callable, Sequence
from typing import TypeVar

from jaxdata.checkpoint.fingerprint import OrderFingerprint
from jaxdata.config.pipeline_config import PipelineConfig
from jaxdata.errors import DatasetError, WorkerStartError
from jaxdata.pipeline.messages import PLANNER, READER, Ready, WorkerError, WorkerSpec, shape_key
from jaxdata.pipeline.read_spans import RowsHere
from jaxdata.pipeline.shared_buffer import SharedBuffer
from jaxdata.pipeline.spec import PipelineSpec
from jaxdata.pipeline.worker_handle import WorkerHandle, close_all, raised

__all__ = ["Lifecycle", "WorkerPool"]

STARTS_BEFORE_GIVING_UP = 3  # a worker that exits before it is ready this many times in a row is not started again

_Result = TypeVar("_Result")


class Lifecycle(enum.Enum):
  """Where a `WorkerPool` stands, and so who makes the next step (see the module docstring)."""

  NOT_SPAWNED = "not spawned"  # steps are made here; the workers start after the first
  STARTING = "starting"  # spawned, not every worker ready (or one being replaced): steps are made here
  RUNNING = "running"  # the workers make the steps
  FELL_BACK = "fell back"  # the workers could not start: every step is made here, for good


MOVES: dict[Lifecycle, frozenset[Lifecycle]] = {
  Lifecycle.NOT_SPAWNED: frozenset({Lifecycle.STARTING, Lifecycle.FELL_BACK}),
  Lifecycle.STARTING: frozenset({Lifecycle.STARTING, Lifecycle.RUNNING, Lifecycle.FELL_BACK}),
  Lifecycle.RUNNING: frozenset({Lifecycle.RUNNING, Lifecycle.STARTING, Lifecycle.FELL_BACK}),
  Lifecycle.FELL_BACK: frozenset(),
}


class WorkerPool:
  """The planner process (`workers[0]`) and the reader processes, opened from the pipeline's `spec`.

  Args:
    spec: the pipeline's spec (every worker opens its parts from it).
    workers: each worker's own spec, the planner first.
    fingerprint: the pipeline's order; a worker that opens files giving another is an error.
    fall_back: a worker that cannot start (`WorkerStartError`) leaves every step to this process,
      with a warning, instead of failing them.
  """

  @classmethod
  def for_host(
    cls,
    spec: PipelineSpec,
    cfg: PipelineConfig,
    readers: int,
    rows_here: RowsHere,
    slots: int,
    read_ahead_tokens: int,
    *,
    fingerprint: OrderFingerprint,
    fall_back: bool,
  ) -> WorkerPool:
    """A planner and `readers` reader processes for this host's rows (`rows_here`), each reader with a
    ring of `slots` steps; `cfg` is the config the parts run (`Parts.cfg`: the eval split's for split="eval")."""
    rows_by_shape = {shape_key(r, seq_len): rows_here(r, seq_len).tolist() for r, seq_len in cfg.row_shapes()}
    layout = cfg.layout
    slot_bytes = max(layout.step_bytes(len(rows_here(r, seq_len)), seq_len) for r, seq_len in cfg.row_shapes())
    slots = max(slots, 2)  # one being copied out, one being made
    planner = WorkerSpec(PLANNER, 0, readers, -1, slots, slot_bytes, rows_by_shape, read_ahead_tokens, layout.to_json())
    workers = [planner] + [dataclasses.replace(planner, role=READER, index=i) for i in range(readers)]
    return cls(spec, workers, fingerprint, fall_back)

  def __init__(
    self,
    spec: PipelineSpec,
    workers: Sequence[WorkerSpec],
    fingerprint: OrderFingerprint,
    fall_back: bool,
  ) -> None:
    self.spec, self.workers, self.fall_back = spec, list(workers), fall_back
    self.fingerprint = fingerprint
    self.handles: list[WorkerHandle] = []  # the planner, then the readers; started after the first step
    # At exit too: the workers stop and the shared memory is released.
    self._finalizer = weakref.finalize(self, close_all, self.handles)
    self.lifecycle = Lifecycle.NOT_SPAWNED
    self.generation = 0  # the (re)starts: a message of an older one is dropped
    self.unexpected_exit: RuntimeError | None = None  # a worker exited while starting, without an error
    self.failed_starts = 0  # in a row: workers that exited before they were ready

  @property
  def planning_process(self) -> WorkerHandle:
    return self.handles[0]

  @property
  def readers(self) -> list[WorkerHandle]:
    return self.handles[1:]

  @property
  def names_of_processes(self) -> tuple[str, ...]:
    return tuple(worker.name for worker in self.workers)

  def move(self, to: Lifecycle) -> None:
    if to not in MOVES[self.lifecycle]:
      raise RuntimeError(f"worker pool: {self.lifecycle.value} -> {to.value} is not a transition of its lifecycle")
    self.lifecycle = to

  def spawn(self) -> None:
    """Starts the processes (once; the first step is made here before, so that their start-up does not
    compete with it)."""
    if self.lifecycle is not Lifecycle.NOT_SPAWNED:
      return
    try:
      for worker in self.workers:
        memory = SharedBuffer.create(worker.ring_bytes) if worker.role == READER else None
        try:
          self.handles.append(WorkerHandle(self.spec, worker, memory))
        except BaseException:  # re-raised: the ring no handle holds is released here
          if memory is not None:
            memory.close()
          raise
    except BaseException:  # re-raised: the workers started so far are stopped
      close_all(self.handles)
      raise
    self.move(Lifecycle.STARTING)

  def guarded(self, step: Callable[[], _Result]) -> _Result | bool:
    """Runs a start-up step (spawn, check readiness, start); a worker that cannot start raises, or
    where falling back is allowed leaves the steps to this process (False)."""
    try:
      return step()
    except WorkerStartError as error:
      if not self.fall_back:
        raise
      warnings.warn(
        f"jaxdata: {error}; planning in this process instead (as with StepMaking(planning='here'))",
        RuntimeWarning,
        stacklevel=3,
      )
      self.move(Lifecycle.FELL_BACK)
      close_all(self.handles)
      return False

  def ready(self) -> bool:
    """Whether every worker has opened its files; raises a worker's error (once: a worker that exited
    is started again on the next call)."""
    errors = []
    for i, handle in enumerate(self.handles):
      while not handle.ready:
        try:
          message = handle.receive_ready()
        except RuntimeError as exited:  # start it again
          if not handle.failed:  # (one that sent its error exits as told)
            self.unexpected_exit = exited
            self.failed_starts += 1
            if self.failed_starts >= STARTS_BEFORE_GIVING_UP:
              self.failed_starts = 0  # raised once; the next call starts it again (a retry)
              raise WorkerStartError(
                f"{exited} before it was ready, {STARTS_BEFORE_GIVING_UP} times in a row"
              ) from None
          self.handles[i] = handle.respawned()
          break
        if message is None:
          break
        if isinstance(message, WorkerError):
          errors.append(raised(message))
          handle.failed = True
          break
        if isinstance(message, Ready):
          self.failed_starts = 0
          if message.fingerprint != self.fingerprint:
            raise DatasetError(
              "a dataset changed while the pipeline started: its worker process "
              "opened files that order batches differently"
            )
          handle.ready = True
    if errors:  # every worker's message was read: the next call respawns those that exited
      raise errors[0]
    return all(handle.ready for handle in self.handles)

  def new_generation(self) -> None:
    """A (re)start: every message of an older generation is dropped from now on."""
    self.generation += 1

  def replace_dead(self) -> bool:
    """Starts again every worker that died (killed, out of memory); True if one did: the pool is then
    starting again, and steps are made here until it is ready."""
    dead = [i for i, handle in enumerate(self.handles) if handle.process.poll() is not None]
    for i in dead:
      self.handles[i] = self.handles[i].respawned()
    if dead:
      self.move(Lifecycle.STARTING)
    return bool(dead)

  def close(self) -> None:
    """Stops every worker and releases the shared memory."""
    self._finalizer()
