"""Iterator checkpoints: state size and time, Orbax save, restore + first batch; jaxdata vs Grain.

    python benchmarks/make_corpus.py --out /tmp/jaxdata-bench
    python -m benchmarks.checkpoint_bench --corpus /tmp/jaxdata-bench

Same workload as pipeline_throughput. Each iterator first runs --steps
batches; then: get_state() (mean of 20 calls) and its JSON size; an Orbax
CheckpointManager save (blocking); a fresh iterator restored from it plus its
first batch. Grain: its own CheckpointSave / CheckpointRestore handler, single
process and mp_prefetch(2). Each configuration runs in its own subprocess.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

from benchmarks.make_corpus import make_corpus
from benchmarks.pipeline_throughput import grain_dataset, jaxdata_config


def timed_state(iterator: Any) -> tuple[float, int]:
  started = time.perf_counter()
  for _ in range(20):
    state = iterator.get_state()
  seconds = (time.perf_counter() - started) / 20
  return seconds, len(json.dumps(state).encode())


def measure(
  make: Callable[[], Any], save_args: Callable[[Any], Any], restore_args: Callable[[Any], Any], steps: int
) -> dict[str, Any]:
  import orbax.checkpoint as ocp  # noqa: PLC0415

  iterator = make()
  for _ in range(steps):
    next(iterator)
  state_seconds, state_bytes = timed_state(iterator)
  with tempfile.TemporaryDirectory() as directory:
    manager = ocp.CheckpointManager(directory)
    started = time.perf_counter()
    manager.save(steps, args=ocp.args.Composite(data=save_args(iterator)))
    manager.wait_until_finished()
    save_seconds = time.perf_counter() - started
    fresh = make()
    started = time.perf_counter()
    manager.restore(steps, args=ocp.args.Composite(data=restore_args(fresh)))
    next(fresh)
    restore_seconds = time.perf_counter() - started
    manager.close()
  return {
    "get_state_s": state_seconds,
    "state_bytes": state_bytes,
    "save_s": save_seconds,
    "restore_first_batch_s": restore_seconds,
  }


def run(kind: str, corpus: str, steps: int) -> dict[str, Any]:
  if kind == "jaxdata":
    import jaxdata  # noqa: PLC0415

    cfg = jaxdata_config(corpus)
    return measure(
      lambda: jaxdata.Pipeline(cfg, prefetch=2), jaxdata.checkpoint.Save, jaxdata.checkpoint.Restore, steps
    )
  import grain  # noqa: PLC0415

  dataset = grain_dataset(corpus, workers=2 if kind == "grain-mp" else 0)
  return measure(lambda: iter(dataset), grain.checkpoint.CheckpointSave, grain.checkpoint.CheckpointRestore, steps)


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--corpus", default="/tmp/jaxdata-bench")
  parser.add_argument("--steps", type=int, default=200)
  parser.add_argument("--run", choices=("jaxdata", "grain", "grain-mp"))
  args = parser.parse_args()
  if args.run:
    print(json.dumps(run(args.run, args.corpus, args.steps)))
    return
  make_corpus(args.corpus)
  print(f"{'':10s} {'get_state':>11s} {'state size':>11s} {'Orbax save':>11s} {'restore+1st batch':>18s}")
  for kind in ("jaxdata", "grain", "grain-mp"):
    out = subprocess.run(
      [
        sys.executable,
        "-m",
        "benchmarks.checkpoint_bench",
        "--corpus",
        args.corpus,
        "--steps",
        str(args.steps),
        "--run",
        kind,
      ],
      check=True,
      capture_output=True,
      text=True,
      env={**os.environ, "PYTHONPATH": os.getcwd()},
    )
    r = json.loads(out.stdout.strip().splitlines()[-1])
    print(
      f"{kind:10s} {r['get_state_s'] * 1e6:9.0f} us {r['state_bytes']:9d} B {r['save_s'] * 1e3:8.1f} ms "
      f"{r['restore_first_batch_s'] * 1e3:15.1f} ms"
    )
  print("\ngoals: state < 4096 B whatever the run length and host count; restore + first batch < 500 ms")


if __name__ == "__main__":
  main()
