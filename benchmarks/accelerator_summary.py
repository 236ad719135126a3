"""The accelerator check's table: benchmarks/accelerator_check.sh's results, read back, as one table and one JSON.

    python -m benchmarks.accelerator_summary OUT_DIR     # reads device_feed-*.json, pipeline_throughput.json

Per device_feed size: the step on device-resident batches, the step fed by jaxdata, what jaxdata adds (goal
<= 1% where the step takes >= 20 ms), host-to-device rates, first batch, and whether the losses of both feeds
were identical (the same batches reached the model); a refused size prints its one line. Then the host's
pipeline rates (tokens/s per kind, jaxdata's against Grain mp_prefetch) with each side's realised shares, and
per corpus the mesh defaults against NumPy output (goal >= 0.95x on both corpora).
"""

from __future__ import annotations

import glob
import json
import os
import sys
from typing import Any

GOAL_ADDED = 0.01  # jaxdata adds at most 1% to a step of >= 20 ms
GOAL_STEP_S = 0.020
GOAL_MESH_OVER_NUMPY = 0.95  # the mesh defaults against NumPy output, on every corpus


def summary(out_dir: str) -> dict[str, Any]:
  feeds = {}
  for path in sorted(glob.glob(os.path.join(out_dir, "device_feed-*.json"))):
    size = os.path.basename(path)[len("device_feed-") : -len(".json")]
    with open(path) as f:
      text = f.read().strip()
    feeds[size] = json.loads(text.splitlines()[-1]) if text.startswith("{") else {"refused": text}
  throughput = None
  if os.path.isfile(os.path.join(out_dir, "pipeline_throughput.json")):
    with open(os.path.join(out_dir, "pipeline_throughput.json")) as f:
      throughput = json.load(f)
  return {"device_feed": feeds, "pipeline_throughput": throughput}


def table(result: dict[str, Any]) -> str:
  lines = ["size         device        step on device  fed by jaxdata  added    H2D jaxdata / put   first batch  same"]
  for size, feed in result["device_feed"].items():
    if "refused" in feed:
      lines.append(f"{size:<12} refused: {feed['refused']}")
      continue
    added = feed["added_per_step"]
    goal = "" if feed["step_s_on_device"] < GOAL_STEP_S else (" ok" if added <= GOAL_ADDED else " OVER GOAL")
    lines.append(
      f"{size:<12} {feed['device_kind'][:12]:<13} {feed['step_s_on_device'] * 1e3:10.2f} ms {feed['step_s_jaxdata'] * 1e3:11.2f} ms"
      f"  {100 * added:+6.2f}%{goal}  {feed['h2d_bytes_per_s_jaxdata'] / 1e9:6.2f} / {feed['h2d_bytes_per_s_device_put'] / 1e9:5.2f} GB/s"
      f"  {feed['first_batch_s']:8.3f} s  {feed['losses_equal'] and feed['restored_equal']}"
    )
  throughput = result["pipeline_throughput"]
  if throughput:
    lines.append(f"host pipeline ({throughput['cores']} cores, medians of {throughput['repetitions']}):")
    for width, kinds in throughput["results"].items():
      grains = [kinds[g]["tokens_per_s"] for g in ("grain-mp", "grain") if g in kinds]
      for kind, row in kinds.items():
        ratio = f"  {row['tokens_per_s'] / grains[0]:.2f}x Grain" if grains and "tokens_per_s" in row else ""
        shares = row.get("shares", "")
        rate = row.get("tokens_per_s")
        lines.append(
          f"  {width} {kind:<28} {rate / 1e6 if rate else float('nan'):7.1f}M tokens/s{ratio}  shares {shares}"
        )
      if "jaxdata" in kinds and "jaxdata-mesh8" in kinds:
        mesh = kinds["jaxdata-mesh8"]["tokens_per_s"] / kinds["jaxdata"]["tokens_per_s"]
        verdict = "ok" if mesh >= GOAL_MESH_OVER_NUMPY else "UNDER GOAL"
        lines.append(f"  {width} mesh defaults / NumPy output: {mesh:.2f}x ({verdict}: >= {GOAL_MESH_OVER_NUMPY}x)")
  return "\n".join(lines)


def main() -> None:
  out_dir = sys.argv[1]
  result = summary(out_dir)
  with open(os.path.join(out_dir, "accelerator_check.json"), "w") as f:
    json.dump(result, f, indent=1)
  print(table(result))


if __name__ == "__main__":
  main()
