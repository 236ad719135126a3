"""Remote datasets over a network's latency: local files vs a bucket at 0-100 ms, in one run.

    python -m benchmarks.remote_throughput [--out /tmp/jaxdata-remote-bench] [--store s3|gs]

A quarter-size benchmark corpus in 256 KB ArrayRecord shards (about 200
shards, 50 MB) and the same documents as flat token files, uploaded to a
local object store (moto's S3 or the GCS emulator, on 127.0.0.1, on the
same two cores: its own throughput bounds every remote figure here). In
front of it, `benchmarks.latency_proxy` adds a per-request latency of 0, 20,
50 and 100 ms and caps each connection at 100 MB/s, as a TPU host sees a
bucket. Every run uses the mesh defaults (an 8-device CPU mesh, the planner
in a process of its own) and a cache of 10% of the corpus, in a fresh
subprocess with a cold cache. Layouts:

  open_shards   ArrayRecord, the two-level streaming order: 2 open shards per
                dataset, blocks of 64 documents (16 for books)
  block         ArrayRecord, blocks of 64 documents over all shards (no open_shards)
  global        ArrayRecord, a global shuffle (every step reads anywhere:
                with 10% cached, most shards are fetched again and again)
  windows       flat token files, window sampling (2049-token windows)

Printed per layout and latency: non-padding tokens/s, its ratio to the same
layout on local files and to the same store at 0 ms (goal at 50 ms: >= 0.9
of local for open_shards and windows), the bytes fetched per token read, and
the parallelism chosen from the measured latency. Grain has no remote
ArrayRecord source to compare with.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

import numpy as np

from benchmarks import TEST_SUPPORT
from benchmarks.latency_proxy import LatencyProxy
from benchmarks.make_corpus import make_corpus

sys.path.insert(0, TEST_SUPPORT)

TOKEN_SHARES = {"web": 0.62, "code": 0.18, "books": 0.12, "curated": 0.08}
WARMUP = 40
# Steps measured per layout: a global shuffle with 10% cached fetches shards for most documents (slow here).
STEPS = {"open_shards": 400, "block": 200, "global": 40, "windows": 400}
LATENCIES_MS = (0, 20, 50, 100)
MB_PER_S = 100.0  # per connection
LAYOUTS = ("open_shards", "block", "global", "windows")
GOAL_LAYOUTS = ("open_shards", "windows")


def config(layout: str, paths: dict[str, str], cache_dir: str, cache_bytes: int) -> Any:
  import jaxdata  # noqa: PLC0415 -- in the measuring subprocess, after XLA_FLAGS

  datasets = [{"name": n, "path": p} for n, p in paths.items()]
  order: dict[str, Any] = {}
  if layout == "open_shards":
    # books' 256 KB shards hold about 15 documents: its blocks are smaller, to span as few shards.
    datasets = [{**d, **({"shuffle_block_size": 16} if d["name"] == "books" else {})} for d in datasets]
    order = {"open_shards": 2, "shuffle_block_size": 64}
  elif layout == "block":
    order = {"shuffle_block_size": 64}
  elif layout == "global":
    order = {"shuffle_block_size": "global"}
  else:
    datasets = [{**d, "sampling": "windows"} for d in datasets]
    order = {"shuffle_block_size": "global"}
  return jaxdata.PipelineConfig.from_dict(
    {
      "datasets": datasets,
      "mixture": {"weights": TOKEN_SHARES, "unit": "tokens"},
      "exhausted_policy": "repeat",
      **order,
      "packing": {"mode": "first_fit", "seq_len": 2048},
      "batch": {"global_batch_size": 32},
      "cache_dir": cache_dir,
      "cache_bytes": cache_bytes,
    }
  )


def run_one(layout: str, paths: dict[str, str], cache_bytes: int, **arguments: Any) -> dict[str, Any]:
  """One measurement in this process: the mesh defaults, a cold cache."""
  os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
  import jax  # noqa: PLC0415

  import jaxdata  # noqa: PLC0415
  from jaxdata.testing import opened_datasets  # noqa: PLC0415

  mesh = jax.make_mesh((8,), ("data",), axis_types=(jax.sharding.AxisType.Auto,))
  with tempfile.TemporaryDirectory() as cache_dir:
    started = time.perf_counter()
    with jaxdata.Pipeline(config(layout, paths, cache_dir, cache_bytes), mesh=mesh, **arguments) as pipe:
      next(pipe)
      first = time.perf_counter() - started
      for _ in range(WARMUP):
        next(pipe)
      read, started = np.zeros(len(TOKEN_SHARES)), time.perf_counter()
      for _ in range(STEPS[layout]):
        jax.block_until_ready(next(pipe))
        read += list(pipe.stats()["tokens_per_source"].values())  # the step's non-pad tokens per source
      seconds = time.perf_counter() - started
      tokens = int(read.sum())
      transfers = [d.transfer_stats() for d in opened_datasets(pipe)]
      total_read = (1 + WARMUP + STEPS[layout]) * tokens / STEPS[layout]  # about: every step read so far
      fetched = sum(t["fetched_bytes"] for t in transfers if t)
      parallelism = sorted({int(t["parallelism"]) for t in transfers if t})
      latency_ms = sorted({round(1e3 * t["latency_s"]) for t in transfers if t})
  return {
    "tokens_per_s": tokens / seconds,
    "shares": (read / tokens).tolist(),
    "first_batch_s": first,
    "fetched_bytes_per_token": fetched / max(total_read, 1),
    "parallelism": parallelism,
    "latency_ms": latency_ms,
  }


def measure(layout: str, paths: dict[str, str], cache_bytes: int, env: dict[str, str]) -> dict[str, Any]:
  process = subprocess.run(
    [
      sys.executable,
      "-m",
      "benchmarks.remote_throughput",
      "--run",
      json.dumps({"layout": layout, "paths": paths, "cache_bytes": cache_bytes}),
    ],
    capture_output=True,
    text=True,
    env={**os.environ, **env, "PYTHONPATH": os.getcwd()},
  )
  if process.returncode:
    raise RuntimeError(f"{layout} failed:\n{process.stderr[-3000:]}")
  return json.loads(process.stdout.strip().splitlines()[-1])


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--out", default="/tmp/jaxdata-remote-bench")
  parser.add_argument("--store", default="s3", choices=("s3", "gs"))
  parser.add_argument("--layouts", default=",".join(LAYOUTS))
  parser.add_argument("--latencies", default=",".join(map(str, LATENCIES_MS)), help="milliseconds, comma-separated")
  parser.add_argument("--repetitions", type=int, default=1)
  parser.add_argument("--run", help="one measurement, in this process (used by the driver)")
  args = parser.parse_args()
  if args.run:
    spec = json.loads(args.run)
    print(json.dumps(run_one(**spec)))
    return
  import object_store  # noqa: PLC0415 -- the tests' local object stores
  from benchmarks.flat_throughput import write_copies  # noqa: PLC0415

  layouts, latencies = args.layouts.split(","), [float(x) for x in args.latencies.split(",")]
  corpus = make_corpus(args.out, scale=0.25, shard_bytes=256 << 10)
  flat, _ = write_copies(corpus, os.path.join(args.out, "copies"))
  local = {layout: (flat if layout == "windows" else corpus) for layout in layouts}
  sizes = {
    layout: sum(os.path.getsize(os.path.join(p, f)) for p in paths.values() for f in os.listdir(p))
    for layout, paths in local.items()
  }
  servers = object_store.servers()
  stores = next(servers)
  results: dict[tuple[str, float | None], list[dict[str, Any]]] = {}
  try:
    store = stores[args.store]
    urls = {
      layout: {
        n: store.upload(p, "jaxdata-bench", f"{'flat' if layout == 'windows' else 'ar'}/{n}") for n, p in paths.items()
      }
      for layout, paths in local.items()
    }
    endpoint_variable = "AWS_ENDPOINT_URL" if args.store == "s3" else "STORAGE_EMULATOR_HOST"
    for _ in range(args.repetitions):  # interleaved: drifts of the machine hit every cell alike
      for layout in layouts:
        cache_bytes = sizes[layout] // 10
        results.setdefault((layout, None), []).append(measure(layout, local[layout], cache_bytes, {}))
        for latency in latencies:
          with LatencyProxy(store.endpoint, latency / 1e3, MB_PER_S) as proxy:
            env = {endpoint_variable: proxy.endpoint}
            results.setdefault((layout, latency), []).append(measure(layout, urls[layout], cache_bytes, env))
          print(f"  {layout} {latency:g} ms done", file=sys.stderr)
  finally:
    servers.close()
  print(
    f"store: {args.store} emulator behind a proxy adding each latency, {MB_PER_S:g} MB/s per connection; "
    f"cache 10% of the corpus; mesh defaults (8 CPU devices, planner process); {STEPS} steps after {WARMUP}; "
    f"medians of {args.repetitions}"
  )
  print(
    f"{'layout':12s} {'latency':>8s} {'non-pad tok/s':>13s} {'/ local':>8s} {'/ 0 ms':>7s} "
    f"{'first batch':>11s} {'fetched B/token':>15s} {'parallelism':>12s}   shares {' / '.join(TOKEN_SHARES)}"
  )
  for layout in layouts:
    base = statistics.median(r["tokens_per_s"] for r in results[(layout, None)])
    zero = statistics.median(r["tokens_per_s"] for r in results.get((layout, 0.0), results[(layout, None)]))
    stored = sizes[layout] / sum(
      json.load(open(os.path.join(p, "manifest.json")))["num_tokens"] for p in local[layout].values()
    )
    for latency in [None, *latencies]:
      runs = results[(layout, latency)]
      rate = statistics.median(r["tokens_per_s"] for r in runs)
      shares = " / ".join(f"{statistics.median(r['shares'][i] for r in runs):.3f}" for i in range(len(TOKEN_SHARES)))
      label = "local" if latency is None else f"{latency:g} ms"
      goal = "  (goal >= 0.9)" if latency == 50 and layout in GOAL_LAYOUTS else ""
      print(
        f"{layout:12s} {label:>8s} {rate / 1e6:11.2f} M {rate / base:8.2f} {rate / zero:7.2f} "
        f"{statistics.median(r['first_batch_s'] for r in runs):9.2f} s "
        f"{statistics.median(r['fetched_bytes_per_token'] for r in runs):15.2f} "
        f"{str(runs[-1]['parallelism']):>12s}   {shares}{goal}"
      )
    print(f"{'':12s} (the files hold {stored:.2f} bytes per token)")


if __name__ == "__main__":
  main()
