"""`step_maker`: the `StepMaker` a pipeline's `StepMaking` choice asks for.

    StepMaking("here")                    Steps(LocalPlanning, LocalAssembly)
    StepMaking("process")                 PooledSteps: Steps(ProcessPlanning, LocalAssembly), reading
                                          spans ahead on a thread where cores are to spare
    StepMaking("process", reader_processes=n)  PooledSteps: Steps(ProcessPlanning, ReaderProcesses)
    StepMaking("auto")                    "process" with a mesh on >= PLANNER_PROCESS_MIN_CORES usable
                                          cores (falling back to "here"), else "here"

Every `PooledSteps` holds the "here" pair too: it makes the steps until the
processes are ready. The process modules are imported only when asked for:
not on the default's first batch.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from jaxdata._lazy import lazy_module
from jaxdata.checkpoint.state import PipelineState
from jaxdata.pipeline.assembly import Assembly, LocalAssembly, OutputRows
from jaxdata.pipeline.execution import StepMaking
from jaxdata.pipeline.pipeline_parts import Parts
from jaxdata.pipeline.planning import LocalPlanning
from jaxdata.pipeline.producing import StepMaker
from jaxdata.pipeline.read_spans import RowsHere, read_span
from jaxdata.pipeline.read_thread import ReadThread
from jaxdata.pipeline.sharding import aliases_host_memory, output_functions
from jaxdata.pipeline.spec import PipelineSpec
from jaxdata.pipeline.stats import StatsRecorder
from jaxdata.pipeline.steps import Steps

if TYPE_CHECKING:
  import jaxdata.pipeline.planning_process as planning_process
  import jaxdata.pipeline.pooled_steps as pooled_steps
  import jaxdata.pipeline.reader_processes as reader_processes
  import jaxdata.pipeline.worker_pool as worker_pool
else:  # the process modules: imported when processes are asked for
  planning_process = lazy_module("jaxdata.pipeline.planning_process")
  pooled_steps = lazy_module("jaxdata.pipeline.pooled_steps")
  reader_processes = lazy_module("jaxdata.pipeline.reader_processes")
  worker_pool = lazy_module("jaxdata.pipeline.worker_pool")

__all__ = ["PLANNER_PROCESS_MIN_CORES", "cores_to_spare", "planner_process_helps", "step_maker"]

# Usable cores from which `StepMaking("auto")` plans in a process of its own (with a mesh). On 2
# cores it does not pay (benchmarks/pipeline_throughput, uint32: 29.2M tokens/s with it against 33.4M
# in process): the planner takes a core the read thread and the assembly need. With more, it takes
# the planning (~a third of the GIL time a step costs this process) off the training process.
PLANNER_PROCESS_MIN_CORES = 4


def planner_process_helps(mesh: Any, reader_processes: int = 0) -> bool:
  """Where "auto" plans in a process of its own: with a mesh on at least PLANNER_PROCESS_MIN_CORES
  usable cores. With NumPy output (tests, notebooks, evaluation on the host) no process is started
  unasked."""
  return mesh is not None and not reader_processes and cores_to_spare()


def cores_to_spare() -> bool:
  """Whether this host has PLANNER_PROCESS_MIN_CORES usable cores: a planner process and a read
  thread beside the prefetch thread then each get a core (under a planner process this process
  reads spans ahead on a thread only then)."""
  return _usable_cores() >= PLANNER_PROCESS_MIN_CORES


def _usable_cores() -> int:
  if hasattr(os, "sched_getaffinity"):
    return len(os.sched_getaffinity(0))
  return os.cpu_count() or 1


def step_maker(
  making: StepMaking,
  mesh: Any,
  spec: PipelineSpec,
  parts: Parts,
  recorder: StatsRecorder,
  rows_here: RowsHere,
  *,
  snapshot: Callable[[], PipelineState],
  prefetch: int,
  read_ahead_tokens: int,
  aligned: bool,
) -> StepMaker:
  """The steps `making` asks for (see the module docstring)."""
  cfg, reader = parts.cfg, parts.reader
  rows = OutputRows(cfg.layout, aligned)
  # One read thread, started on first use (each assembly says whether it reads ahead on it).
  thread = ReadThread(functools.partial(read_span, reader, pad_id=cfg.packing.fill_id)) if prefetch else None
  here = Steps(
    LocalPlanning(parts.planner, recorder, rows_here, snapshot, read_ahead_tokens),
    LocalAssembly(cfg.packing, reader, recorder, rows, thread, reads_disk_ahead=True),
  )
  if not making.planner_process_asked and not (making.planning == "auto" and planner_process_helps(mesh)):
    return here
  readers = making.reader_processes
  fall_back = not making.planner_process_asked
  pool = worker_pool.WorkerPool.for_host(
    spec, cfg, readers, rows_here, prefetch + 1, read_ahead_tokens, fingerprint=parts.fingerprint, fall_back=fall_back
  )
  assembly: Assembly = (
    reader_processes.ReaderProcesses(pool, recorder, rows)
    if readers
    else LocalAssembly(cfg.packing, reader, recorder, rows, thread, reads_disk_ahead=cores_to_spare())
  )
  there = Steps(planning_process.ProcessPlanning(pool, recorder), assembly)
  return pooled_steps.PooledSteps(pool, here, there, snapshot())


def sharded_maker(
  making: StepMaking,
  spec: PipelineSpec,
  parts: Parts,
  recorder: StatsRecorder,
  snapshot: Callable[[], PipelineState],
  *,
  sharding: Any,
  prefetch: int,
  read_ahead: int,
) -> tuple[StepMaker, RowsHere, Callable[..., dict[str, Any]] | None]:
  """The step maker of a pipeline whose batches take `sharding` (None: NumPy), with the rows this process
  holds of each step shape and how its rows become the batch; the parts' reader is closed on an error."""
  rows_here, output = output_functions(sharding)
  rows_here = functools.lru_cache(maxsize=8)(rows_here)
  try:
    maker = step_maker(
      making,
      None if sharding is None else sharding.mesh,
      spec,
      parts,
      recorder,
      rows_here,
      snapshot=snapshot,
      prefetch=prefetch,
      read_ahead_tokens=read_ahead,
      aligned=aliases_host_memory(sharding),
    )
  except BaseException:  # re-raised: nothing may stay open
    parts.reader.close()
    raise
  return maker, rows_here, output
