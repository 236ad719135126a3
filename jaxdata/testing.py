"""Helpers for tests of code that runs a `Pipeline`: wait for its processes, reach them, record its reads.

A training run needs none of these. They exist so that tests (ours, and
yours) check a pipeline's behaviour without reaching into its private
attributes; `Pipeline.execution()` is the public view of where steps are made.

>>> import jaxdata.testing as testing
>>> with testing.recorded_reads() as reads:
...   pass  # a Pipeline built here logs (steps, dataset, records) of each read it makes in this process
>>> reads
[]
"""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Iterator
from typing import Any

from jaxdata.pipeline.pipeline import Pipeline
from jaxdata.pipeline.pipeline_parts import RECORDED_READS
from jaxdata.pipeline.pooled_steps import PooledSteps
from jaxdata.pipeline.reader import ReadLog

__all__ = [
  "opened_datasets",
  "prefetched_steps",
  "worker_lifecycle",
  "recorded_reads",
  "start_processes",
  "wait_for_processes",
  "worker_processes",
]


@contextlib.contextmanager
def recorded_reads() -> Iterator[ReadLog]:
  """A list that gets (steps, dataset name, records) of every read made in this process by the
  pipelines built inside the block (not by reader processes: `StepMaking(reader_processes=n)` is refused)."""
  log: ReadLog = []
  token = RECORDED_READS.set(log)
  try:
    yield log
  finally:
    RECORDED_READS.reset(token)


def _workers(pipe: Pipeline) -> PooledSteps | None:
  producer = pipe._handout.maker  # this module is the documented way in
  return producer if isinstance(producer, PooledSteps) else None


def opened_datasets(pipe: Pipeline) -> list[Any]:
  """The datasets the pipeline reads, as it opened them (split views included): to look at a remote
  dataset's shard cache or transfer counts in a test."""
  return list(pipe._handout.reader.datasets)  # this module is the documented way in


def worker_lifecycle(pipe: Pipeline) -> str:
  """Where the pipeline's worker processes stand: "in process" (it has none), or a
  `jaxdata.pipeline.worker_pool.Lifecycle` value ("not spawned", "starting", "running", "fell back")."""
  workers = _workers(pipe)
  return "in process" if workers is None else workers.pool.lifecycle.value


def start_processes(pipe: Pipeline) -> None:
  """Starts the pipeline's worker processes now (it starts them after its first step otherwise)."""
  workers = _workers(pipe)
  if workers is not None:
    workers.pool.spawn()


def wait_for_processes(pipe: Pipeline, timeout_s: float = 60.0) -> None:
  """Starts the worker processes if need be and blocks until each has opened the data, so that the
  next steps are theirs (a no-op in process). Raises a process's error, or `TimeoutError`."""
  workers = _workers(pipe)
  if workers is None:
    return
  pool = workers.pool
  pool.spawn()
  deadline = time.monotonic() + timeout_s
  pool.unexpected_exit = None
  while not pool.ready():
    if pool.unexpected_exit is not None:  # rather than start it again and again
      raise pool.unexpected_exit
    if time.monotonic() > deadline:
      raise TimeoutError(f"workers: not ready after {timeout_s} s")
    time.sleep(0.01)


def worker_processes(pipe: Pipeline) -> list[subprocess.Popen]:
  """The running worker processes, planner first (empty in process): to signal or kill one in a test."""
  workers = _workers(pipe)
  return [handle.process for handle in workers.pool.handles] if workers is not None else []


def prefetched_steps(pipe: Pipeline, count: int, timeout_s: float = 60.0) -> list[tuple[dict[str, Any], dict]]:
  """(batch, stats) of the steps the prefetch thread has made ahead, once `count` of them wait (or at
  `timeout_s`), oldest first, without handing them out: to check what the thread makes (global arrays,
  with a mesh, and the time it spent making them)."""
  resources = pipe._handout  # this module is the documented way in
  deadline = time.monotonic() + timeout_s
  while time.monotonic() < deadline:
    prefetcher = resources.prefetcher
    if prefetcher is not None and prefetcher.queue.qsize() >= count:
      break
    time.sleep(0.01)
  prefetcher = resources.prefetcher
  items = list(prefetcher.queue.queue) if prefetcher is not None else []
  return [(item.batch, item.stats.to_json()) for item in items if hasattr(item, "batch")]
