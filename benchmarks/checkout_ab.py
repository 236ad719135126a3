"""This checkout against another, alternating fresh processes: first batch and time per step.

    python -m benchmarks.checkout_ab --baseline /tmp/before --making here --runs 6
    python -m benchmarks.checkout_ab --baseline /tmp/before --making process:2

Each run is a fresh interpreter in one checkout (its own library, its own
`benchmarks.pipeline_throughput.jaxdata_config`: the uint32 benchmark workload),
the two checkouts alternating so that the machine's drifts hit both alike. A run
times the first batch of a new `Pipeline(prefetch=2)`, waits for its processes,
takes 150 steps, then times 600 (NumPy output). `--making` is "here", "process" or
"process:N" (N reader processes), spelled for each checkout's API (`making=` or
0.3.0's `workers=` / `planner_process=`). Prints each run and the medians' ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

CHILD = """
import json, sys, time, warnings
warnings.simplefilter("ignore")
sys.path.insert(0, ".")
from benchmarks.pipeline_throughput import jaxdata_config
import jaxdata, jaxdata.testing
planning, readers = sys.argv[1], int(sys.argv[2])
if hasattr(jaxdata, "StepMaking"):
  kwargs = {"making": jaxdata.StepMaking(planning, reader_processes=readers)}
else:
  kwargs = {"workers": readers, "planner_process": planning == "process"}
cfg = jaxdata_config(sys.argv[3])
started = time.perf_counter()
pipe = jaxdata.Pipeline(cfg, prefetch=2, **kwargs)
next(pipe)
first = time.perf_counter() - started
jaxdata.testing.wait_for_processes(pipe)
for _ in range(150):
  next(pipe)
started = time.perf_counter()
for _ in range(600):
  next(pipe)
print(json.dumps({"first_s": first, "step_ms": 1e3 * (time.perf_counter() - started) / 600}))
pipe.close()
"""


def run(checkout: str, planning: str, readers: int, corpus: str) -> dict[str, float]:
  done = subprocess.run(
    [sys.executable, "-c", CHILD, planning, str(readers), corpus],
    cwd=checkout,
    env={**os.environ, "PYTHONPATH": checkout},
    capture_output=True,
    text=True,
    check=True,
  )
  return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--baseline", required=True, help="the other checkout (extensions built or copied in)")
  parser.add_argument("--making", default="here", help='"here", "process" or "process:N" (N reader processes)')
  parser.add_argument("--runs", type=int, default=5)
  parser.add_argument("--corpus", default="/tmp/jaxdata-bench-u32", help="the uint32 benchmark corpus")
  args = parser.parse_args()
  planning, _, readers = args.making.partition(":")
  sides = {"this": os.getcwd(), "baseline": os.path.abspath(args.baseline)}
  results: dict[str, list[dict[str, float]]] = {side: [] for side in sides}
  for i in range(args.runs):
    for side, checkout in sides.items():
      results[side].append(run(checkout, planning, int(readers or 0), args.corpus))
      print(f"run {i + 1} {side:8s} {results[side][-1]}", file=sys.stderr)
  medians = {side: {k: statistics.median(r[k] for r in runs) for k in runs[0]} for side, runs in results.items()}
  this, base = medians["this"], medians["baseline"]
  print(
    f"making={args.making}, medians of {args.runs}: step {this['step_ms']:.2f} ms against {base['step_ms']:.2f} ms "
    f"({base['step_ms'] / this['step_ms']:.3f}x the speed); first batch {1e3 * this['first_s']:.1f} ms against "
    f"{1e3 * base['first_s']:.1f} ms ({this['first_s'] / base['first_s']:.3f}x the time)"
  )


if __name__ == "__main__":
  main()
