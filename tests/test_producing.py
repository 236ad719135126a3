"""Every way of making steps keeps one contract (`jaxdata.pipeline.producing.StepMaker`); each axis keeps
its own (`Planning`, `Assembly`); the worker pool's lifecycle moves only along its transitions, in a run too."""

from __future__ import annotations

import inspect
import warnings

import pytest

from jaxdata import Pipeline, StepMaking
from jaxdata.pipeline.assembly import Assembly, LocalAssembly
from jaxdata.pipeline.planner import StepPlanner
from jaxdata.pipeline.planning import LocalPlanning, Planning
from jaxdata.pipeline.planning_process import ProcessPlanning
from jaxdata.pipeline.pooled_steps import PooledSteps
from jaxdata.pipeline.producing import END, End, StepMaker
from jaxdata.pipeline.reader_processes import ReaderProcesses
from jaxdata.pipeline.steps import Steps
from jaxdata.pipeline.worker_pool import MOVES, Lifecycle, WorkerPool
from jaxdata.testing import wait_for_processes, worker_lifecycle, worker_processes
from pipeline_fixtures import coded_config, digest


def _keeps(contract: type, implementation: type) -> None:
  for name, member in inspect.getmembers(contract):
    if name.startswith("_"):
      continue
    assert hasattr(implementation, name), f"{implementation.__name__} lacks {name}"
    if inspect.isfunction(member):
      wanted = list(inspect.signature(member).parameters)
      assert list(inspect.signature(getattr(implementation, name)).parameters) == wanted, name


@pytest.mark.parametrize(
  "contract, implementation",
  [
    (StepMaker, Steps),
    (StepMaker, PooledSteps),
    (Planning, LocalPlanning),
    (Planning, ProcessPlanning),
    (Assembly, LocalAssembly),
    (Assembly, ReaderProcesses),
  ],
  ids=lambda c: c.__name__,
)
def test_every_implementation_has_its_contracts_methods_with_their_signatures(contract, implementation):
  _keeps(contract, implementation)


def test_the_end_marker_is_one_typed_value():
  assert END is End.END and repr(END) == "END" and list(End) == [END]


def test_the_lifecycle_reaches_every_stage_and_fell_back_is_final():
  reached, frontier = {Lifecycle.NOT_SPAWNED}, [Lifecycle.NOT_SPAWNED]
  while frontier:
    for to in MOVES[frontier.pop()] - reached:
      reached.add(to)
      frontier.append(to)
  assert reached == set(Lifecycle)
  assert MOVES[Lifecycle.FELL_BACK] == frozenset()
  assert Lifecycle.RUNNING not in MOVES[Lifecycle.NOT_SPAWNED]  # never running before every worker is ready


def test_step_making_names_the_field_at_fault():
  with pytest.raises(ValueError, match="planning: must be one of auto, here, process, got 'threads'"):
    StepMaking("threads")
  with pytest.raises(ValueError, match="reader_processes: must be an int >= 0, got -1"):
    StepMaking("process", reader_processes=-1)
  with pytest.raises(ValueError, match="reader_processes: reader processes take their spans from a planner process"):
    StepMaking("here", reader_processes=2)


def test_the_old_arguments_warn_naming_the_new_spelling_and_give_the_same_batches(tmp_path):
  cfg = coded_config(tmp_path, [[5, 9, 3, 7] * 10, [4, 6, 8] * 12], seed=3, exhausted_policy="repeat")
  with Pipeline(cfg, prefetch=0, making="here") as pipe:
    expected = [digest(next(pipe)) for _ in range(4)]
  with pytest.warns(DeprecationWarning, match=r"use making=StepMaking\(planning='here', reader_processes=0\)"):
    old = Pipeline(cfg, prefetch=0, planner_process=False)
  with old:
    assert worker_lifecycle(old) == "in process" and [digest(next(old)) for _ in range(4)] == expected
  with pytest.raises(ValueError, match="making: give it alone"):
    Pipeline(cfg, making="here", workers=1)
  with warnings.catch_warnings():
    warnings.simplefilter("error")  # the new spelling warns about nothing
    Pipeline(cfg, prefetch=0, making=StepMaking("here")).close()


@pytest.mark.multiprocess
def test_a_run_with_a_planner_process_moves_along_the_lifecycle(tmp_path):
  cfg = coded_config(tmp_path, [[5, 9, 3, 7] * 10, [4, 6, 8] * 12], seed=3, exhausted_policy="repeat")
  with Pipeline(cfg, prefetch=0) as alone:
    expected = [digest(next(alone)) for _ in range(8)]
  with Pipeline(cfg, prefetch=0) as here:
    assert worker_lifecycle(here) == "in process"
  with Pipeline(cfg, prefetch=0, making="process") as pipe:
    assert worker_lifecycle(pipe) == "not spawned"
    got = [digest(next(pipe))]  # made here; the planner is spawned after it
    assert worker_lifecycle(pipe) == "starting"
    wait_for_processes(pipe)
    got.append(digest(next(pipe)))
    assert worker_lifecycle(pipe) == "running" and pipe.execution().steps_from_processes == 1
    state = pipe.get_state()
    got += [digest(next(pipe)) for _ in range(2)]
    worker_processes(pipe)[0].kill()
    worker_processes(pipe)[0].wait()
    pipe.set_state(state)  # the dead planner is replaced: steps are made here until it is ready
    assert worker_lifecycle(pipe) == "starting"
    again = [digest(next(pipe)) for _ in range(2)]
    assert again == got[2:4]
    got += [digest(next(pipe)) for _ in range(4)]
  assert got == expected
  pool = WorkerPool.__new__(WorkerPool)
  pool.lifecycle = Lifecycle.FELL_BACK
  with pytest.raises(RuntimeError, match="fell back -> running is not a transition"):
    pool.move(Lifecycle.RUNNING)


def test_a_planning_error_is_raised_at_its_own_step_after_every_step_planned_before_it(tmp_path, monkeypatch):
  """Planning runs a span ahead (read_ahead_tokens=1: one step a span); an error planning step 3 must not
  keep steps 0-2, planned fine, from being handed out (it was raised at step 2, while planning ahead)."""
  cfg = coded_config(tmp_path, [[5, 9, 3, 7] * 10, [4, 6, 8] * 12], seed=3, exhausted_policy="repeat")
  with Pipeline(cfg, prefetch=0) as alone:
    expected = [digest(next(alone)) for _ in range(3)]
  real = StepPlanner.plan

  def plan(self):
    if self.step == 3:
      raise ValueError("a planning failure at step 3")
    return real(self)

  monkeypatch.setattr(StepPlanner, "plan", plan)  # the planner fails; what is under test is when it is raised
  with Pipeline(cfg, prefetch=2, read_ahead_tokens=1, making="here") as pipe:
    assert [digest(next(pipe)) for _ in range(3)] == expected
    with pytest.raises(ValueError, match="a planning failure at step 3"):
      next(pipe)
    assert pipe.get_state()["step"] == 3  # left at the step that failed: the next call retries it
