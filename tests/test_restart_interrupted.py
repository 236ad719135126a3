"""A restart that does not finish is done again, and a planner that dies while it is steered loses no step.

A restart (after a Ctrl-C in `next()`, in `set_state`, or an update that plans again) stops the
prefetch thread, drops the spans made ahead (waiting for a read under way) and starts the planning
again. A Ctrl-C inside it leaves the restart owed: the next call does it again. Planning in a process
of its own, on a host with cores to spare, the spans are read ahead on the read thread, so a restart
waits for reads: these tests emulate 4 usable cores there.
"""

from __future__ import annotations

import os
import signal
import threading

import jax
import numpy as np
import pytest

from jaxdata import Pipeline, PipelineConfig, StepMaking
from jaxdata.pipeline.assembly import SpanReads
from jaxdata.pipeline.prefetch import Prefetcher
from jaxdata.pipeline.worker_handle import WorkerHandle
from jaxdata.pipeline.worker_pool import WorkerPool
from jaxdata.testing import wait_for_processes, worker_processes
from pipeline_fixtures import as_on_cores, coded_config, digest


def config(tmp_path, **overrides) -> PipelineConfig:
  rng = np.random.default_rng(12)
  arguments = {
    "exhausted_policy": "repeat",
    "shuffle_block_size": "global",
    "packing": {"seq_len": 32, "add_bos": True},
    "batch": {"global_batch_size": 16},
    **overrides,
  }
  return coded_config(tmp_path, [rng.integers(1, 90, 150).tolist(), rng.integers(1, 40, 260).tolist()], **arguments)


@pytest.fixture(scope="module")
def mesh() -> jax.sharding.Mesh:
  return jax.make_mesh((4, 2), ("data", "model"), axis_types=(jax.sharding.AxisType.Auto,) * 2)


def reference(cfg: PipelineConfig, mesh: jax.sharding.Mesh, steps: int) -> list:
  with Pipeline(cfg, mesh=mesh, prefetch=0, making="here") as pipe:
    return [digest(next(pipe)) for _ in range(steps)]


def interrupt_once(monkeypatch: pytest.MonkeyPatch, owner: type, name: str, after_the_call: bool = False) -> None:
  """Ctrl-C in the next call of `owner.name` (before it runs, or once it has run), then the real one."""
  real = getattr(owner, name)

  def interrupted(*args: object, **kwargs: object) -> None:
    monkeypatch.setattr(owner, name, real)
    if after_the_call:
      real(*args, **kwargs)
    raise KeyboardInterrupt

  monkeypatch.setattr(owner, name, interrupted)


def interrupt_restart(monkeypatch: pytest.MonkeyPatch, at_call: int) -> dict[str, int]:
  """Ctrl-C on the `at_call`-th drop of the spans made ahead (each assembly drops its own in a restart)."""
  calls = {"count": 0}
  real = SpanReads.restart

  def restart(self: SpanReads) -> None:
    calls["count"] += 1
    if calls["count"] == at_call:
      raise KeyboardInterrupt
    real(self)

  monkeypatch.setattr(SpanReads, "restart", restart)
  return calls


IN_PROCESSES = [pytest.mark.slow, pytest.mark.multiprocess]


@pytest.mark.parametrize(
  "making,at_call",
  [("here", 1), *(pytest.param("process", at_call, marks=IN_PROCESSES) for at_call in (1, 2, 3))],
)
def test_a_ctrl_c_inside_set_state_leaves_the_restart_to_the_next_call(tmp_path, mesh, monkeypatch, making, at_call):
  # Under a planner process one restart drops three sets of spans: here, here again when the planner
  # starts over, then the planner's side, whose planner is told to start only after it. Each is interrupted
  # in turn; a restart cut off before the planner's `Start` once left next() waiting forever.
  cfg = config(tmp_path)
  want = reference(cfg, mesh, 24)
  as_on_cores(monkeypatch, 4)
  with Pipeline(cfg, mesh=mesh, prefetch=2, making=making, read_ahead_tokens=1024) as pipe:
    if making == "process":
      wait_for_processes(pipe)
    got = [digest(next(pipe)) for _ in range(6)]
    state = pipe.get_state()
    got += [digest(next(pipe)) for _ in range(6)]
    interrupt_restart(monkeypatch, at_call)
    with pytest.raises(KeyboardInterrupt):
      pipe.set_state(state)  # back to step 6
    monkeypatch.undo()  # (the cores too: the pipeline's choices were made when it was built)
    got += [digest(next(pipe)) for _ in range(18)]
    assert pipe.execution().read_thread
  assert got == want[:12] + want[6:24]


@pytest.mark.slow
@pytest.mark.multiprocess
def test_a_second_ctrl_c_while_next_restarts_leaves_it_to_the_call_after(tmp_path, mesh, monkeypatch):
  cfg = config(tmp_path)
  want = reference(cfg, mesh, 20)
  as_on_cores(monkeypatch, 4)
  with Pipeline(cfg, mesh=mesh, prefetch=2, making="process", read_ahead_tokens=1024) as pipe:
    wait_for_processes(pipe)
    got = [digest(next(pipe)) for _ in range(5)]
    interrupt_once(monkeypatch, Prefetcher, "get")
    with pytest.raises(KeyboardInterrupt):
      next(pipe)  # the first Ctrl-C, while next() waits for a step: the next call restarts first
    calls = interrupt_restart(monkeypatch, 3)
    with pytest.raises(KeyboardInterrupt):
      next(pipe)  # the second Ctrl-C, inside that restart
    assert calls["count"] == 3
    got += [digest(next(pipe)) for _ in range(15)]
    assert pipe.execution().steps_from_processes > 0
  assert got == want


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.parametrize("cores", [4, 2], ids=["read-thread", "two-cores"])
def test_a_planner_killed_while_the_loop_steers_loses_no_step(tmp_path, mesh, monkeypatch, cores):
  # With mixture updates the pipeline tells the planner how far it may plan after every step handed out;
  # told to a dead planner, that message once raised after the batch was taken: two steps were lost and
  # the stream ended early. Now its death is raised once, where its next span is awaited, if at all.
  cfg = config(tmp_path, exhausted_policy="stop")
  with Pipeline(cfg, mesh=mesh, prefetch=0, making="here") as pipe:
    want = [digest(batch) for batch in pipe]
  as_on_cores(monkeypatch, cores)
  got, errors = [], []
  with Pipeline(cfg, mesh=mesh, prefetch=2, making="process", read_ahead_tokens=64) as pipe:
    while True:
      try:
        got.append(digest(next(pipe)))
      except StopIteration:
        break
      except RuntimeError as error:  # the planner's death, named
        errors.append(str(error))
        continue
      if len(got) == 3:
        pipe.update_mixture({"d0": 1.0, "d1": 1.0})  # steering on
        wait_for_processes(pipe)
      if len(got) in (8, len(want) - 2):  # once mid-stream, once when the last steps are made ahead
        wait_for_processes(pipe)
        planner = worker_processes(pipe)[0]
        os.kill(planner.pid, signal.SIGKILL)
        planner.wait()
  assert got == want
  assert all("jaxdata planner" in e and "exited with code -9" in e for e in errors) and len(errors) <= 2


def earliest_update_step(pipe: Pipeline) -> int:
  """The first step an update may start at: the next step, or the first whose documents are not drawn yet."""
  state = pipe.get_state()
  return max(state["step"], int(state["stream"].get("next_step", 0)))


@pytest.mark.parametrize("where", ["waiting for the prefetch thread", "telling the planning"])
def test_an_update_cut_off_by_ctrl_c_is_whole_or_not_made(tmp_path, mesh, monkeypatch, where):
  # An update at the earliest step plans the steps made ahead again: the prefetch thread is stopped first
  # (a Ctrl-C there once left the stopped thread in place: batches planned without the update, then a
  # false "prefetch thread ended" error). Cut off before the planning has it, the update is not made.
  cfg = config(tmp_path)
  weights = {"d0": 1.0, "d1": 3.0}
  with Pipeline(cfg, mesh=mesh, prefetch=2, making="here", read_ahead_tokens=512) as pipe:
    got = [digest(next(pipe)) for _ in range(6)]
    at_step = earliest_update_step(pipe)
    if where == "telling the planning":
      monkeypatch.setattr("jaxdata.pipeline.steps.Steps.adopt_updates", interrupting)
    else:
      real_stop = Prefetcher.stop
      monkeypatch.setattr(Prefetcher, "stop", lambda self, wait=True: interrupting() if wait else real_stop(self, wait))
    with pytest.raises(KeyboardInterrupt):
      pipe.update_mixture(weights, at_step)
    monkeypatch.undo()
    made = bool(pipe.get_state()["stream"].get("updates"))
    got += [digest(next(pipe)) for _ in range(12)]
    state = pipe.get_state()
  assert made == (where == "waiting for the prefetch thread")  # there the planning had it already
  with Pipeline(cfg, mesh=mesh, prefetch=0, making="here") as pipe:
    want = [digest(next(pipe)) for _ in range(6)]
    if made:
      pipe.update_mixture(weights, at_step)
    want += [digest(next(pipe)) for _ in range(12)]
    assert pipe.get_state() == state
  assert got == want


def interrupting(*_args: object, **_kwargs: object) -> None:
  raise KeyboardInterrupt


def test_a_ctrl_c_after_next_took_its_step_hands_that_step_out_on_the_next_call(tmp_path, mesh, monkeypatch):
  # next() takes the step, then tells the planning how far it may plan (with updates on, it may wait
  # for a planner process's start): a Ctrl-C there once lost the step taken.
  cfg = config(tmp_path)
  want = reference(cfg, mesh, 16)
  with Pipeline(cfg, mesh=mesh, prefetch=2, making="here", read_ahead_tokens=512) as pipe:
    got = [digest(next(pipe)) for _ in range(5)]
    monkeypatch.setattr("jaxdata.pipeline.steering.MixtureSteering.handed_out", interrupting)
    with pytest.raises(KeyboardInterrupt):
      next(pipe)
    monkeypatch.undo()
    assert pipe.get_state()["step"] == 5  # the step taken was not handed out
    got += [digest(next(pipe)) for _ in range(11)]
  assert got == want


def test_a_ctrl_c_as_the_prefetch_thread_starts_leaves_no_thread_behind(tmp_path, mesh, monkeypatch):
  # A thread started before the pipeline held it could not be stopped: a second one then made steps
  # from the same planning, and the batches went wrong.
  cfg = config(tmp_path)
  want = reference(cfg, mesh, 12)
  interrupt_once(monkeypatch, Prefetcher, "start", after_the_call=True)
  before = {thread.ident for thread in threading.enumerate()}  # (other tests' threads may still end)
  with Pipeline(cfg, mesh=mesh, prefetch=2, making="here", read_ahead_tokens=512) as pipe:
    with pytest.raises(KeyboardInterrupt):
      next(pipe)
    got = [digest(next(pipe)) for _ in range(12)]
    ours = [t for t in threading.enumerate() if t.name == "jaxdata-prefetch" and t.ident not in before]
    assert len(ours) == 1  # the interrupted one was stopped
  assert got == want


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.parametrize("readers", [0, 1])
def test_a_ctrl_c_between_a_message_and_its_payload_replaces_the_worker(tmp_path, mesh, monkeypatch, readers):
  # Where next() reads the pipe itself (no prefetch thread, or reader processes), a Ctrl-C between a span's
  # header and its pieces left the pipe out of step: a garbage length, then a wait forever or a false error.
  cfg = config(tmp_path)
  want = reference(cfg, mesh, 20)
  making = StepMaking("process", reader_processes=readers)
  with Pipeline(cfg, mesh=mesh, prefetch=0, making=making, read_ahead_tokens=512) as pipe:
    got = [digest(next(pipe)) for _ in range(2)]
    wait_for_processes(pipe)
    got += [digest(next(pipe)) for _ in range(3)]
    planner = worker_processes(pipe)[0]
    interrupt_once(monkeypatch, WorkerHandle, "payload")
    with pytest.raises(KeyboardInterrupt):
      while len(got) < 20:  # until next() reads a span's header
        got.append(digest(next(pipe)))
    assert planner.wait(timeout=10) != 0  # out of step: killed
    got += [digest(next(pipe)) for _ in range(20 - len(got))]
    wait_for_processes(pipe)
    assert worker_processes(pipe)[0].pid != planner.pid  # replaced
  assert got == want


class _LockCutOffOnRelease:
  """The pipeline's call lock, with one Ctrl-C as it is let go: where a real one lands when it arrives
  after the step was handed out and before `next()` returned."""

  def __init__(self, lock: object) -> None:
    self.lock, self.cut = lock, False

  def __enter__(self) -> None:
    self.lock.__enter__()

  def __exit__(self, *exc: object) -> None:
    self.lock.__exit__(*exc)
    if not self.cut and exc[0] is None:
      self.cut = True
      raise KeyboardInterrupt


def test_a_ctrl_c_as_next_lets_go_of_its_lock_hands_that_step_out_on_the_next_call(tmp_path, mesh):
  cfg = config(tmp_path)
  want = reference(cfg, mesh, 10)
  with Pipeline(cfg, mesh=mesh, prefetch=2, making="here", read_ahead_tokens=512) as pipe:
    got = [digest(next(pipe)) for _ in range(4)]
    before = pipe.get_state()
    pipe._calls = _LockCutOffOnRelease(pipe._calls)  # the one way in to that instant
    with pytest.raises(KeyboardInterrupt):
      next(pipe)
    assert pipe.get_state() == before  # step 5 was not handed out: a checkpoint now resumes at it
    got += [digest(next(pipe)) for _ in range(6)]
    assert pipe.get_state()["step"] == 10
  assert got == want


def test_a_prefetch_thread_cut_off_as_it_started_never_makes_a_step(tmp_path, mesh, monkeypatch):
  # A Ctrl-C inside Thread.start() can leave a thread that runs but is not yet alive to join: the restart
  # did not wait for it, and it made steps from the same planning as its successor (batches of no step).
  cfg = config(tmp_path)
  want = reference(cfg, mesh, 12)
  late = threading.Event()
  real_start = threading.Thread.start

  def cut_off(prefetcher: Prefetcher) -> None:
    monkeypatch.setattr(Prefetcher, "start", lambda self: real_start(self.thread))
    threading.Timer(0.3, lambda: (real_start(prefetcher.thread), late.set())).start()  # it runs, later
    raise KeyboardInterrupt

  monkeypatch.setattr(Prefetcher, "start", cut_off)
  with Pipeline(cfg, mesh=mesh, prefetch=2, making="here", read_ahead_tokens=512) as pipe:
    got = []
    with pytest.raises(KeyboardInterrupt):
      next(pipe)
    got.append(digest(next(pipe)))  # the restart does not wait for the thread that is not yet running
    assert late.wait(10)
    got += [digest(next(pipe)) for _ in range(11)]
  assert got == want


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.parametrize("readers", [0, 1])
def test_a_worker_that_dies_inside_a_restart_is_replaced_without_an_error(tmp_path, mesh, monkeypatch, readers):
  # It died after the pool looked for dead workers and before the restart reached it: set_state raised
  # WorkerGone, although the state had taken effect.
  cfg = config(tmp_path)
  want = reference(cfg, mesh, 16)
  making = StepMaking("process", reader_processes=readers)
  with Pipeline(cfg, mesh=mesh, prefetch=2, making=making, read_ahead_tokens=512) as pipe:
    wait_for_processes(pipe)
    got = [digest(next(pipe)) for _ in range(6)]
    state = pipe.get_state()
    got += [digest(next(pipe)) for _ in range(2)]
    victim = worker_processes(pipe)[-1]
    victim.kill()
    victim.wait()
    real = WorkerPool.replace_dead

    def looked_too_early(pool: WorkerPool) -> bool:  # the pool's look for dead workers, before the death
      monkeypatch.setattr(WorkerPool, "replace_dead", real)
      return False

    monkeypatch.setattr(WorkerPool, "replace_dead", looked_too_early)
    pipe.set_state(state)
    assert WorkerPool.replace_dead is real  # the restart did look first
    got += [digest(next(pipe)) for _ in range(10)]
    wait_for_processes(pipe)
    assert victim.pid not in [p.pid for p in worker_processes(pipe)]  # replaced
  assert got == want[:8] + want[6:16]
