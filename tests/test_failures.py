"""Failure semantics and resource safety: an error at step s leaves the
pipeline at step s, the next call retries it; nothing is skipped or ended
by an error; an unreferenced pipeline releases its thread and files."""

from __future__ import annotations

import gc
import json
import os
import signal
import subprocess
import sys
import threading

import numpy as np
import pytest

from jaxdata import Pipeline, PipelineConfig
from jaxdata.integrations import PipelineDataset
from jaxdata.sources import TokenDataset
from jaxdata.testing import wait_for_processes
from pipeline_fixtures import as_on_cores, coded_config, digest

pytestmark = [pytest.mark.slow, pytest.mark.multiprocess]


@pytest.fixture(scope="module")
def cfg(tmp_path_factory) -> PipelineConfig:
  rng = np.random.default_rng(5)
  tmp = tmp_path_factory.mktemp("failures")
  return coded_config(
    tmp,
    [rng.integers(1, 60, 120).tolist(), rng.integers(1, 30, 200).tolist()],
    exhausted_policy="repeat",
    packing={"seq_len": 32},
    batch={"global_batch_size": 8},
  )


@pytest.fixture(scope="module")
def reference(cfg) -> list[tuple]:
  with Pipeline(cfg, prefetch=0) as pipe:
    return [digest(next(pipe)) for _ in range(10)]


class FailingReads:
  """Fault injection around the real TokenDataset.read: the next `count` calls raise OSError."""

  def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
    self.count = 0
    real = TokenDataset.read

    def read(dataset: TokenDataset, *args, **kwargs):
      if self.count:
        self.count -= 1
        raise OSError(5, "Input/output error (injected)")
      return real(dataset, *args, **kwargs)

    monkeypatch.setattr(TokenDataset, "read", read)


# (prefetch, making): in process without and with the read thread; a planner process as on 4 usable
# cores, where its spans are read ahead on the read thread too.
READING = [(0, "here"), (2, "here"), (2, "process")]


def reading(monkeypatch: pytest.MonkeyPatch, making: str) -> None:
  if making == "process":
    as_on_cores(monkeypatch, 4)


def ready(pipe: Pipeline, making: str) -> None:
  """With a planner process: the steps from here on are its (the first ones are made here)."""
  if making == "process":
    wait_for_processes(pipe)
    assert pipe.execution().processes == ("jaxdata planner",)


@pytest.mark.parametrize("prefetch,making", READING)
def test_a_transient_read_error_is_retried_and_changes_nothing(cfg, reference, monkeypatch, prefetch, making):
  faults = FailingReads(monkeypatch)
  reading(monkeypatch, making)
  with Pipeline(cfg, prefetch=prefetch, making=making, read_ahead_tokens=300) as pipe:
    got = [digest(next(pipe)) for _ in range(3)]
    ready(pipe, making)
    faults.count = 2  # below READ_ATTEMPTS: absorbed by the retries
    got += [digest(next(pipe)) for _ in range(7)]
    assert pipe.execution().read_thread == (prefetch > 0)
  assert faults.count == 0 and got == reference


@pytest.mark.parametrize("prefetch,making", READING)
def test_a_persistent_error_at_step_s_is_raised_and_the_next_call_retries_step_s(
  cfg, reference, monkeypatch, prefetch, making
):
  # 0.1: prefetch=0 skipped step s; prefetch=2 ended the stream (StopIteration).
  faults = FailingReads(monkeypatch)
  reading(monkeypatch, making)
  with Pipeline(cfg, prefetch=prefetch, making=making, read_ahead_tokens=300) as pipe:
    got = [digest(next(pipe)) for _ in range(4)]
    ready(pipe, making)
    faults.count = 10**9
    with pytest.raises(OSError, match="injected"):
      while len(got) < 10:  # steps already read still come out, then the read of step s fails
        got.append(digest(next(pipe)))
    state = pipe.get_state()
    assert state["step"] == len(got) < 10
    with pytest.raises(OSError, match="injected"):
      next(pipe)
    assert pipe.get_state() == state  # still just after step s - 1
    faults.count = 0
    got += [digest(next(pipe)) for _ in range(10 - len(got))]
  assert got == reference


def test_a_stats_file_that_cannot_be_written_leaves_the_step_to_retry(cfg, reference, tmp_path):
  stats_dir = tmp_path / "run"
  stats_dir.mkdir()
  path = stats_dir / "stats.jsonl"
  with Pipeline(cfg, prefetch=0, stats_path=str(path)) as pipe:
    got = [digest(next(pipe)) for _ in range(2)]
    path.unlink()
    stats_dir.rmdir()
    with pytest.raises(OSError):
      next(pipe)
    assert pipe.get_state()["step"] == 2
    stats_dir.mkdir()
    got += [digest(next(pipe)) for _ in range(3)]
  assert got == reference[:5]
  assert [line.count('"step": 2,') for line in path.read_text().splitlines()][0] == 1  # step 2 written once


def _open_fds() -> int:
  return len(os.listdir(f"/proc/{os.getpid()}/fd"))


def test_unreferenced_pipelines_release_their_threads_and_files(cfg):
  # 0.1: 20 unclosed pipelines kept 100 threads and 1,040 file descriptors.
  gc.collect()
  threads, fds = set(threading.enumerate()), _open_fds()
  for _ in range(5):
    pipe = Pipeline(cfg, prefetch=2)
    next(pipe)  # starts the prefetch thread
    del pipe
  gc.collect()
  # The threads these pipelines started are gone (a thread of an earlier test may end meanwhile: not counted).
  assert set(threading.enumerate()) - threads == set()
  assert _open_fds() <= fds


def test_unreferenced_grain_iterators_release_their_pipelines(cfg):
  gc.collect()
  threads, fds = threading.active_count(), _open_fds()
  for _ in range(3):
    iterator = iter(PipelineDataset(cfg, prefetch=2))
    next(iterator)
    del iterator
  gc.collect()
  assert threading.active_count() == threads
  assert _open_fds() <= fds


def test_ctrl_c_is_honoured_while_a_read_is_stalled(cfg, monkeypatch):
  # 0.1 waited in queue.get() without a timeout: Ctrl-C arrived only when
  # the stalled read finished. Here the read stays stalled until after the
  # KeyboardInterrupt is seen (a 60 s safety release keeps a failure from hanging CI).
  stalled, release = threading.Event(), threading.Event()
  real = TokenDataset.read

  def read(dataset, *args, **kwargs):
    stalled.set()
    release.wait(60)
    return real(dataset, *args, **kwargs)

  monkeypatch.setattr(TokenDataset, "read", read)
  # Python's own Ctrl-C handler, whatever the test runner set (a pytest-xdist worker may ignore SIGINT,
  # which made this test wait out both 60 s releases on a loaded machine): the signal is what is tested.
  previous = signal.signal(signal.SIGINT, signal.default_int_handler)
  pipe = Pipeline(cfg, prefetch=2)
  interrupter = threading.Thread(target=lambda: (stalled.wait(60), os.kill(os.getpid(), signal.SIGINT)))
  interrupter.start()
  try:
    with pytest.raises(KeyboardInterrupt):
      next(pipe)
    assert not release.is_set()  # interrupted while the read was still stalled
  finally:
    release.set()
    interrupter.join()
    pipe.close()
    signal.signal(signal.SIGINT, previous)


EXIT_SCRIPT = """
import sys
from jaxdata import Pipeline, PipelineConfig
import json
pipe = Pipeline(PipelineConfig.from_dict(json.loads(sys.argv[1])), prefetch=4, read_ahead_tokens=1 << 14)
next(pipe)
"""  # and exit with the prefetch thread busy reading: no close()


def test_exiting_with_a_busy_prefetch_thread_is_a_clean_exit(tmp_path):
  # In 0.2.0 a daemon thread inside a native read when the interpreter finalized
  # aborted the process ("terminate called without an active exception", exit -6).
  rng = np.random.default_rng(3)
  cfg = coded_config(
    tmp_path,
    [rng.integers(1, 400, 3000).tolist(), rng.integers(1, 400, 3000).tolist()],
    exhausted_policy="repeat",
    shuffle_block_size="global",
    packing={"seq_len": 512},
    batch={"global_batch_size": 64},
  )
  for _ in range(2):
    out = subprocess.run(
      [sys.executable, "-c", EXIT_SCRIPT, json.dumps(cfg.to_dict())], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "terminate called" not in out.stderr


def test_a_dataset_smaller_than_one_step_warns_instead_of_yielding_nothing_silently(tmp_path):
  cfg = coded_config(tmp_path, [[5, 9, 3, 7] * 10], batch={"global_batch_size": 64}, packing={"seq_len": 64})
  with Pipeline(cfg, prefetch=0) as pipe, pytest.warns(RuntimeWarning, match=r"ended before one whole step \(4,096"):
    assert list(pipe) == []
