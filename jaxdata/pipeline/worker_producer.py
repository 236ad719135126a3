"""`WorkerProducer`: steps from worker processes, through shared memory.

Planning, reading, decompression and assembly leave the training process:
one planning process and `count` reading processes (spawned, so they hold
no copy of jax or the caller's state; see `jaxdata.pipeline.worker_process`). The
main process forwards the planner's spans to the readers in turn, copies
each step's rows out of shared memory and makes the batch (global
`jax.Array`s or NumPy), so the training thread keeps its GIL::

    planner:   plan spans of steps (state + stats per step)  --span w-->  main  --span w-->  reader w % count
    reader:    read the span's documents, assemble step by step into its slot ring  --slot-->  main
    main:      step s: its state and stats (from the planner), its rows (from its reader's slot, copied out)

With no readers (`Pipeline(planner_process=True)`, `workers=0`) only the
planner is a process: the main process reads and assembles each span
itself, on its prefetch thread, while the planner plans the next one::

    main:      span w: read its documents (one call per dataset), assemble step s
               (remote shards: each span's are requested as it arrives, so they download ahead;
               flat files in a store: each span is read a span ahead on the read thread)

Until every worker has opened its files, steps are made in process (the
first batch does not wait for process start-up). Then the workers start from
the state after the last step made, and a restart (`set_state`, an error)
starts them again from the given state: outputs and states are exactly
those of the in-process path.
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import enum
import json
import threading
import time
import warnings
import weakref
from collections.abc import Callable
from typing import Any, Literal

import numpy as np

from jaxdata.errors import CheckpointError, ConfigError, DatasetError, InputFormatError, WorkerStartError
from jaxdata.mixture.updates import MixtureUpdates
from jaxdata.pipeline.execution import Execution
from jaxdata.pipeline.messages import (
  Credit,
  Free,
  PlanBefore,
  PlannedSpan,
  Ready,
  SpanToRead,
  Start,
  StepMade,
  UpdateMixture,
  WorkerError,
)
from jaxdata.pipeline.planner import encoded_state, with_updates
from jaxdata.pipeline.producing import END, End, Prepared
from jaxdata.pipeline.read_spans import HostStep, ReadStep, decode_span, read_span
from jaxdata.pipeline.shared_buffer import SharedBuffer
from jaxdata.pipeline.spec import PipelineSpec
from jaxdata.pipeline.step_producer import StepProducer
from jaxdata.pipeline.step_stats import StepStats
from jaxdata.pipeline.worker_handle import WorkerHandle, close_all
from jaxdata.pipeline.worker_process import PLANNER, READER, WorkerSpec, slot_views
from jaxdata.transforms.pieces import Pieces

__all__ = ["Phase", "WorkerProducer"]

STARTS_BEFORE_GIVING_UP = 3  # a worker that exits before it is ready this many times in a row is not started again

_ERRORS: dict[str, type[Exception]] = {
  e.__name__: e
  for e in (
    DatasetError,
    ConfigError,
    CheckpointError,
    InputFormatError,
    ValueError,
    IndexError,
    KeyError,
    OSError,
    RuntimeError,
    MemoryError,
  )
}


class Phase(enum.Enum):
  """Where a `WorkerProducer` stands, and so who makes the next step::

  NOT_SPAWNED --spawn--> STARTING --all ready, started--> RUNNING
       |                   ^   |                             |
       |                   |   +--- a worker died at a (re)start
       +------+------------+-------------+-------------------+
              v  (fall_back: a worker cannot start)
          FELL_BACK   (final)
  """

  NOT_SPAWNED = "not spawned"  # steps are made here; the workers start after the first
  STARTING = "starting"  # spawned, not every worker ready (or one being replaced): steps are made here
  RUNNING = "running"  # the workers make the steps
  FELL_BACK = "fell back"  # the workers could not start: every step is made here, for good


_MOVES: dict[Phase, frozenset[Phase]] = {
  Phase.NOT_SPAWNED: frozenset({Phase.STARTING, Phase.FELL_BACK}),
  Phase.STARTING: frozenset({Phase.STARTING, Phase.RUNNING, Phase.FELL_BACK}),
  Phase.RUNNING: frozenset({Phase.RUNNING, Phase.STARTING, Phase.FELL_BACK}),
  Phase.FELL_BACK: frozenset(),
}


def _raised(message: WorkerError) -> Exception:
  """A worker's error as the exception it was (of a kind jaxdata raises; else a RuntimeError)."""
  return _ERRORS.get(message.type, RuntimeError)(message.message)


@dataclasses.dataclass(frozen=True)
class _Coming:
  """A planned step: which reader makes it, its state and stats."""

  step: int
  reader: int
  num_rows: int
  seq_len: int
  state: dict[str, Any]
  stats: StepStats
  closes_span: bool  # the span's last step: handing it out gives the planner a credit
  span: _SpanInProcess | None = None  # without readers: the span this process reads


@dataclasses.dataclass
class _SpanInProcess:
  """A planner's span that this process reads (at its first step) and assembles."""

  steps: list[HostStep]
  items: collections.deque[ReadStep] | None = None
  read_s: float = 0.0  # per step
  read: concurrent.futures.Future | None = None  # its read on the read thread, once started


class WorkerProducer:
  """Produces `Prepared` steps like `StepProducer`, from worker processes.

  `in_process` makes the steps until the workers are ready; it shares the
  pipeline's planner, so its states are the pipeline's. Every worker opens
  its parts from `spec`, the pipeline's own, and makes `in_process`'s
  steps: its config (the eval split's for split="eval"), rows and read span.
  With `fall_back`, workers that cannot start (`WorkerStartError`) leave
  every step to `in_process`, with a warning, instead of failing them.
  """

  def __init__(
    self,
    spec: PipelineSpec,
    in_process: StepProducer,
    *,
    count: int,
    fingerprint: dict[str, Any],
    slots: int,
    start_state: dict[str, Any],
    fall_back: bool = False,
  ) -> None:
    if count < 0:
      raise ValueError(f"workers: must be >= 0, got {count}")
    slots = max(slots, 2)  # one being copied out, one being made
    # The config, stats recorder, rows and read span are the in-process producer's: the workers make its steps.
    cfg, rows_here = in_process.cfg, in_process.rows_here
    self.in_process, self.recorder, self.fingerprint = in_process, in_process.recorder, fingerprint
    rows_by_shape = {f"{rows}x{seq_len}": rows_here(rows, seq_len).tolist() for rows, seq_len in cfg.row_shapes()}
    self.slot_tokens = max(len(r) * int(key.split("x")[1]) for key, r in rows_by_shape.items())

    self.cfg, self.spec = cfg, spec
    read_span_limit = in_process.read_ahead_tokens
    self.specs = [WorkerSpec(PLANNER, 0, count, -1, slots, self.slot_tokens, rows_by_shape, read_span_limit)]
    self.specs += [dataclasses.replace(self.specs[0], role=READER, index=i) for i in range(count)]
    self.handles: list[WorkerHandle] = []  # the planner, then the readers; started after the first step
    # At exit too: the workers stop and the shared memory is released.
    self._finalizer = weakref.finalize(self, close_all, self.handles)
    self.generation = 0
    self.next_step = start_state["step"]
    self.last_state = start_state  # after the last step made: where workers start from
    self.phase = Phase.NOT_SPAWNED
    self.coming: collections.deque[_Coming | BaseException | Literal[End.END]] = collections.deque()
    # Spans that wait on a store's byte ranges are read a span ahead on the read thread
    # (reads from disk stay on the prefetch thread: a read thread there cost a training loop more of the GIL).
    self.reads_ahead = in_process.read_thread is not None and in_process.reader.reads_ranges_from_store
    self.unread: collections.deque[_SpanInProcess] = collections.deque()  # forwarded, their reads not started
    self.reading: _SpanInProcess | None = None  # read ahead (or being read), not assembled from yet
    self.spans = 0  # forwarded since the last start: the next goes to reader spans % count
    self.from_workers = 0  # steps handed out that workers made
    self.per_reader = [0] * count  # of those, how many each reader made
    self.unexpected_exit: RuntimeError | None = None  # a worker exited while starting, without an error
    self.failed_starts = 0  # in a row: workers that exited before they were ready
    self.fall_back = fall_back
    # Mixture updates reach the planner process as messages: `horizon` (None: no bound) is where
    # its planning stops, `planned_below` the most it can have reached in this generation, and
    # `updates` the latest updates (sent with every start). `_control` orders those messages with starts.
    self.horizon: int | None = None
    self.planned_below: int | None = None
    self.updates: MixtureUpdates | None = None
    self._control = threading.Lock()

  @property
  def planner(self) -> WorkerHandle:
    return self.handles[0]

  @property
  def readers(self) -> list[WorkerHandle]:
    return self.handles[1:]

  @property
  def makes_steps_ahead(self) -> bool:
    """Whether reader processes make the steps ahead (else this process
    makes them, on its prefetch thread, from the planner's spans)."""
    return len(self.specs) > 1

  def _move(self, to: Phase) -> None:
    if to not in _MOVES[self.phase]:
      raise RuntimeError(f"worker producer: {self.phase.value} -> {to.value} is not a transition of its lifecycle")
    self.phase = to

  def spawn(self) -> None:
    """Starts the worker processes (once; the first step is made in process
    before, so that their start-up does not compete with it)."""
    if self.phase is not Phase.NOT_SPAWNED:
      return
    try:
      for spec in self.specs:
        memory = None
        if spec.role == READER:
          memory = SharedBuffer.create(spec.ring_bytes)
          spec = dataclasses.replace(spec, memory_fd=memory.fd)
        self.handles.append(WorkerHandle(self.spec, spec, memory))
    except BaseException:  # re-raised: the workers started so far are stopped
      close_all(self.handles)
      raise
    self._move(Phase.STARTING)

  def execution(self) -> Execution:
    """Where the steps are made now (`Pipeline.execution`)."""
    if self.phase is Phase.FELL_BACK:
      return dataclasses.replace(self.in_process.execution(), may_fall_back=True, fell_back=True)
    return Execution(
      processes=tuple(spec.name for spec in self.specs),
      steps_from_processes=self.from_workers,
      steps_per_reader=tuple(self.per_reader),
      may_fall_back=self.fall_back,
      fell_back=False,
      assembles_here=not self.makes_steps_ahead,
      read_thread=not self.makes_steps_ahead and self.in_process.read_thread is not None,
    )

  def steps_ready(self) -> int:
    """Steps the reader processes were given and not yet handed out (made, or being made)."""
    return min(self.steps_ahead_at_most(), sum(isinstance(c, _Coming) for c in self.coming))

  def steps_ahead_at_most(self) -> int:
    """Every reader's slots."""
    return self.specs[0].slots * (len(self.specs) - 1)

  def produce(self) -> Prepared | Literal[End.END]:
    if self.phase is Phase.FELL_BACK:
      return self._produce_here()
    if self.phase is Phase.NOT_SPAWNED:
      item = self._produce_here()
      self._starting(self.spawn)
      return item
    if self.phase is Phase.STARTING and self._starting(self.workers_ready):
      self._starting(lambda: self._start(self.last_state))
    if self.phase is not Phase.RUNNING:  # not ready yet (or a worker that died is being replaced)
      return self._produce_here()
    self._forward(wait=False)  # spans that arrived go to their readers now, to be read ahead
    while not self.coming:
      self._forward(wait=True)
    coming = self.coming.popleft()
    if coming is END:
      self.coming.appendleft(END)
      return END
    if isinstance(coming, BaseException):
      raise coming
    return self._take(coming)

  def restart(self, state: dict[str, Any]) -> None:
    """Continue from `state` (the pipeline's planner is already set to it)."""
    self.in_process.restart(state)
    self.last_state, self.next_step = state, state["step"]
    self.updates = None  # in the state
    if self.phase is Phase.RUNNING:
      self._starting(lambda: self._start(state))

  def plan_before(self, horizon: int | None) -> None:
    """As `StepProducer.plan_before`, in the planner process too."""
    self.in_process.plan_before(horizon)
    with self._control:
      if horizon == self.horizon:
        return
      self.horizon = horizon
      if self.phase is Phase.RUNNING:
        self.planner.send(PlanBefore(self.generation, horizon))
        self._planned_up_to(horizon)

  def adopt_updates(self, updates: MixtureUpdates, at_step: int) -> bool:
    """Sends `updates` to the planner process while it cannot have planned `at_step` (its horizon
    is at or below it); before the processes run, the steps made here take them (`StepProducer`)."""
    with self._control:
      if self.phase is not Phase.RUNNING:
        adopted = self.in_process.adopt_updates(updates, at_step)
      else:
        adopted = self.planned_below is not None and at_step >= self.planned_below
        if adopted:
          entry = updates.to_json_at(at_step)
          assert entry is not None  # the update just added at `at_step`
          self.planner.send(UpdateMixture(self.generation, entry))
      if adopted:
        self.updates = updates
      return adopted

  def _planned_up_to(self, horizon: int | None) -> None:
    """The planner of this generation may now plan up to `horizon` (None: anywhere)."""
    if horizon is None or self.planned_below is None:
      self.planned_below = None
    else:
      self.planned_below = max(self.planned_below, horizon)

  def close(self, timeout_s: float) -> bool:
    """Stops the workers and this process's read thread (see `StepProducer.close`)."""
    self._finalizer()
    return self.in_process.close(timeout_s)

  def _starting(self, step: Callable[[], Any]) -> Any:
    """Runs a start-up step (spawn, check readiness, start); a worker that
    cannot start raises, or with `fall_back` leaves the steps to this process."""
    try:
      return step()
    except WorkerStartError as error:
      if not self.fall_back:
        raise
      warnings.warn(
        f"jaxdata: {error}; planning in this process instead (as with planner_process=False)",
        RuntimeWarning,
        stacklevel=2,
      )
      self._move(Phase.FELL_BACK)
      close_all(self.handles)
      return False

  def _produce_here(self) -> Prepared | Literal[End.END]:
    item = self.in_process.produce()
    if isinstance(item, Prepared):
      self.last_state, self.next_step = item.state, item.stats.step + 1
    return item

  def _take(self, coming: _Coming) -> Prepared:
    """Step `coming` from its reader's slot (copied out, then the slot is freed)."""
    if coming.span is not None:
      return self._take_in_process(coming, coming.span)
    handle = self.readers[coming.reader]
    while True:
      message = handle.receive()
      if getattr(message, "generation", None) != self.generation:
        continue  # from before the last (re)start: its slots were freed by it
      if isinstance(message, WorkerError):
        raise _raised(message)
      if not isinstance(message, StepMade):
        raise RuntimeError(f"{handle.name}: sent {message} where a step was expected")
      if message.step == coming.step:
        break
      handle.send(Free(self.generation, message.slot))
    assert handle.memory is not None  # a reader's ring
    views = slot_views(handle.memory.buf, message.slot, self.slot_tokens, coming.num_rows, coming.seq_len)
    # A copy, then the slot is free: on CPU a jax.Array may alias the NumPy memory it was made from.
    started = time.perf_counter()
    arrays = self.in_process.out_for(coming.num_rows, coming.seq_len)
    if arrays is None:
      arrays = {name: np.empty_like(view) for name, view in views.items()}
    for name, view in views.items():
      np.copyto(arrays[name], view)
    handle.send(Free(self.generation, message.slot))
    if coming.closes_span:
      self.planner.send(Credit(self.generation))
    stats = coming.stats
    stats.time_s.update(message.time_s)
    for timer, seconds in stats.time_s.items():
      if timer != "assemble":  # added below, with this process's share
        self.recorder.timers[timer] += seconds
    self.recorder.time(stats, "assemble", stats.time_s["assemble"] + time.perf_counter() - started)
    self.next_step += 1
    self.from_workers += 1
    self.per_reader[coming.reader] += 1
    return Prepared(arrays, coming.state, stats)

  def _take_in_process(self, coming: _Coming, span: _SpanInProcess) -> Prepared:
    """Step `coming` read (with the rest of its span, at its first step) and assembled here."""
    if span.items is None:
      if span.read is not None:
        items, read_s = span.read.result()
        self.reading = None
        self._read_next_span()
      else:
        started = time.perf_counter()
        items = read_span(self.in_process.reader, span.steps, self.cfg.packing.fill_id)
        read_s = time.perf_counter() - started
      span.items, span.read_s = collections.deque(items), read_s / len(span.steps)
    item = span.items.popleft()
    started = time.perf_counter()
    arrays = self.in_process.assemble_step(item)
    if coming.closes_span:
      self.planner.send(Credit(self.generation))
    stats = coming.stats
    for timer, seconds in stats.time_s.items():  # the planner's
      self.recorder.timers[timer] += seconds
    self.recorder.time(stats, "read", span.read_s)
    self.recorder.time(stats, "assemble", time.perf_counter() - started)
    self.next_step += 1
    self.from_workers += 1
    return Prepared(arrays, coming.state, stats)

  def _forward(self, wait: bool) -> None:
    """Takes the planner's messages (waiting for one if `wait`), forwards
    its spans to the readers and queues their steps."""
    while True:
      message = self.planner.receive() if wait else self.planner.receive_ready()
      if message is None:
        return
      wait = False
      payload = self.planner.payload() if isinstance(message, PlannedSpan) else b""
      if getattr(message, "generation", None) != self.generation:
        continue
      if isinstance(message, WorkerError):
        self.coming.append(_raised(message))
        continue
      if not isinstance(message, PlannedSpan):
        raise RuntimeError(f"{self.planner.name}: sent {message} where a span was expected")
      steps = message.steps
      if steps:
        reader, span = -1, None
        if self.readers:
          reader = self.spans % len(self.readers)
          self.readers[reader].send(SpanToRead(self.generation, steps), payload)
        else:
          span = _SpanInProcess(decode_span(steps, payload))
          if self.in_process.reader.remote:  # its shards are fetched from now on, while earlier spans are read
            self.in_process.reader.fetch_ahead(Pieces.concatenate([s.pieces for s in span.steps]))
          if self.reads_ahead:
            self.unread.append(span)
            self._read_next_span()
        self.spans += 1
        for i, (header, state, stats) in enumerate(zip(steps, message.states, message.stats)):
          self.coming.append(
            _Coming(
              header["step"],
              reader,
              header["num_rows"],
              header["seq_len"],
              state,
              StepStats.from_json(stats),
              i == len(steps) - 1,
              span,
            )
          )
      if message.ended:
        self.coming.append(END)

  def _read_next_span(self) -> None:
    """Starts reading the next forwarded span on the read thread, one
    span ahead of the one being assembled (at most two spans are held)."""
    if self.reading is None and self.unread:
      self.reading = self.unread.popleft()
      assert self.in_process.read_thread is not None  # (reads_ahead)
      self.reading.read = self.in_process.read_thread.submit(self.reading.steps)

  def _drop_spans(self) -> None:
    """Forgets the spans planned before a (re)start; a read not begun yet is skipped."""
    if self.reading is not None and self.reading.read is not None:
      self.reading.read.cancel()
    self.reading = None
    self.unread.clear()

  def workers_ready(self) -> bool:
    """Whether every worker has opened its files; raises a worker's error
    (once: a worker that exited is started again on the next call)."""
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
          errors.append(_raised(message))
          handle.failed = True
          break
        if isinstance(message, Ready):
          self.failed_starts = 0
          if message.fingerprint != json.loads(json.dumps(self.fingerprint)):
            raise DatasetError(
              "a dataset changed while the pipeline started: its worker process "
              "opened files that order batches differently"
            )
          handle.ready = True
    if errors:  # every worker's message was read: the next call respawns those that exited
      raise errors[0]
    return all(handle.ready for handle in self.handles)

  def _start(self, state: dict[str, Any]) -> None:
    dead = [i for i, handle in enumerate(self.handles) if handle.process.poll() is not None]
    for (
      i
    ) in dead:  # a worker that died (killed, out of memory) is replaced; until it is ready, steps are made in process
      self.handles[i] = self.handles[i].respawned()
    if dead:
      self._move(Phase.STARTING)
      return
    with self._control:
      self.generation += 1
      self.in_process.restart(state)
      self.coming.clear()
      self._drop_spans()
      self.spans = 0
      for reader in self.readers:
        reader.send(Start(self.generation))
      if self.updates is not None:  # adopted after `state` was made: it plans with them too
        state = with_updates(state, self.updates)
      portable = json.loads(json.dumps(encoded_state(state)))
      self.planner.send(Start(self.generation, portable, self.horizon))
      self.planned_below = self.horizon
      self._move(Phase.RUNNING)
