"""Every way of making steps keeps one contract (`jaxdata.pipeline.producing.StepMaker`), and
the worker producer's lifecycle moves only along its transitions, in a real run too."""

from __future__ import annotations

import inspect

import pytest

from jaxdata import Pipeline
from jaxdata.pipeline.producing import END, End, StepMaker
from jaxdata.pipeline.step_producer import StepProducer
from jaxdata.pipeline.worker_producer import _MOVES, Phase, WorkerProducer
from jaxdata.testing import producer_phase, wait_for_processes, worker_processes
from pipeline_fixtures import coded_config, digest


@pytest.mark.parametrize("maker", [StepProducer, WorkerProducer])
def test_every_step_maker_has_the_contracts_methods_with_its_signatures(maker):
  for name, member in inspect.getmembers(StepMaker):
    if name.startswith("_"):
      continue
    assert hasattr(maker, name), f"{maker.__name__} lacks {name}"
    if inspect.isfunction(member):
      wanted = list(inspect.signature(member).parameters)
      assert list(inspect.signature(getattr(maker, name)).parameters) == wanted, name


def test_the_end_marker_is_one_typed_value():
  assert END is End.END and repr(END) == "END" and list(End) == [END]


def test_the_lifecycle_reaches_every_phase_and_fell_back_is_final():
  reached, frontier = {Phase.NOT_SPAWNED}, [Phase.NOT_SPAWNED]
  while frontier:
    for to in _MOVES[frontier.pop()] - reached:
      reached.add(to)
      frontier.append(to)
  assert reached == set(Phase)
  assert _MOVES[Phase.FELL_BACK] == frozenset()
  assert Phase.RUNNING not in _MOVES[Phase.NOT_SPAWNED]  # never running before every worker is ready


def test_a_run_with_a_planner_process_moves_along_the_lifecycle(tmp_path):
  cfg = coded_config(tmp_path, [[5, 9, 3, 7] * 10, [4, 6, 8] * 12], seed=3, exhausted_policy="repeat")
  with Pipeline(cfg, prefetch=0) as alone:
    expected = [digest(next(alone)) for _ in range(8)]
  with Pipeline(cfg, prefetch=0) as here:
    assert producer_phase(here) == "in process"
  with Pipeline(cfg, prefetch=0, planner_process=True) as pipe:
    assert producer_phase(pipe) == "not spawned"
    got = [digest(next(pipe))]  # made here; the planner is spawned after it
    assert producer_phase(pipe) == "starting"
    wait_for_processes(pipe)
    got.append(digest(next(pipe)))
    assert producer_phase(pipe) == "running" and pipe.execution().steps_from_processes == 1
    state = pipe.get_state()
    got += [digest(next(pipe)) for _ in range(2)]
    worker_processes(pipe)[0].kill()
    worker_processes(pipe)[0].wait()
    pipe.set_state(state)  # the dead planner is replaced: steps are made here until it is ready
    assert producer_phase(pipe) == "starting"
    again = [digest(next(pipe)) for _ in range(2)]
    assert again == got[2:4]
    got += [digest(next(pipe)) for _ in range(4)]
  assert got == expected
  producer = WorkerProducer.__new__(WorkerProducer)
  producer.phase = Phase.FELL_BACK
  with pytest.raises(RuntimeError, match="fell back -> running is not a transition"):
    producer._move(Phase.RUNNING)
