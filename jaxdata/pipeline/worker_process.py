"""The body of a pipeline worker process: a planner, or a reader that assembles into shared memory.

With n reader processes there are n + 1 of them (`StepMaking`). The planner plans every step
(planning is sequential and cheap) and sends spans of this host's pieces;
the main process forwards span w to reader w % n, which reads its
documents in one batched call and assembles each step into a free slot of
its shared memory ring. Planning, reading and assembly run on different
cores, and none of them holds the training process's GIL. Messages are
JSON over a pipe, one dataclass per kind (`jaxdata.pipeline.messages`); a
span's pieces follow their header as one raw int64 array (no pickle).

A worker is `python -m jaxdata.pipeline.worker_process FD`, FD one end of a
socket pair; its first message is {"pipeline": PipelineSpec.to_dict(),
"worker": WorkerSpec fields}: the pipeline's spec whole (config, split,
epoch, ...), so it opens exactly the parts the pipeline opened.
It imports neither jax nor the training script, so it starts in about the
time it takes to import NumPy and open the files.
"""

from __future__ import annotations

import abc
import functools
import json
import sys
import time
from collections.abc import Mapping
from multiprocessing.connection import Connection
from typing import Any

from jaxdata.config.pipeline_config import PipelineConfig
from jaxdata.pipeline.assembly import SpanReads
from jaxdata.pipeline.messages import (
  PLANNER,
  READER,
  Credit,
  Free,
  Message,
  PlanBefore,
  Ready,
  Setup,
  SpanPlanned,
  SpanToRead,
  Start,
  StepMade,
  Stop,
  UpdateMixture,
  WorkerError,
  WorkerSpec,
  message_from_json,
  send,
  slot_views,
)
from jaxdata.pipeline.pipeline_parts import Parts, open_parts, state_snapshot
from jaxdata.pipeline.planning import LocalPlanning
from jaxdata.pipeline.read_spans import (
  assemble,
  decode_span,
  encode_span,
)
from jaxdata.pipeline.shared_buffer import SharedBuffer
from jaxdata.pipeline.spec import PipelineSpec
from jaxdata.pipeline.stats import StatsRecorder

__all__: list[str] = []  # run as `python -m jaxdata.pipeline.worker_process`


def worker_main(argv: list[str]) -> None:
  """`python -m jaxdata.pipeline.worker_process FD`."""
  conn = Connection(int(argv[1]))
  try:
    setup = Setup.from_json(json.loads(conn.recv_bytes()))
  except EOFError:  # the main process went away before it sent anything
    return
  serve(conn, setup.pipeline, WorkerSpec(**setup.worker))


def serve(conn: Connection, pipeline: Mapping[str, Any], spec: WorkerSpec) -> None:
  """Runs a worker until told to stop or the main process goes away."""
  try:
    parts = open_parts(PipelineSpec.from_dict(pipeline))
    cfg = parts.cfg  # the config the pipeline's planner runs (the eval split's for split="eval")
  except Exception as error:  # noqa: BLE001 -- handed to the main process, which raises it
    send(conn, WorkerError.of(error, -1))
    return
  memory = None
  try:
    if spec.role == READER:
      memory = SharedBuffer(spec.memory_fd, spec.ring_bytes)  # the descriptor this process inherited
    send(conn, Ready(parts.fingerprint))
    role: _Planning | _Reading
    if spec.role == PLANNER:
      role = _Planning(conn, cfg, spec, parts)
    else:
      assert memory is not None  # a reader's ring, made above
      role = _Reading(conn, cfg, spec, parts, memory.buf)
    role.run()
  except (EOFError, BrokenPipeError, KeyboardInterrupt):  # the main process is gone or stopping
    pass
  finally:
    parts.reader.close()
    if memory is not None:
      memory.close()


class _Role(abc.ABC):
  """A worker's loop: take messages while there is nothing to do (or one is
  waiting), else do one unit of work. Messages of an older generation (from
  before the last start) are dropped."""

  def __init__(self, conn: Connection) -> None:
    self.conn = conn
    self.generation = -1  # nothing to do until the first "start"

  def run(self) -> None:
    while True:
      while self.waiting() or self.conn.poll():
        message = message_from_json(json.loads(self.conn.recv_bytes()))
        spans = isinstance(message, (SpanToRead, SpanPlanned))
        payload = self.conn.recv_bytes() if spans else b""  # always: a span's pieces follow its header
        if isinstance(message, Stop):
          return
        if isinstance(message, Start):
          self.generation = message.generation
          self.start(message)
        elif getattr(message, "generation", None) == self.generation:
          self.handle(message, payload)
      self.work()

  @abc.abstractmethod
  def waiting(self) -> bool:
    """Whether there is nothing to do until a message comes."""

  @abc.abstractmethod
  def start(self, message: Start) -> None:
    """Drop everything; go on from the message's state."""

  @abc.abstractmethod
  def handle(self, message: Message, payload: bytes) -> None:
    """A message of the current generation."""

  @abc.abstractmethod
  def work(self) -> None:
    """One unit of work."""


class _Planning(_Role):
  """Plans spans (`LocalPlanning`, as a pipeline planning in its own process does) while it holds
  credits; the stream's end or an error idles it."""

  def __init__(self, conn: Connection, cfg: PipelineConfig, spec: WorkerSpec, parts: Parts) -> None:
    super().__init__(conn)
    self.spec, self.planner = spec, parts.planner
    self.recorder = StatsRecorder(
      cfg.names, cfg.mixture.unit, parts.planner.stream, None, parts.record_starts, parts.pair_slots
    )
    snapshot = functools.partial(state_snapshot, parts.planner, parts.fingerprint, self.recorder)
    self.planning = LocalPlanning(parts.planner, self.recorder, spec.rows_for, snapshot, spec.read_ahead_tokens)
    self.credits = 0  # spans it may still send
    self.idle = True

  def waiting(self) -> bool:
    return self.idle or not self.credits or not self.planning.may_plan_ahead()

  def start(self, message: Start) -> None:
    state = message.state
    if state is None:
      raise ValueError("worker message: the planner's start holds no state")
    self.planner.restore(state.step, state.stream, state.packer)  # checked by the main process already
    self.recorder.restore(state.tokens_per_source)
    self.planning.restart(state)
    self.planning.plan_before(message.horizon)
    self.credits, self.idle = self.spec.spans_ahead, False

  def handle(self, message: Message, payload: bytes) -> None:
    if isinstance(message, Credit):
      self.credits += 1
    elif isinstance(message, PlanBefore):
      self.planning.plan_before(message.horizon)
    elif isinstance(message, UpdateMixture):
      # The main process sends an update only while its step is past every step this process may have
      # planned (the horizon it set): too late here is a broken promise, an error at the next step.
      if not self.planning.adopt_update_entry(message.update):
        late = RuntimeError(
          f"planner: a mixture update for step {message.update['step']} came after that step was planned"
        )
        send(self.conn, WorkerError.of(late, self.generation))
        self.idle = True

  def work(self) -> None:
    span = self.planning.next_span(asked=True)  # (waiting() holds it back at the horizon)
    assert span is not None  # asked for
    if isinstance(span, BaseException):  # handed to the main process, which raises it at its step
      send(self.conn, WorkerError.of(span, self.generation))
      self.idle = True
      return
    header, payload = encode_span(span.steps)
    send(self.conn, SpanPlanned(self.generation, header, span.states, span.stats, span.ended), payload)
    self.credits -= 1
    self.idle = span.ended


class _Reading(_Role):
  """Reads the spans it gets in turn (`SpanReads`, as this process's assembly does) and assembles their
  steps, in order, into free slots; with every slot full, it reads the next span meanwhile."""

  def __init__(self, conn: Connection, cfg: PipelineConfig, spec: WorkerSpec, parts: Parts, buffer: memoryview) -> None:
    super().__init__(conn)
    self.cfg, self.spec, self.buffer = cfg, spec, buffer
    self.layout = spec.step_layout  # what a slot holds
    self.reads = SpanReads(parts.reader, cfg.packing.fill_id, None)
    self.free: set[int] = set()
    self.failed = False  # a read or an assembly failed: idle until the main process starts it again

  def waiting(self) -> bool:
    return self.failed or not self.reads.held or (not self.free and not self.reads.may_read_ahead())

  def start(self, message: Start) -> None:
    self.free = set(range(self.spec.slots))
    self.reads.restart()
    self.failed = False

  def handle(self, message: Message, payload: bytes) -> None:
    if isinstance(message, SpanToRead):
      self.reads.accept(decode_span(message.steps, payload))
    elif isinstance(message, Free):
      self.free.add(message.slot)

  def work(self) -> None:
    try:
      if not self.free:
        self.reads.read_ahead()
        return
      item, read_s = self.reads.next_step()
      slot = min(self.free)
      started = time.perf_counter()
      views = slot_views(self.buffer, slot, self.spec.slot_bytes, item.host.num_rows, item.host.seq_len, self.layout)
      assemble(item, self.cfg.packing, self.layout, out=views)
    except Exception as error:  # noqa: BLE001 -- handed to the main process, which raises it at its step
      send(self.conn, WorkerError.of(error, self.generation))
      self.failed = True  # the main process restarts everything from the failed step
      return
    self.free.remove(slot)
    times = {"read": read_s, "assemble": time.perf_counter() - started}
    send(self.conn, StepMade(self.generation, item.host.step, slot, times))


if __name__ == "__main__":
  worker_main(sys.argv)
