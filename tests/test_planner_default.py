"""The planner process by default where it pays (with a mesh, on >= 4 usable cores), and the
fallback to planning in process when it cannot run."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import warnings

import jax
import numpy as np
import pytest

from jaxdata import Pipeline, PipelineConfig, WorkerStartError
from jaxdata.pipeline.execution import StepMaking
from jaxdata.pipeline.makers import PLANNER_PROCESS_MIN_CORES, cores_to_spare, planner_process_helps
from jaxdata.pipeline.worker_handle import _child_environment
from jaxdata.pipeline.worker_pool import STARTS_BEFORE_GIVING_UP
from jaxdata.testing import wait_for_processes, worker_processes
from pipeline_fixtures import as_on_cores, coded_config, digest

DEADLINE_S = 60.0  # for a process to start (or fail to) while steps are taken slowly


@pytest.fixture(scope="module")
def cfg(tmp_path_factory) -> PipelineConfig:
  rng = np.random.default_rng(12)
  tmp = tmp_path_factory.mktemp("planner_default")
  return coded_config(
    tmp,
    [rng.integers(1, 90, 150).tolist(), rng.integers(1, 40, 260).tolist()],
    exhausted_policy="repeat",
    shuffle_block_size="global",
    packing={"seq_len": 32, "add_bos": True},
    batch={"global_batch_size": 16},
  )


@pytest.fixture(scope="module")
def mesh() -> jax.sharding.Mesh:
  return jax.make_mesh((4, 2), ("data", "model"), axis_types=(jax.sharding.AxisType.Auto,) * 2)


def reference(cfg: PipelineConfig, mesh: jax.sharding.Mesh, steps: int) -> list[tuple]:
  with Pipeline(cfg, mesh=mesh, prefetch=0, making="here") as pipe:
    return [digest(next(pipe)) for _ in range(steps)]


@pytest.mark.slow
@pytest.mark.multiprocess
def test_with_a_mesh_the_planner_is_a_process_by_default_on_four_cores(cfg, mesh, monkeypatch):
  assert planner_process_helps(mesh, reader_processes=0) == (len(os.sched_getaffinity(0)) >= PLANNER_PROCESS_MIN_CORES)
  want = reference(cfg, mesh, 20)
  as_on_cores(monkeypatch, 4)  # where the default starts a planner process
  with Pipeline(cfg, mesh=mesh, prefetch=2) as pipe:
    assert pipe.execution().planner_process and pipe.execution().may_fall_back
    assert [digest(next(pipe)) for _ in range(2)] == want[:2]
    wait_for_processes(pipe)
    assert pipe.execution().processes == ("jaxdata planner",) and len(worker_processes(pipe)) == 1
    assert [digest(next(pipe)) for _ in range(18)] == want[2:]
    assert pipe.execution().steps_from_processes > 0  # planned by the process


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.parametrize("cores,reads_ahead", [(4, True), (2, False)])
def test_under_a_planner_process_spans_are_read_ahead_where_cores_are_to_spare(
  cfg, mesh, monkeypatch, cores, reads_ahead
):
  # With a read serial in the prefetch thread, a step waits for its span's read; on 4 cores or more
  # it runs on the read thread, a span ahead, as with planning in process. The batches are the same.
  want = reference(cfg, mesh, 30)
  as_on_cores(monkeypatch, cores)
  assert cores_to_spare() == reads_ahead
  with Pipeline(cfg, mesh=mesh, prefetch=2, making="process", read_ahead_tokens=64) as pipe:
    got = [digest(next(pipe)) for _ in range(2)]
    wait_for_processes(pipe)
    got += [digest(next(pipe)) for _ in range(28)]
    execution = pipe.execution()
    assert execution.steps_from_processes > 0 and execution.read_thread == reads_ahead
    state = pipe.get_state()
  assert got == want
  with Pipeline(cfg, mesh=mesh, prefetch=2, making="process", read_ahead_tokens=64) as pipe:
    pipe.set_state(state)  # a restart drops the spans read ahead: the same remaining steps
    assert [digest(next(pipe)) for _ in range(5)] == reference(cfg, mesh, 35)[30:]


@pytest.mark.parametrize("cores", [1, 2, 3])  # a job pinned to one core; this machine
def test_on_fewer_than_four_usable_cores_the_default_plans_in_process(cfg, mesh, monkeypatch, cores):
  as_on_cores(monkeypatch, cores)
  assert not planner_process_helps(mesh, reader_processes=0)
  with Pipeline(cfg, mesh=mesh, prefetch=0) as pipe:
    assert pipe.execution().processes == ()


@pytest.mark.parametrize(
  "mesh_given,arguments,processes",
  [
    (False, {}, ()),  # NumPy output: no process unasked
    (True, {"making": "here"}, ()),
    (False, {"making": "process"}, ("jaxdata planner",)),
  ],
)
def test_the_default_starts_no_process_where_it_is_not_asked_for(cfg, mesh, mesh_given, arguments, processes):
  with Pipeline(cfg, mesh=mesh if mesh_given else None, prefetch=0, **arguments) as pipe:
    assert pipe.execution().processes == processes
    assert not pipe.execution().may_fall_back  # asked for (or none): a failure is an error
  with Pipeline(cfg, mesh=mesh, prefetch=0, making=StepMaking("process", reader_processes=1)) as pipe:
    execution = pipe.execution()  # a planner and one reader, as asked
    assert not execution.may_fall_back and execution.processes == ("jaxdata planner", "jaxdata reader 0")


def _run_until(pipe: Pipeline, done) -> list[tuple]:
  """Steps, slowly (a start-up has time to end), until done() or DEADLINE_S."""
  got, deadline = [], time.monotonic() + DEADLINE_S
  while not done() and time.monotonic() < deadline:
    got.append(digest(next(pipe)))
    time.sleep(0.01)
  return got


@pytest.mark.parametrize(
  "interpreter,message",
  [
    # Exits at once (as one that cannot import jaxdata would): three start-ups, then the fallback.
    (
      "/bin/false",
      rf"jaxdata planner \(pid \d+\) exited with code 1 before it was ready, "
      rf"{STARTS_BEFORE_GIVING_UP} times in a row",
    ),
    # Cannot be started at all: the fallback at once.
    ("/nonexistent/python3", r"jaxdata planner could not be started: .*No such file or directory.*"),
  ],
)
def test_a_default_planner_that_cannot_run_falls_back_with_a_warning(cfg, mesh, monkeypatch, interpreter, message):
  as_on_cores(monkeypatch, 4)  # where the default starts a planner process
  monkeypatch.setattr(sys, "executable", interpreter)
  with Pipeline(cfg, mesh=mesh, prefetch=0) as pipe:
    with pytest.warns(RuntimeWarning, match=message + "; planning in this process instead"):
      got = _run_until(pipe, lambda: pipe.execution().fell_back)
    assert pipe.execution().fell_back and not worker_processes(pipe)  # nothing left running
    with warnings.catch_warnings():
      warnings.simplefilter("error")  # warned once, not at every step
      got += [digest(next(pipe)) for _ in range(10)]
    pipe.set_state(pipe.get_state())  # a restart does not try again
    got += [digest(next(pipe)) for _ in range(3)]
    assert pipe.execution().fell_back and not worker_processes(pipe)
  assert got == reference(cfg, mesh, len(got))  # nothing skipped or repeated


@pytest.mark.slow
@pytest.mark.multiprocess
def test_an_asked_for_planner_that_cannot_run_is_an_error_then_is_retried(cfg, mesh, monkeypatch):
  monkeypatch.setattr(sys, "executable", "/bin/false")
  with Pipeline(cfg, mesh=mesh, prefetch=0, making="process") as pipe:
    got, errors, deadline = [], [], time.monotonic() + DEADLINE_S
    while not errors and time.monotonic() < deadline:
      try:
        got.append(digest(next(pipe)))  # made in process meanwhile
      except WorkerStartError as error:
        errors.append(str(error))
      time.sleep(0.01)
    assert errors and "jaxdata planner" in errors[0] and "before it was ready" in errors[0]
    monkeypatch.undo()  # the interpreter is back: the next calls start the planner again
    got += _run_until(pipe, lambda: pipe.execution().steps_from_processes > 0)
    before = pipe.execution().steps_from_processes
    assert before > 0
    got += [digest(next(pipe)) for _ in range(5)]
    assert pipe.execution().steps_from_processes == before + 5  # the planner made them
  assert got == reference(cfg, mesh, len(got))


def test_a_planner_that_exits_before_it_reads_its_config_counts_as_an_exit(cfg, mesh, monkeypatch):
  # The race CI once lost: /bin/false exited before the config was sent, and the send's
  # BrokenPipeError escaped from a respawn instead of counting as an exit before "ready".
  real_popen = subprocess.Popen

  def exited_popen(*args, **kwargs):
    process = real_popen(*args, **kwargs)
    process.wait()  # gone before anything is sent to it
    return process

  monkeypatch.setattr(sys, "executable", "/bin/false")
  monkeypatch.setattr(subprocess, "Popen", exited_popen)
  with Pipeline(cfg, mesh=mesh, prefetch=0, making="process") as pipe:
    got, errors, deadline = [], [], time.monotonic() + DEADLINE_S
    while not errors and time.monotonic() < deadline:
      try:
        got.append(digest(next(pipe)))
      except WorkerStartError as error:
        errors.append(str(error))
    assert errors and "exited with code 1 before it was ready" in errors[0]
  assert got == reference(cfg, mesh, len(got))


def test_the_worker_imports_from_this_process_path(monkeypatch):
  monkeypatch.setenv("PYTHONPATH", "/somewhere/else")
  monkeypatch.setattr(sys, "path", ["", "/a/script/dir", *sys.path[1:]])
  path = _child_environment()["PYTHONPATH"].split(os.pathsep)
  assert path[0] == "/a/script/dir" and "" not in path
  assert path[-1] == "/somewhere/else" and path[1:-1] == [p for p in sys.path[2:] if p]
