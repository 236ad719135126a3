"""Where a step's CPU goes: each stage's CPU time per 65,536 non-padding tokens, beside the raw reads'.

    python -m benchmarks.cpu_breakdown --lengths both
    python -m benchmarks.cpu_breakdown --lengths short --mesh 0     # NumPy output
    python -m benchmarks.cpu_breakdown --lengths short --scale 0.3 --shard-kib 512   # 16x the shards

The benchmark workload (benchmarks/pipeline_throughput: 4 datasets, token
shares .62 / .18 / .12 / .08, global shuffle, first_fit 32 x 2048, uint32)
runs in one thread (no prefetch, planned here, no read thread), so that the
process's CPU clock, read around each stage, is that stage's cost, the
ArrayRecord threads' decoding included in the read::

    next()  = plan (the planner: mixture, order, packing)
            + stats (the step's StepStats record)      + state (the state after the step)
            + read (a span's documents, one batched read per dataset, and the padded buffer)
            + assemble (the int32 features)            + output (global jax.Arrays on the mesh)
            + the rest (handing the step out: spans, timers, the stats kept)

The same corpus's raw read ceiling (batched random reads of its records in
the workload's proportions, `run_ceiling`) is measured in the same process
and printed beside it. From the two: the read share of the pipeline's CPU,
and the share of the ceiling the pipeline can reach on C cores when every
core is busy all the time (its rate C x 65,536 / CPU-ms over the ceiling's).
Every run prints the token shares it realised. Medians of --repetitions runs.
"""

from __future__ import annotations

import argparse
import collections
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from benchmarks.make_corpus import CORPORA, VOCABS, corpus_dir, make_corpus
from benchmarks.pipeline_throughput import ROWS, SEQ_LEN, TOKEN_SHARES, _corpora, jaxdata_config, run_ceiling
from jaxdata.cli.parsing import count, positive_count, positive_number

STAGES = ("plan", "stats", "state", "read", "assemble", "output")
WARMUP, STEPS = 100, 320  # 320 steps: five spans of 64 steps, so every step pays its share of a span's read


def _timed(spent: dict[str, float], stage: str, function: Callable[..., Any]) -> Callable[..., Any]:
  def timed(*args: Any, **kwargs: Any) -> Any:
    started = time.process_time()
    try:
      return function(*args, **kwargs)
    finally:
      spent[stage] += time.process_time() - started

  return timed


def breakdown(corpus: str, mesh_devices: int) -> dict[str, Any]:
  """{stage: CPU-ms per 65,536 tokens, "total", "rest", "shares"} for one run in this process."""
  import jax  # noqa: PLC0415 -- after XLA_FLAGS

  import jaxdata  # noqa: PLC0415
  import jaxdata.pipeline.assembly as assembly  # noqa: PLC0415
  import jaxdata.pipeline.makers as makers  # noqa: PLC0415
  import jaxdata.pipeline.pipeline as pipeline_module  # noqa: PLC0415
  import jaxdata.pipeline.sharding as sharding  # noqa: PLC0415
  from jaxdata.pipeline.planner import StepPlanner  # noqa: PLC0415
  from jaxdata.pipeline.stats import StatsRecorder  # noqa: PLC0415

  spent: dict[str, float] = collections.defaultdict(float)
  # Each stage's function, wrapped where the pipeline looks it up (the names its modules imported).
  StepPlanner.plan = _timed(spent, "plan", StepPlanner.plan)  # type: ignore[method-assign]
  StatsRecorder.planned = _timed(spent, "stats", StatsRecorder.planned)  # type: ignore[method-assign]
  pipeline_module.state_snapshot = _timed(spent, "state", pipeline_module.state_snapshot)
  makers.read_span = assembly.read_span = _timed(spent, "read", assembly.read_span)
  assembly.assemble = _timed(spent, "assemble", assembly.assemble)
  sharding.global_arrays = _timed(spent, "output", sharding.global_arrays)

  mesh = jax.make_mesh((mesh_devices,), ("data",)) if mesh_devices else None
  pipe = jaxdata.Pipeline(jaxdata_config(corpus), mesh=mesh, prefetch=0, making=jaxdata.StepMaking("here"))
  for _ in range(WARMUP):
    next(pipe)
  spent.clear()
  tokens, per_source, total = 0, np.zeros(len(TOKEN_SHARES)), 0.0
  for _ in range(STEPS):
    started = time.process_time()
    next(pipe)
    total += time.process_time() - started
    counts = np.array(list(pipe.stats()["tokens_per_source"].values()))  # outside the clock: a loop's own cost
    tokens += int(counts.sum())
    per_source += counts
  pipe.close()
  per_64k = 1e3 * 65_536 / tokens
  out: dict[str, Any] = {stage: spent[stage] * per_64k for stage in STAGES}
  out["total"] = total * per_64k
  out["rest"] = out["total"] - sum(out[s] for s in STAGES)
  out["shares"] = (per_source / tokens).tolist()
  out["efficiency"] = tokens / (STEPS * ROWS * SEQ_LEN)
  return out


def _shards(corpus: str) -> int:
  import jaxdata  # noqa: PLC0415

  count = 0
  for name in TOKEN_SHARES:
    with jaxdata.sources.TokenDataset(os.path.join(corpus, name)) as dataset:
      count += dataset.num_shards
  return count


def _median(runs: list[dict[str, Any]]) -> dict[str, Any]:
  return {
    key: [statistics.median(r[key][i] for r in runs) for i in range(len(value))]
    if isinstance(value, list)
    else statistics.median(r[key] for r in runs)
    for key, value in runs[0].items()
  }


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--corpus", default="/tmp/jaxdata-bench", help="as for benchmarks.pipeline_throughput")
  parser.add_argument("--lengths", default="both", choices=["project", "short", "both"])
  parser.add_argument("--mesh", type=count, default=8, help="CPU devices of the mesh (0: NumPy output)")
  parser.add_argument("--repetitions", type=positive_count, default=3)
  parser.add_argument(
    "--shard-kib",
    type=positive_count,
    help="write the corpora with shards of this many KiB (default: the benchmark corpora's 8 MiB) beside them",
  )
  parser.add_argument(
    "--scale", type=positive_number, default=1.0, help="with --shard-kib: the corpora's size (of ~100M tokens)"
  )
  parser.add_argument("--run", help="one corpus, in this process (used by the driver)")
  args = parser.parse_args()
  if args.run:
    if args.mesh:
      os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={args.mesh}"
    result = breakdown(args.run, args.mesh)
    ceiling = run_ceiling(args.run)
    print({**result, "ceiling_cpu": ceiling["cpu_ms_per_64k"], "ceiling_cores": ceiling["cores"]})
    return
  import ast  # noqa: PLC0415 -- the driver only
  import subprocess  # noqa: PLC0415

  lengths = ["project", "short"] if args.lengths == "both" else [args.lengths]
  if args.shard_kib:  # the same lengths in more (or fewer) shards: what the shard count costs each stage
    corpora = {}
    for name in lengths:
      directory = corpus_dir(f"{args.corpus}-{name}-scale{args.scale:g}-shards{args.shard_kib}k", VOCABS["uint32"])
      make_corpus(
        directory, args.scale, vocab_size=VOCABS["uint32"], shard_bytes=args.shard_kib << 10, specs=CORPORA[name]
      )
      corpora[name] = directory
  else:
    corpora = {name: _corpora(args.corpus, ["uint32"], "zstd", name)["uint32"] for name in lengths}
  runs: dict[str, list[dict[str, Any]]] = {name: [] for name in corpora}
  for _ in range(args.repetitions):  # interleaved: drifts of the machine hit both corpora alike
    for name, corpus in corpora.items():
      command = [sys.executable, "-m", "benchmarks.cpu_breakdown", "--run", corpus, "--mesh", str(args.mesh)]
      out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
      runs[name].append(ast.literal_eval(out.strip().splitlines()[-1]))
  cores = len(os.sched_getaffinity(0))
  output = f"{args.mesh}-device mesh" if args.mesh else "NumPy output"
  print(f"CPU-ms per 65,536 non-padding tokens, uint32, {output}, one thread; medians of {args.repetitions}")
  for name, corpus in corpora.items():
    print(f"  {name}: {corpus}, {_shards(corpus)} shards")
  print(f"{'corpus':8s} " + " ".join(f"{s:>8s}" for s in (*STAGES, "rest", "total")) + "  ceiling  read/total")
  for name, measured in runs.items():
    r = _median(measured)
    print(
      f"{name:8s} "
      + " ".join(f"{r[s]:8.2f}" for s in (*STAGES, "rest", "total"))
      + f"  {r['ceiling_cpu']:7.2f}  {r['read'] / r['total']:10.2f}"
    )
  print(
    f"\nwith all {cores} cores busy, the most of the ceiling each corpus can reach (its CPU against the ceiling's):"
  )
  for name, measured in runs.items():
    r = _median(measured)
    reach = (cores / r["total"]) / (r["ceiling_cores"] / r["ceiling_cpu"])
    shares = " / ".join(f"{s:.3f}" for s in r["shares"])
    print(
      f"  {name:8s} {reach:.2f} (the ceiling keeps {r['ceiling_cores']:.2f} cores busy); "
      f"the non-read stages {r['total'] - r['read']:.2f} ms; realised shares {shares}"
    )


if __name__ == "__main__":
  main()
