"""`build_part`: one process's share of a conversion several processes run together, resumable.

The local runner's phases, with their results kept on a file system every
process sees, so that the hosts of a pod divide one build and a build that
stopped resumes from what it finished::

    every process: the same units (a pure function of the inputs and the process count)
    process i:     tokenize units u with u % count == i -> UNITS/{u}.tokens, .lengths.npy (.masks), then unit-{u}.json
    every process: wait for every unit-*.json -> the same shard plan
    process i:     write shards j with j % count == i into STAGING -> UNITS/shard-{j}.json
    process 0:     wait for every shard-*.json -> manifest.json into STAGING (written last)

A unit or shard counts as done once its JSON record is there (written after
its files, renamed into place): a process that dies mid-unit leaves no
record, and the next run of that process does the unit again. Waiting has a
limit: a process that never finishes is named by its unfinished units.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import os
import time
from collections.abc import Callable
from typing import Any

from jaxdata.conversion.local_runner import (
  process_pool,
  run_jobs,
  shard_jobs,
  tokenize_batch,
  unit_batches,
  write_job,
)
from jaxdata.conversion.options import ConvertOptions
from jaxdata.conversion.plan import ConversionPlan, conversion_plan
from jaxdata.conversion.tokenize_units import (
  UnitResult,
)
from jaxdata.errors import DatasetError, InputFormatError
from jaxdata.sources.manifest import Manifest, ShardInfo

__all__ = ["build_part"]

UNIT_WORKERS = 16  # units are planned as for this many workers, whatever the process count: a resumed build's units
# (with another count, or after a host was replaced) are the same units
RECORD_POLL_S = 0.2
SEE_EACH_OTHER_S = 300.0  # how long the processes wait to see each other in the shared directory


def _record(path: str, value: dict) -> None:
  """A JSON record written whole or not at all (a rename)."""
  with open(f"{path}.tmp-{os.getpid()}", "w") as f:
    json.dump(value, f)
  os.replace(f"{path}.tmp-{os.getpid()}", path)


def _wait_for(
  paths: list[str], what: str, wait_s: float, owner: Callable[[int], int], sealed: Callable[[], bool] = lambda: False
) -> bool:
  """Until every path exists (True), or the build is `sealed` by process 0 meanwhile (False: it may have
  removed the records); a DatasetError naming the missing ones (and which process owns them) after `wait_s`."""
  deadline = time.monotonic() + wait_s
  missing = [i for i, p in enumerate(paths) if not os.path.exists(p)]
  while missing:
    if sealed():
      return False
    _raise_reported(os.path.dirname(paths[0]))
    if time.monotonic() > deadline:
      owners = sorted({owner(i) for i in missing})
      raise DatasetError(
        f"shared build: {len(missing)} {what} not done after {wait_s:.0f} s (the first: number {missing[0]}; "
        f"those of processes {owners[:8]}): a process stopped, runs slowly, or does not see this cache directory "
        "(the processes must share it); run again: finished work is kept"
      )
    time.sleep(RECORD_POLL_S)
    missing = [i for i in missing if not os.path.exists(paths[i])]
  return True


def _check_plan(units_dir: str, plan: list[list[int]]) -> None:
  """The units the kept records are of: the same plan, or (written by another version) none of them is kept."""
  path = os.path.join(units_dir, "plan.json")
  if os.path.exists(path):
    with open(path) as f:
      if json.load(f) == {"units": plan}:
        return
    for entry in os.listdir(units_dir):  # another plan's units: not this build's
      os.remove(os.path.join(units_dir, entry))
  _record(path, {"units": plan})


def _raise_reported(units_dir: str) -> None:
  """A bad input another process met: the same error here (the build cannot finish)."""
  path = os.path.join(units_dir, "error.json")
  if os.path.exists(path):
    with open(path) as f:
      raise InputFormatError(json.load(f)["error"])


def unit_progress(done: int, total: int, elapsed_s: float) -> str:
  """How far a build is, with its elapsed time and (from the rate so far) the time left.

  >>> unit_progress(3, 12, 6.0)
  '3 of 12 units (25%) in 6 s, about 18 s left'
  """
  left = elapsed_s * (total - done) / done if done else 0.0
  tail = f", about {left:,.0f} s left" if done < total else ""
  return f"{done:,} of {total:,} units ({done / total:.0%}) in {elapsed_s:,.0f} s{tail}"


def _read_record(path: str) -> dict[str, Any]:
  with open(path) as f:
    return dict(json.load(f))


def _unit_recorder(
  unit_records: list[str], total: int, say: Callable[[str], None]
) -> Callable[[int, list[UnitResult] | None], None]:
  """What a finished batch of units does: each unit's record written (a rerun skips it), a line per tenth."""
  finished, started = [0], time.monotonic()

  def unit_done(i: int, results: list[UnitResult] | None) -> None:
    for result in results or []:
      _record(unit_records[result.unit], dataclasses.asdict(result))
      finished[0] += 1
      if finished[0] * 10 // total > (finished[0] - 1) * 10 // total:  # a line per tenth
        say(unit_progress(finished[0], total, time.monotonic() - started))

  return unit_done


@dataclasses.dataclass(frozen=True)
class _Share:
  """One process's part of a shared build: its `index` of `count` processes (it owns units and shards
  numbered index mod count), the shared units directory, the staging directory and the dataset's name."""

  index: int
  count: int
  units_dir: str
  staging: str
  name: str

  def owns(self, number: int) -> bool:
    return number % self.count == self.index


def _write_owned_shards(pool: concurrent.futures.Executor | None, plan: ConversionPlan, share: _Share) -> list[str]:
  """Writes the shards this process owns and has not yet written; returns every shard's record path."""
  jobs = shard_jobs(plan, share.units_dir)
  shard_records = [os.path.join(share.units_dir, f"shard-{job[0]}.json") for job in jobs]
  owned = [job for job in jobs if share.owns(job[0]) and not os.path.exists(shard_records[job[0]])]

  def shard_done(i: int, info: ShardInfo | None) -> None:
    if info is not None:
      _record(shard_records[owned[i][0]], info.to_json())

  run_jobs(pool, write_job, owned, (plan.shard_target(share.staging, share.name, share.units_dir),), shard_done)
  return shard_records


def build_part(
  inputs: list[str],
  staging: str,
  units_dir: str,
  name: str,
  options: ConvertOptions,
  index: int = 0,
  *,
  count: int = 1,
  wait_s: float = 3600.0,
  log: Callable[[str], None] = lambda message: None,
  sealed: Callable[[], bool] = lambda: False,
) -> Manifest | None:
  """This process's share of converting `inputs` into `staging` (see the module docstring); process 0
  returns the manifest it wrote, the others None once their shards are written (or once `sealed()` says
  process 0 has finished the cache without needing more of them)."""
  share = _Share(index, count, units_dir, staging, name)
  plan = conversion_plan(inputs, options, UNIT_WORKERS)  # every process plans the same units
  os.makedirs(units_dir, exist_ok=True)
  os.makedirs(staging, exist_ok=True)
  _check_plan(units_dir, [[u.file_index, u.start, -1 if u.end is None else u.end] for u in plan.units])
  processes = [os.path.join(units_dir, f"process-{i}.json") for i in range(count)]
  _record(processes[index], {"index": index, "count": count})
  unit_records = [os.path.join(units_dir, f"unit-{u.index}.json") for u in plan.units]
  ours = [u for u in plan.units if share.owns(u.index)]
  mine = [u for u in ours if not os.path.exists(unit_records[u.index])]
  if len(mine) < len(ours):
    log(f"{name}: resuming: {len(ours) - len(mine)} units of this process done")
  pool = process_pool(min(options.workers or os.cpu_count() or 1, len(mine))) if mine else None
  try:
    unit_done = _unit_recorder(unit_records, len(mine), lambda line: log(f"{name}: {line} tokenized"))
    try:
      run_jobs(
        pool, tokenize_batch, unit_batches(mine, plan.unit_bytes) if mine else [], (options, units_dir), unit_done
      )
    except InputFormatError as error:  # told to the other processes, which stop with it too
      _record(os.path.join(units_dir, "error.json"), {"error": str(error)})
      raise
    # every process must see the others' files (a directory on each host's own disk would wait forever)
    if not _wait_for(processes, "processes", min(wait_s, SEE_EACH_OTHER_S), lambda i: i, sealed):
      return None
    if not _wait_for(unit_records, "units", wait_s, lambda u: u % count, sealed):
      return None
    shard_records = _write_owned_shards(pool, plan, share)
  finally:
    if pool is not None:
      pool.shutdown(wait=True, cancel_futures=True)
  if index != 0:
    return None
  _wait_for(shard_records, "shards", wait_s, lambda j: j % count)
  results = [UnitResult(**_read_record(path)) for path in unit_records]
  manifest = plan.manifest(name, [ShardInfo(**_read_record(path)) for path in shard_records], results)
  manifest.save(staging)
  return manifest
