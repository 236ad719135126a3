"""Reading and assembly: where a planned span's steps become rows. One interface, `Assembly`, two implementations.

    LocalAssembly     this process reads each span (one call per dataset) and assembles step by step
    ReaderProcesses   reader processes read and assemble into shared memory (reader_processes.py)

`LocalAssembly` is written once for both plannings; its read-ahead is a
parameter, because the GIL makes the two paths differ::

    read_thread given:  the next span is read on a thread of its own while this one is assembled
                        (reads run mostly without the GIL; planning and assembly hold it)
    remote data:        each span taken has its shards fetched from then on, all at once
                        (while the spans before it are read)
    neither:            a span is read when its first step is asked for

Planning in this process reads every span from disk ahead. Under a planner
process, spans from disk are read ahead on hosts with cores to spare (>= 4:
where "auto" starts the planner process), and there only: with the read
serial in the prefetch thread, a step waits for its span's read, and many
short documents make that read long (the mesh defaults lost 17-25% to
NumPy output on such a corpus); on 2 cores the read thread added no speed
and cost a Python-bound training loop more of the GIL. Spans that wait on
a store's byte ranges are always read ahead. Nothing here depends on how
far ahead it reads: a step's batch is a pure function of its plan.
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import time
from typing import Protocol

import numpy as np

from jaxdata.config.layout import StepLayout
from jaxdata.config.packing_config import PackingConfig
from jaxdata.pipeline.producing import ComingStep
from jaxdata.pipeline.read_spans import HostStep, ReadStep, StepSpan, assemble, read_span
from jaxdata.pipeline.read_thread import ReadThread
from jaxdata.pipeline.reader import DocumentReader
from jaxdata.pipeline.stats import StatsRecorder
from jaxdata.transforms.pieces import Pieces

__all__ = ["Assembly", "LocalAssembly", "OutputRows", "SpanReads"]


class Assembly(Protocol):
  """Where the spans' steps become rows (see the module docstring)."""

  @property
  def makes_steps_ahead(self) -> bool:
    """Whether steps are made ahead elsewhere (then the pipeline starts no prefetch thread)."""
    ...

  def spans_wanted(self) -> int:
    """How many spans it takes before their steps are asked for (at least one)."""
    ...

  def spans_held(self) -> int:
    """Spans taken whose last step is not handed out yet."""
    ...

  def accept(self, span: StepSpan) -> None:
    """A planned span, in order: its reading may begin."""
    ...

  def steps_ahead_at_most(self) -> int:
    """How many steps it makes ahead at most (0 where they are made when asked for)."""
    ...

  def reads_on_thread(self) -> bool:
    """Whether this process reads on a thread of its own, a span ahead."""
    ...

  def steps_per_reader(self) -> tuple[int, ...]:
    """Steps each reader process made (empty without them)."""
    ...

  def take(self, coming: ComingStep) -> dict[str, np.ndarray]:
    """The rows of the next step (of the oldest span), timed into its stats."""
    ...

  def restart(self) -> None:
    """Drops every span taken."""
    ...

  def close(self, timeout_s: float) -> bool:
    """Stops what it started; False if a read did not stop in `timeout_s`."""
    ...


class OutputRows:
  """Where a step's rows are written (its `StepLayout`): fresh memory (64-byte aligned with `aligned`,
  which global arrays on CPU devices then use in place), the features the batch leaves out
  (`batch.features`) in scratch arrays that are reused and never handed out."""

  def __init__(self, layout: StepLayout, aligned: bool) -> None:
    self.layout, self.aligned = layout, aligned
    self._kept = StepLayout(tuple(f for f in layout.features if f.kept))
    self._dropped = StepLayout(tuple(f for f in layout.features if not f.kept))
    self._scratch: dict[str, np.ndarray] | None = None
    self._scratch_shape = (0, 0)

  def __call__(self, num_rows: int, seq_len: int) -> dict[str, np.ndarray] | None:
    """Arrays of every feature (None: NumPy's own allocations will do)."""
    if not self._dropped.features:
      return self.layout.arrays(num_rows, seq_len, aligned=True) if self.aligned else None
    shape = (num_rows, seq_len)
    if self._scratch is None or self._scratch_shape != shape:
      self._scratch, self._scratch_shape = self._dropped.arrays(*shape), shape
    return {**self._scratch, **self._kept.arrays(*shape, aligned=self.aligned)}


@dataclasses.dataclass
class _HeldSpan:
  """A span taken: its read (on the read thread, once begun) and its steps read, not yet assembled."""

  steps: list[HostStep]
  read: concurrent.futures.Future | None = None
  items: collections.deque[ReadStep] | None = None
  read_s: float = 0.0  # per step
  error: Exception | None = None  # a read ahead that failed: raised at the span's first step


class SpanReads:
  """The spans taken, in order, and their reads (this process's, and a reader process's)::

      accept(steps)   a span taken: with remote data its shards are fetched from now on, all at once
      next_step()     the oldest step, read: its span is read when its first step is needed, unless
                      the read thread read it ahead (the span being assembled and the one after it)
      read_ahead()    a reader process's idle time (every slot full): the next span read now

  A read's error is raised by `next_step` at the span's first step.
  """

  def __init__(self, reader: DocumentReader, pad_id: int, read_thread: ReadThread | None) -> None:
    self.reader, self.pad_id, self.read_thread = reader, pad_id, read_thread
    self.held: collections.deque[_HeldSpan] = collections.deque()  # the first is being assembled

  def accept(self, steps: list[HostStep]) -> None:
    if not steps:
      return
    if self.reader.remote:  # its shards are fetched from now on (all at once), while earlier spans are read
      self.reader.fetch_ahead(Pieces.concatenate([s.pieces for s in steps]))
    self.held.append(_HeldSpan(steps))
    self._start_reads()

  def next_step(self) -> tuple[ReadStep, float]:
    """The oldest step read, and its share of its span's read time (seconds)."""
    held = self.held[0]
    if held.error is not None:
      raise held.error
    if held.items is None:
      self._read(held)
    assert held.items is not None  # read above
    item = held.items.popleft()
    if not held.items:
      self.held.popleft()
      self._start_reads()
    return item, held.read_s

  def may_read_ahead(self) -> bool:
    """Whether a span is not read yet while at most one waits read."""
    read = [held.items is not None or held.error is not None for held in self.held]
    return not all(read) and sum(read) <= 1

  def read_ahead(self) -> bool:
    """Reads the first span not read yet (if `may_read_ahead`); whether it did."""
    if not self.may_read_ahead():
      return False
    first = next(held for held in self.held if held.items is None and held.error is None)
    try:
      self._read(first)
    except Exception as error:  # noqa: BLE001 -- raised by next_step at the step that needs the span
      first.error = error
    return True

  def _read(self, held: _HeldSpan) -> None:
    if held.read is not None:
      items, read_s = held.read.result()
    else:
      started = time.perf_counter()
      items = read_span(self.reader, held.steps, self.pad_id)
      read_s = time.perf_counter() - started
    held.items, held.read_s = collections.deque(items), read_s / len(held.steps)

  def _start_reads(self) -> None:
    """On the read thread: the span being assembled and the one after it (at most two are read)."""
    if self.read_thread is None:
      return
    for held in list(self.held)[:2]:
      if held.read is None and held.items is None:
        held.read = self.read_thread.submit(held.steps)

  def restart(self) -> None:
    """Drops the spans taken. A read under way finishes unused and is waited for, so that no stale read
    still uses the reader when another thread reads next; a read not begun is skipped."""
    reads = [held.read for held in self.held if held.read is not None]
    for read in reads:
      read.cancel()
    concurrent.futures.wait(reads)
    self.held.clear()


class LocalAssembly:
  """Reads and assembles spans in this process (see the module docstring).

  Args:
    packing: the packing config (pad id, BOS / EOS, long documents).
    reader: the documents' reader.
    recorder: the per-step timers.
    rows: where rows are written.
    read_thread: a thread this process may read on, a span ahead (None: read when needed).
    reads_disk_ahead: every span from disk is read ahead on `read_thread` (planned in this process, or
      by a planner process on a host with cores to spare); else only spans that wait on a store's byte
      ranges are. Remote shards fetch ahead instead.
  """

  makes_steps_ahead = False

  def __init__(
    self,
    packing: PackingConfig,
    reader: DocumentReader,
    recorder: StatsRecorder,
    rows: OutputRows,
    read_thread: ReadThread | None,
    reads_disk_ahead: bool,
  ) -> None:
    self.packing, self.recorder, self.rows = packing, recorder, rows
    reads_ahead = not reader.remote and (reads_disk_ahead or reader.reads_ranges_from_store)
    self.reads = SpanReads(reader, packing.fill_id, read_thread if reads_ahead else None)

  def spans_wanted(self) -> int:
    """One span read ahead (on the read thread, or its shards fetched), else one at a time."""
    return 2 if self.reads.read_thread is not None or self.reads.reader.remote else 1

  def spans_held(self) -> int:
    return len(self.reads.held)

  def steps_ahead_at_most(self) -> int:
    return 0

  def reads_on_thread(self) -> bool:
    return self.reads.read_thread is not None

  def steps_per_reader(self) -> tuple[int, ...]:
    return ()

  def accept(self, span: StepSpan) -> None:
    self.reads.accept(span.steps)

  def take(self, coming: ComingStep) -> dict[str, np.ndarray]:
    item, read_s = self.reads.next_step()
    started = time.perf_counter()
    arrays = assemble(item, self.packing, self.rows.layout, self.rows(item.host.num_rows, item.host.seq_len))
    self.recorder.time(coming.stats, "read", read_s)
    self.recorder.time(coming.stats, "assemble", time.perf_counter() - started)
    return arrays

  def restart(self) -> None:
    self.reads.restart()

  def close(self, timeout_s: float) -> bool:
    """Stops the read thread; whether no read is still under way after `timeout_s`."""
    return self.reads.read_thread is None or self.reads.read_thread.close(timeout_s)
