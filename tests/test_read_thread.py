"""Spans read on a thread of their own (`ReadThread`), one ahead of assembly:
in order, errors where the span is needed, dropped spans skipped, the
same batches as reading in the prefetch thread, and nothing left running."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from jaxdata import Pipeline, PipelineConfig
from jaxdata.pipeline.read_thread import ReadThread
from jaxdata.sources import TokenDataset
from pipeline_fixtures import coded_config, digest

WAIT_S = 60.0  # a safety bound for a failure, never reached when the tests pass


def test_reads_run_one_at_a_time_in_the_order_asked() -> None:
  calls: list[int] = []
  running = threading.Semaphore(1)

  def read(span: int) -> int:
    assert running.acquire(blocking=False), "two reads at once"
    calls.append(span)
    running.release()
    return span * 10

  reads = ReadThread(read)
  futures = [reads.submit(w) for w in range(20)]
  assert [f.result(WAIT_S)[0] for f in futures] == [w * 10 for w in range(20)]
  assert calls == list(range(20))
  assert reads.close(WAIT_S)


def test_an_error_is_raised_where_the_span_is_needed_and_later_reads_go_on() -> None:
  def read(span: int) -> int:
    if span == 1:
      raise OSError(5, "Input/output error (injected)")
    return span

  reads = ReadThread(read)
  first, failing, third = (reads.submit(w) for w in range(3))
  assert first.result(WAIT_S)[0] == 0
  with pytest.raises(OSError, match="injected"):
    failing.result(WAIT_S)
  assert third.result(WAIT_S)[0] == 2
  assert reads.close(WAIT_S)


def test_a_dropped_span_is_not_read_and_a_stalled_read_is_reported_by_close() -> None:
  started, release = threading.Event(), threading.Event()
  calls: list[str] = []

  def read(span: str) -> str:
    calls.append(span)
    started.set()
    release.wait(WAIT_S)
    return span

  reads = ReadThread(read)
  stalled = reads.submit("stalled")
  started.wait(WAIT_S)
  dropped = reads.submit("dropped")
  assert dropped.cancel()
  assert not reads.close(timeout_s=0.05)  # still inside the stalled read
  release.set()
  assert stalled.result(WAIT_S)[0] == "stalled"
  assert reads.close(WAIT_S)
  assert calls == ["stalled"]


@pytest.fixture(scope="module")
def cfg(tmp_path_factory) -> PipelineConfig:
  rng = np.random.default_rng(21)
  tmp = tmp_path_factory.mktemp("read_ahead")
  return coded_config(
    tmp,
    [rng.integers(1, 80, 200).tolist(), rng.integers(1, 30, 300).tolist()],
    exhausted_policy="repeat",
    shuffle_block_size="global",
    packing={"seq_len": 32, "add_eos": True},
    batch={"global_batch_size": 8},
  )


def read_threads() -> list[str]:
  return [t.name for t in threading.enumerate() if t.name == "jaxdata-read-ahead"]


def test_the_pipeline_reads_on_its_own_thread_with_the_same_batches_and_stops_it(cfg, monkeypatch):
  with Pipeline(cfg, prefetch=0, read_ahead_tokens=600) as pipe:
    assert not pipe.execution().read_thread  # prefetch=0: every step is made in next()
    want = [digest(next(pipe)) for _ in range(40)]
  threads: set[str] = set()
  real = TokenDataset.read

  def read(dataset, *args, **kwargs):
    threads.add(threading.current_thread().name)
    return real(dataset, *args, **kwargs)

  monkeypatch.setattr(TokenDataset, "read", read)
  before = read_threads()
  with Pipeline(cfg, prefetch=2, read_ahead_tokens=600) as pipe:  # spans of a few steps: many reads
    got = [digest(next(pipe)) for _ in range(25)]
    state = pipe.get_state()
    got += [digest(next(pipe)) for _ in range(5)]
    pipe.set_state(state)  # spans read ahead are dropped; the same steps again
    got += [digest(next(pipe)) for _ in range(15)]
    assert len(read_threads()) == len(before) + 1
  assert got == want[:30] + want[25:40]
  assert threads == {"jaxdata-read-ahead"}
  assert read_threads() == before  # close() ended it


def test_a_read_error_in_a_span_read_ahead_is_raised_at_its_first_step_then_retried(cfg, monkeypatch):
  with Pipeline(cfg, prefetch=0, read_ahead_tokens=600) as pipe:
    want = [digest(next(pipe)) for _ in range(30)]
  failures = {"left": 0}
  real = TokenDataset.read

  def read(dataset, *args, **kwargs):
    if failures["left"]:
      failures["left"] -= 1
      raise OSError(5, "Input/output error (injected)")
    return real(dataset, *args, **kwargs)

  monkeypatch.setattr(TokenDataset, "read", read)
  got = []
  with Pipeline(cfg, prefetch=2, read_ahead_tokens=600) as pipe:
    got += [digest(next(pipe)) for _ in range(10)]
    failures["left"] = 10**6  # every read fails from now on (READ_ATTEMPTS each)
    with pytest.raises(OSError, match="injected"):
      while True:
        got.append(digest(next(pipe)))
    failed_at = len(got)
    assert 10 <= failed_at < 30
    failures["left"] = 0
    got += [digest(next(pipe)) for _ in range(30 - failed_at)]  # retried from the step that failed
  assert got == want
