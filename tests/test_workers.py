"""Worker processes (`Pipeline(..., workers=n)`): the same batches and states as
in process, the same failure semantics, and nothing left behind."""

from __future__ import annotations

import gc
import json
import multiprocessing
import os
import signal
import subprocess

import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec

from checkpoint_property import assert_restores_exactly
from jaxdata import DatasetError, Pipeline, PipelineConfig
from jaxdata.pipeline.execution import StepMaking
from jaxdata.pipeline.messages import PLANNER, Credit, SpanPlanned, Start, WorkerSpec, message_from_json
from jaxdata.pipeline.pipeline_parts import open_parts, state_snapshot
from jaxdata.pipeline.planner import StepPlanner
from jaxdata.pipeline.read_spans import assemble, decode_span, encode_span, plan_span, read_span
from jaxdata.pipeline.spec import PipelineSpec
from jaxdata.pipeline.stats import StatsRecorder
from jaxdata.pipeline.worker_process import _Planning
from jaxdata.testing import recorded_reads, start_processes, wait_for_processes, worker_processes
from pipeline_fixtures import coded_config, digest

pytestmark = [pytest.mark.slow, pytest.mark.multiprocess]

STEPS = 24


@pytest.fixture(scope="module")
def cfg(tmp_path_factory) -> PipelineConfig:
  rng = np.random.default_rng(11)
  tmp = tmp_path_factory.mktemp("workers")
  return coded_config(
    tmp,
    [rng.integers(1, 90, 150).tolist(), rng.integers(1, 40, 260).tolist()],
    exhausted_policy="repeat",
    shuffle_block_size="global",
    packing={"seq_len": 32, "add_bos": True, "add_eos": True},
    batch={"global_batch_size": 16},
  )


def run(pipe: Pipeline, steps: int) -> list[tuple]:
  """(batch digest, state) of each step."""
  out = []
  for _ in range(steps):
    batch = next(pipe)
    out.append((digest(batch), json.dumps(pipe.get_state(), sort_keys=True)))
  return out


def ready(pipe: Pipeline) -> Pipeline:
  """Waits for the workers, so that the steps compared are theirs, not the in-process start."""
  wait_for_processes(pipe)
  return pipe


@pytest.fixture(scope="module")
def reference(cfg) -> list[tuple]:
  with Pipeline(cfg, prefetch=0) as pipe:
    return run(pipe, STEPS)


@pytest.mark.parametrize("workers,prefetch", [(1, 0), (2, 2), (3, 1)])
def test_workers_give_the_in_process_batches_and_states(cfg, reference, workers, prefetch):
  with Pipeline(cfg, prefetch=prefetch, workers=workers) as pipe:
    ready(pipe)
    assert run(pipe, STEPS) == reference
    execution = pipe.execution()
    assert execution.steps_from_processes >= STEPS - prefetch  # the workers made them
    # Read spans (1, 2, 4, ... steps) go to the readers in turn: every reader made steps.
    assert sum(execution.steps_per_reader) == execution.steps_from_processes
    assert min(execution.steps_per_reader) > 0
  # Without waiting: the first steps are made in process, the rest by workers, seamlessly.
  with Pipeline(cfg, prefetch=prefetch, workers=workers) as pipe:
    assert run(pipe, STEPS) == reference


@pytest.mark.parametrize("prefetch", [0, 2])
def test_a_planner_process_gives_the_in_process_batches_and_states(cfg, reference, prefetch):
  # workers=0: only the planning leaves; this process reads and assembles the planner's spans.
  with Pipeline(cfg, prefetch=prefetch, making="process") as pipe:
    ready(pipe)
    assert pipe.execution().processes == ("jaxdata planner",)
    assert pipe.execution().assembles_here  # so the prefetch thread runs here
    assert run(pipe, STEPS) == reference
    assert pipe.execution().steps_from_processes >= STEPS - prefetch  # planned by the planner process
    assert set(pipe.stats()["time_s"]) == {"plan", "read", "assemble", "wait"}
  with Pipeline(cfg, prefetch=prefetch, making="process") as pipe:  # without waiting: a seamless hand-over
    assert run(pipe, STEPS) == reference


def test_a_planner_without_readers_plans_three_spans_then_one_per_credit(cfg):
  """docs/performance.md: one span being handed out here, one read ahead, one waiting; no more until a
  credit comes back.
  The planner's own loop, driven step by step: the order of events, no waiting on a clock."""
  parts = open_parts(PipelineSpec(cfg))
  ours, theirs = multiprocessing.Pipe()
  rows = {f"{r}x{s}": list(range(r)) for r, s in cfg.row_shapes()}
  spec = WorkerSpec(PLANNER, 0, 0, -1, 2, 1, rows, 600, cfg.layout.to_json())
  role = _Planning(theirs, cfg, spec, parts)
  try:
    role.generation = 0
    state = state_snapshot(parts.planner, parts.fingerprint, role.recorder)
    wire = json.loads(json.dumps(Start(0, state).to_json()))  # as the pipe carries it
    role.start(message_from_json(wire))

    def plan_until_waiting() -> int:
      planned = 0
      while not role.waiting() and planned < 10:  # (a planner that ignored its credits would go on)
        role.work()
        planned += 1
      return planned

    assert plan_until_waiting() == 3  # its three credits, then it waits
    for _ in range(3):
      role.handle(Credit(0), b"")
      assert plan_until_waiting() == 1  # each credit: exactly one more span
    received = []
    while ours.poll():
      received.append(message_from_json(json.loads(ours.recv_bytes())))
      ours.recv_bytes()  # its payload
    assert [type(m) for m in received] == [SpanPlanned] * 6
    steps = [header["step"] for m in received for header in m.steps]
    assert steps == list(range(len(steps)))  # consecutive spans of consecutive steps
  finally:
    parts.reader.close()
    ours.close()
    theirs.close()


def test_a_span_sent_to_a_reader_arrives_whole_and_assembles_the_same(cfg):
  planner = StepPlanner(cfg)
  recorder = StatsRecorder(cfg.names, cfg.mixture.unit, planner.stream, None)
  rows = np.array([1, 4, 5, 6, 11])  # a host's rows need not be contiguous
  span = plan_span(planner, recorder, lambda _rows, _seq_len: rows, 2_000, dict)
  assert len(span.steps) == 2_000 // (rows.size * 32) + 1 and not span.ended
  header, payload = encode_span(span.steps)
  decoded = decode_span(json.loads(json.dumps(header)), bytes(payload))
  for sent, got in zip(span.steps, decoded, strict=True):
    assert (sent.step, sent.seq_len, sent.num_rows) == (got.step, got.seq_len, got.num_rows)
    for name in ("dataset", "pass_index", "record", "offset", "length", "doc_length"):
      assert getattr(sent.pieces, name).tolist() == getattr(got.pieces, name).tolist()
    assert sent.host_row.tolist() == got.host_row.tolist() and sent.column.tolist() == got.column.tolist()
  parts = open_parts(PipelineSpec(cfg))
  try:
    for sent, got in zip(read_span(parts.reader, span.steps, 0), read_span(parts.reader, decoded, 0)):
      want, have = assemble(sent, cfg.packing, cfg.layout), assemble(got, cfg.packing, cfg.layout)
      assert all(np.array_equal(want[name], have[name]) for name in want)
  finally:
    parts.reader.close()


def test_workers_on_a_mesh_give_the_same_global_arrays(cfg):
  mesh = jax.make_mesh((4, 2), ("data", "model"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
  with Pipeline(cfg, mesh=mesh, prefetch=0) as pipe:
    want = [digest(next(pipe)) for _ in range(8)]
  for kind in ({"making": StepMaking("process", reader_processes=2)}, {"making": "process"}):
    with Pipeline(cfg, mesh=mesh, prefetch=1, **kind) as pipe:
      ready(pipe)
      batches = [next(pipe) for _ in range(8)]
      assert [digest(b) for b in batches] == want, kind
      assert batches[0]["tokens"].sharding == NamedSharding(mesh, PartitionSpec(("data",), None))
      assert set(pipe.stats()["time_s"]) == {"plan", "read", "assemble", "wait", "output"}


@pytest.mark.parametrize("kind", [{"making": StepMaking("process", reader_processes=2)}, {"making": "process"}])
def test_state_at_every_step_restores_the_same_remaining_output(cfg, kind):
  def make() -> Pipeline:
    return ready(Pipeline(cfg, prefetch=0, **kind))

  def advance(pipe: Pipeline, n: int) -> list[tuple]:
    return [digest(next(pipe)) for _ in range(n)]

  assert_restores_exactly(make, advance, total=12, stops=[0, 5, 11])


@pytest.mark.parametrize("kind", [{"making": StepMaking("process", reader_processes=2)}, {"making": "process"}])
def test_set_state_while_running_restarts_the_workers(cfg, reference, kind):
  with Pipeline(cfg, prefetch=2, **kind) as pipe:
    ready(pipe)
    run(pipe, 15)
    pipe.set_state(json.loads(reference[6][1]))
    assert run(pipe, STEPS - 7) == reference[7:]


def _corrupt(path: str) -> bytes:
  """Overwrites the first records' bytes in place (same size); returns the original bytes."""
  original = open(path, "rb").read()
  with open(path, "r+b") as f:
    f.seek(100)
    f.write(b"\xff" * 900)
  return original


@pytest.mark.parametrize("kind", [{}, {"making": StepMaking("process", reader_processes=1)}, {"making": "process"}])
def test_a_shard_corrupted_under_a_reader_is_a_named_error_and_the_step_is_retried(cfg, reference, kind):
  shards = sorted(f for f in os.listdir(cfg.datasets[0].path) if f.endswith(".array_record"))
  with Pipeline(cfg, prefetch=0, **kind) as pipe:
    ready(pipe)
    assert run(pipe, 2) == reference[:2]
    originals = {s: _corrupt(os.path.join(cfg.datasets[0].path, s)) for s in shards}
    try:
      with pytest.raises(DatasetError, match=r"d0-\d+\.array_record"):
        for _ in range(STEPS):
          next(pipe)
    finally:
      for shard, data in originals.items():
        with open(os.path.join(cfg.datasets[0].path, shard), "wb") as f:
          f.write(data)
    # Nothing skipped: the pipeline is just after the last batch handed out. (A worker
    # restarted at once may still have read a file being restored: at most a few more errors.)
    done = pipe.get_state()["step"]
    rest, errors = [], 0
    while len(rest) < STEPS - done:
      try:
        rest.extend(run(pipe, 1))
      except DatasetError:
        errors += 1
        assert errors <= 3
    assert rest == reference[done:]


@pytest.mark.parametrize(
  "kind,victim_index,name",
  [
    ({"making": StepMaking("process", reader_processes=2)}, 0, "jaxdata planner"),
    ({"making": StepMaking("process", reader_processes=2)}, 2, "jaxdata reader 1"),
    ({"making": "process"}, 0, "jaxdata planner"),
  ],
)
def test_a_killed_worker_is_an_error_naming_it_then_is_replaced(cfg, reference, kind, victim_index, name):
  with Pipeline(cfg, prefetch=0, **kind) as pipe:
    ready(pipe)
    assert run(pipe, 3) == reference[:3]
    victim = worker_processes(pipe)[victim_index]
    os.kill(victim.pid, signal.SIGKILL)
    victim.wait()
    with pytest.raises(RuntimeError, match=name + r" \(pid \d+\) (exited with code -9|closed its pipe)"):
      for _ in range(STEPS):
        next(pipe)
    done = pipe.get_state()["step"]
    assert run(pipe, STEPS - done) == reference[done:]
    assert worker_processes(pipe)[victim_index].pid != victim.pid


def test_a_worker_that_dies_while_starting_is_named_when_waited_for(cfg):
  """Killed before it could open the data (its imports take far longer than
  the kill): waiting for it raises naming it instead of starting it again and again."""
  with Pipeline(cfg, prefetch=0, making=StepMaking("process", reader_processes=1)) as pipe:
    start_processes(pipe)
    victim = worker_processes(pipe)[0]
    os.kill(victim.pid, signal.SIGKILL)
    victim.wait()
    with pytest.raises(RuntimeError, match=r"jaxdata planner \(pid \d+\) (exited with code -9|closed its pipe)"):
      wait_for_processes(pipe)


def test_close_stops_the_workers_and_frees_the_shared_memory(cfg):
  named_before, rings_before, children_before = set(os.listdir("/dev/shm")), _slot_descriptors(), _children()
  pipe = ready(Pipeline(cfg, prefetch=1, making=StepMaking("process", reader_processes=2)))
  next(pipe)
  processes = worker_processes(pipe)
  assert len(processes) == 3  # the planner and two readers
  # The slot rings are anonymous: nothing named in /dev/shm, no resource-tracker process.
  assert set(os.listdir("/dev/shm")) == named_before
  # (Another test in this process may have started a tracker already: only a new one counts.)
  children = _children()
  assert ("resource_tracker" in children) == ("resource_tracker" in children_before)
  assert children.count("jaxdata.pipeline.worker_process") == 3
  assert len(_slot_descriptors()) > len(rings_before)
  pipe.close()
  assert all(p.poll() is not None for p in processes)
  assert _slot_descriptors() == rings_before  # unmapped and closed here too


def _children() -> str:
  """The command lines of this process's children."""
  return subprocess.run(["ps", "-o", "args=", "--ppid", str(os.getpid())], capture_output=True, text=True).stdout


def _slot_descriptors() -> list[str]:
  """This process's open descriptors of slot rings."""
  links = []
  for fd in os.listdir("/proc/self/fd"):
    try:
      links.append(os.readlink(f"/proc/self/fd/{fd}"))
    except OSError:  # the listing's own descriptor, closed meanwhile
      pass
  return [link for link in links if "jaxdata-slots" in link]


@pytest.mark.parametrize(
  "kind,count", [({"making": StepMaking("process", reader_processes=1)}, 2), ({"making": "process"}, 1)]
)
def test_an_unreferenced_pipeline_stops_its_workers(cfg, kind, count):
  pipe = ready(Pipeline(cfg, prefetch=1, **kind))
  next(pipe)
  processes = worker_processes(pipe)
  assert len(processes) == count
  del pipe
  gc.collect()
  assert [p.wait(timeout=60) for p in processes] == [0] * count  # generous: a loaded 2-core machine


def test_workers_must_be_a_count_and_exclude_recorded_reads(cfg):
  with pytest.raises(ValueError, match="workers: must be an int >= 0, got -1"):
    Pipeline(cfg, workers=-1)
  with pytest.raises(ValueError, match="planner_process: must be True, False or None, got 'yes'"):
    Pipeline(cfg, planner_process="yes")
  with recorded_reads(), pytest.raises(ValueError, match="making: reads cannot be recorded"):
    Pipeline(cfg, workers=1)


def test_a_worker_that_cannot_open_the_data_is_an_error_then_is_retried(cfg):
  """The data moves away just after the pipeline opened it (the workers open
  theirs while starting): the worker's error is raised from next(), in process
  steps go on meanwhile, and once the data is back a new worker takes over."""
  path = cfg.datasets[0].path
  with Pipeline(cfg, prefetch=0, making=StepMaking("process", reader_processes=1)) as pipe:
    os.rename(path, path + ".away")
    try:
      got, errors = [], 0
      while not errors:
        try:
          got.extend(run(pipe, 1))
        except DatasetError as e:
          assert "manifest" in str(e) and path in str(e)
          errors += 1
    finally:
      os.rename(path + ".away", path)
    # Each worker (the planner and the reader) reports its failed start once, in whichever call
    # reads its message: the other's report may still be on its way when next() raised.
    for _ in range(2):
      try:
        wait_for_processes(pipe)
        break
      except DatasetError as e:
        assert "manifest" in str(e) and path in str(e)
    else:
      wait_for_processes(pipe)  # a third failure is a real one
    before = pipe.execution().steps_from_processes
    got.extend(run(pipe, 5))
    assert pipe.execution().steps_from_processes == before + 5  # the new worker made them
  with Pipeline(cfg, prefetch=0) as uninterrupted:
    assert got == run(uninterrupted, len(got))  # nothing skipped or repeated


def test_worker_processes_start_under_a_global_socket_timeout(tmp_path):
  """socket.setdefaulttimeout (Beam's GCP auth sets 60 s once gs:// is read through it) makes new sockets
  non-blocking underneath; the worker's pipe must stay blocking, or the worker dies at its first read."""
  import socket  # noqa: PLC0415

  cfg = coded_config(tmp_path, [[5, 9, 3, 12] * 10, [7, 2, 8] * 10])
  with Pipeline(cfg, prefetch=0, making="here") as pipe:
    expected = [digest(next(pipe)) for _ in range(6)]
  before = socket.getdefaulttimeout()
  socket.setdefaulttimeout(60)
  try:
    with Pipeline(cfg, prefetch=2, making=StepMaking("process", reader_processes=1)) as pipe:
      start_processes(pipe)
      wait_for_processes(pipe)
      assert [digest(next(pipe)) for _ in range(6)] == expected
      assert pipe.execution().steps_from_processes > 0
  finally:
    socket.setdefaulttimeout(before)
