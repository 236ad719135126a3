"""`ReaderProcesses`: the `Assembly` of reader processes, which read and assemble into shared memory.

Span w goes to reader w % n, which reads its documents in one batched call
and assembles each step into a free slot of its ring; this process copies
each step's rows out and frees the slot, so the training thread keeps its
GIL::

    accept(span w)  --SpanToRead(g, steps) + pieces-->  reader w % n
    take(step s)    <--StepMade(g, s, slot, times)--    its reader   (copied out, then Free(g, slot))
    restart()       --Start(g)-->                       every reader: drop everything, every slot free
"""

from __future__ import annotations

import collections
import time

import numpy as np

from jaxdata.pipeline.assembly import OutputRows
from jaxdata.pipeline.messages import Free, SpanToRead, Start, StepMade, WorkerError, slot_views
from jaxdata.pipeline.producing import ComingStep
from jaxdata.pipeline.read_spans import StepSpan, encode_span
from jaxdata.pipeline.stats import StatsRecorder
from jaxdata.pipeline.worker_handle import raised
from jaxdata.pipeline.worker_pool import WorkerPool

__all__ = ["ReaderProcesses"]


class ReaderProcesses:
  """The pool's reader processes as an assembly (see the module docstring)."""

  makes_steps_ahead = True

  def __init__(self, pool: WorkerPool, recorder: StatsRecorder, rows: OutputRows) -> None:
    self.pool, self.recorder, self.rows = pool, recorder, rows
    self.reader_spec = pool.workers[1]  # every reader's spec but its index
    self.spans = 0  # accepted since the last start: the next goes to reader spans % count
    self.readers_of_steps: collections.deque[tuple[int, bool]] = collections.deque()  # (reader, closes a span)
    self.per_reader = [0] * (len(pool.workers) - 1)  # steps each reader made

  def spans_wanted(self) -> int:
    """As many as the planner may send ahead (its credits)."""
    return self.reader_spec.spans_ahead

  def spans_held(self) -> int:
    return sum(closes for _, closes in self.readers_of_steps)

  def steps_ahead_at_most(self) -> int:
    """Every reader's slots."""
    return self.reader_spec.slots * (len(self.pool.workers) - 1)

  def reads_on_thread(self) -> bool:
    return False

  def steps_per_reader(self) -> tuple[int, ...]:
    return tuple(self.per_reader)

  def accept(self, span: StepSpan) -> None:
    if not span.steps:
      return
    reader = self.spans % len(self.pool.readers)
    header, payload = span.wire if span.wire is not None else encode_span(span.steps)
    self.pool.readers[reader].send(SpanToRead(self.pool.generation, header), payload)
    self.spans += 1
    self.readers_of_steps.extend((reader, i == len(span.steps) - 1) for i in range(len(span.steps)))

  def take(self, coming: ComingStep) -> dict[str, np.ndarray]:
    """Step `coming` from its reader's slot (copied out, then the slot is freed)."""
    reader, _ = self.readers_of_steps.popleft()
    handle = self.pool.readers[reader]
    while True:
      received = handle.receive_current(self.pool.generation, wait=True)  # (older ones: their slots were freed)
      assert received is not None  # waited for
      message, _ = received
      if isinstance(message, WorkerError):
        raise raised(message)
      if not isinstance(message, StepMade):
        raise RuntimeError(f"{handle.name}: sent {message} where a step was expected")
      if message.step == coming.step:
        break
      handle.send(Free(self.pool.generation, message.slot))
    assert handle.memory is not None  # a reader's ring
    views = slot_views(
      handle.memory.buf,
      message.slot,
      self.reader_spec.slot_bytes,
      coming.num_rows,
      coming.seq_len,
      self.rows.layout,
    )
    # A copy, then the slot is free: on CPU a jax.Array may alias the NumPy memory it was made from.
    started = time.perf_counter()
    arrays = self.rows(coming.num_rows, coming.seq_len)
    if arrays is None:
      arrays = {name: np.empty_like(view) for name, view in views.items()}
    for name, view in views.items():
      np.copyto(arrays[name], view)
    handle.send(Free(self.pool.generation, message.slot))
    self.recorder.time(coming.stats, "read", message.time_s["read"])
    self.recorder.time(coming.stats, "assemble", message.time_s["assemble"] + time.perf_counter() - started)
    self.per_reader[reader] += 1
    return arrays

  def restart(self) -> None:
    """Every reader drops what it holds (the pool's new generation)."""
    self.spans = 0
    self.readers_of_steps.clear()
    for reader in self.pool.readers:
      reader.send(Start(self.pool.generation))

  def close(self, timeout_s: float) -> bool:
    """The pool stops the processes."""
    del timeout_s
    return True
