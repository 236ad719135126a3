"""`Handout`: a pipeline's steps from its step maker to `next()`, and what it must release.

What is handed out is the maker's step made into the batch (`producing`),
on the prefetch thread when there is one::

    StepMaker.produce() -> NumPy rows
      -> trained tokens counted per source (datasets with masks)
      -> only `batch.features`
      -> with a mesh: global jax.Arrays (made where the step is made)
"""

from __future__ import annotations

import dataclasses
import functools
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Literal

import numpy as np

from jaxdata.checkpoint.state import PipelineState
from jaxdata.config.layout import FEATURES, StepLayout
from jaxdata.pipeline.prefetch import Prefetcher
from jaxdata.pipeline.producing import END, End, Prepared, StepMaker
from jaxdata.pipeline.reader import DocumentReader
from jaxdata.pipeline.stats import StatsRecorder
from jaxdata.pipeline.switch_interval import SwitchIntervalLease, lower_switch_interval

__all__ = ["HandedOut", "Handout", "producing"]

RELEASE_WAIT_S = 10.0  # how long close() (or exit) waits for a read in progress


def producing(
  producer: StepMaker,
  output: Callable[..., dict[str, Any]] | None,
  rows_here: Callable[[int, int], np.ndarray],
  recorder: StatsRecorder,
  masked: bool = False,
  names: Sequence[str] = (),
  *,
  layout: StepLayout = StepLayout.of_features(FEATURES),
) -> Callable[[], Prepared | Literal[End.END]]:
  """What makes the next step: the producer's NumPy rows, or with a mesh its global arrays, of the
  features `layout` keeps; where a dataset carries trained-token masks, each step's stats count this
  host's trained tokens per source."""
  produce = producer.produce
  if masked:
    produce = functools.partial(_counting_trained, produce, names)
  if len(layout.kept) < len(layout.names):  # after the counting: it reads loss_mask and source_ids
    produce = functools.partial(_only, produce, layout.kept)
  if output is None:
    return produce
  return functools.partial(_global_batch, produce, output, rows_here, recorder)


def _counting_trained(
  produce: Callable[[], Prepared | Literal[End.END]], names: Sequence[str]
) -> Prepared | Literal[End.END]:
  """`trained_tokens_per_source`: the tokens whose targets train (loss_mask 1), per source, in this
  host's rows (on one host, the global batch; on several, their sum is)."""
  item = produce()
  if isinstance(item, Prepared):
    counts = np.zeros(len(names), np.int64)
    # a step's rows, or with parallel preference pairs its chosen and its rejected rows
    for prefix in ("", "chosen_", "rejected_"):
      if prefix + "loss_mask" in item.batch:
        trained = np.asarray(item.batch[prefix + "loss_mask"]).ravel() == 1
        source = np.asarray(item.batch[prefix + "source_ids"]).ravel()[trained]
        counts += np.bincount(source, minlength=len(names))
    item.stats = dataclasses.replace(item.stats, trained_tokens_per_source=dict(zip(names, counts.tolist())))
  return item


def _only(produce: Callable[[], Prepared | Literal[End.END]], features: Sequence[str]) -> Prepared | Literal[End.END]:
  """The step with only `features` (`batch.features`), before they become global arrays."""
  item = produce()
  if isinstance(item, Prepared):
    item.batch = {name: item.batch[name] for name in features}
  return item


def _global_batch(
  produce: Callable[[], Prepared | Literal[End.END]],
  output: Callable[..., dict[str, Any]],
  rows_here: Callable[[int, int], np.ndarray],
  recorder: StatsRecorder,
) -> Prepared | Literal[End.END]:
  """The next step with its NumPy rows as global arrays. Made where the step
  is made (the prefetch thread when there is one): done in the training
  thread instead, the two threads hand the GIL back and forth for every
  transfer and mesh output ran 25-40% slower (benchmarks/pipeline_throughput)."""
  item = produce()
  if not isinstance(item, Prepared):
    return item
  started = time.perf_counter()
  rows, seq_len = item.stats.rows, item.stats.seq_len
  batch = output(item.batch, rows, seq_len, rows_here(rows, seq_len))
  recorder.time(item.stats, "output", time.perf_counter() - started)
  return Prepared(batch, item.state, item.stats)


@dataclasses.dataclass(frozen=True)
class HandedOut:
  """A step `next()` hands out, with the pipeline states before and after it."""

  batch: dict[str, Any]
  before: PipelineState
  after: PipelineState


class Handout:
  """Hands a pipeline's steps out: from its `StepMaker` (`maker`), through the prefetch thread when
  steps are made on demand and `prefetch` > 0; and what it must release, the thread and the open
  files. Held apart from the pipeline so its finalizer can release them.

  Args:
    maker: the step maker.
    produce: makes the next step handed out (`producing`).
    reader: the open files.
    prefetch: steps the prefetch thread makes ahead (0: in the caller's thread).
    switch_interval_s: see `Pipeline`.
  """

  def __init__(
    self,
    maker: StepMaker,
    produce: Callable[[], Prepared | Literal[End.END]],
    reader: DocumentReader,
    prefetch: int,
    switch_interval_s: float | None,
  ) -> None:
    self.maker, self.produce, self.reader = maker, produce, reader
    self.prefetch = prefetch
    self._switch_interval_s = switch_interval_s
    self._switch_lease: SwitchIntervalLease | None = None  # held while a prefetch thread runs
    self.prefetcher: Prefetcher | None = None
    self.stopped: list[Prefetcher] = []  # told to stop, not yet joined (after Ctrl-C)
    self.making = threading.Lock()  # held while a step is made, and while the maker restarts
    self.interrupted = False  # a restart is owed: a call was cut off (Ctrl-C) before it handed its step out
    self.returning: HandedOut | None = None  # the step the call under way hands out
    self.kept: HandedOut | None = None  # a step cut off on its way out: the next call hands it out

  @property
  def depth(self) -> int:
    """Steps the prefetch thread makes ahead: none where they are made ahead elsewhere (reader processes)."""
    return 0 if self.maker.makes_steps_ahead else self.prefetch

  def ready(self) -> int:
    """Steps made ahead and waiting now: in the prefetch queue, or in reader processes' memory."""
    if self.maker.makes_steps_ahead:
      return self.maker.steps_ready()
    return self.prefetcher.queue.qsize() if self.prefetcher is not None else 0

  def ahead(self) -> int:
    """How many steps are made ahead at most: reader slots, or the prefetch thread's queue."""
    return self.maker.steps_ahead_at_most() if self.maker.makes_steps_ahead else self.prefetch

  def take(self) -> Prepared | Literal[End.END]:
    """The next step (or END), through the prefetch thread if there is one."""
    depth, produce = self.depth, self.produce
    if depth == 0:
      return produce()
    if self.prefetcher is None:
      if self._switch_interval_s is not None and self._switch_lease is None:
        self._switch_lease = lower_switch_interval(self._switch_interval_s)
      self.prefetcher = Prefetcher(produce, depth, lambda item: item is END, self.making)
      self.prefetcher.start()  # held first: a Ctrl-C in between leaves no thread that nothing can stop
    item = self.prefetcher.get()
    if isinstance(item, BaseException):
      raise item
    self.prefetcher.hold(item)  # freed on the prefetch thread once the next item is handed out
    return item

  def stop_prefetch(self, wait: bool = True) -> None:
    """Tells the thread to stop and, with `wait`, waits for it and every one stopped before (the planner
    is shared: no old thread may still run). A Ctrl-C while waiting leaves them to the next call."""
    if self.prefetcher is not None:
      self.stopped.append(self.prefetcher)
      self.prefetcher.stop(wait=False)
      self.prefetcher = None
    if wait:
      while self.stopped:
        self.stopped[0].stop(wait=True)
        self.stopped.pop(0)
    self._give_back_switch_interval()

  def _give_back_switch_interval(self) -> None:
    if self._switch_lease is not None:
      self._switch_lease.release()
      self._switch_lease = None

  def release(self) -> None:
    """Stops the thread, waiting at most RELEASE_WAIT_S for a read in progress;
    files are closed only once no thread can still read them."""
    threads = [p.thread for p in [self.prefetcher, *self.stopped] if p is not None]
    for prefetcher in [self.prefetcher, *self.stopped]:
      if prefetcher is not None:
        prefetcher.stop(wait=False)
    deadline = time.monotonic() + RELEASE_WAIT_S
    for thread in threads:
      thread.join(max(0.0, deadline - time.monotonic()))
    self._give_back_switch_interval()
    if any(thread.is_alive() for thread in threads):
      return  # a stalled read: leave its files to the process's end rather than hang
    self.prefetcher, self.stopped = None, []
    if self.maker.close(max(0.0, deadline - time.monotonic())):  # False: its read thread is stalled
      self.reader.close()
