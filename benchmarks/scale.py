"""Pod scale on paper: planning, memory, open, state and restore, computed by the planner itself.

    python -m benchmarks.scale [--max-documents 10000000000] [--steps 5]

No data is read. Every dataset is virtual: its document lengths are views
of one block of 2^20 lognormal lengths (mean ~600 tokens, capped at 65,535),
one view per shard of 10^7 documents, opened as `DocumentLengths` exactly as
a dataset's memory-mapped lengths files are (totals computed a shard at a
time; planning gathers lengths by index). Each dataset is a global
shuffle (the Feistel permutation: nothing of the document count is
materialised). The step is a v5p-12288-like global batch: 16,384 rows of
1,024 tokens (16.8M tokens), first_fit packing; every host plans the same
global step and takes its rows (`host_row_blocks`). Measured, each in a
fresh subprocess:

  open        metadata of every dataset + the planner built + the first step planned
  plan        ms per global step (median of --steps, after the first)
  host rows   ms for one host to take its rows out of a planned step
  memory      the process's resident anonymous memory after planning (per host:
              every host holds the same planner), and its growth over the open
  state       bytes of the JSON state (the same on every host, any host count)
  restore     a new planner from the same metadata (no permutation cached), the state set,
              its next step planned

The sweeps: documents 10^6 ... 10^10 (4 datasets at token shares
.62/.18/.12/.08), datasets 1 ... 100 (10^8 documents in all), hosts 1 ... 16,384
(10^9 documents, 4 datasets). Each figure's growth law is fitted on a
log-log scale (slope b in figure ~ size^b) and extrapolated where a size
could not run here. docs/performance.md quotes the table.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import time
from typing import Any

import numpy as np

SHARES = (0.62, 0.18, 0.12, 0.08)
ROWS, SEQ_LEN = 16_384, 1_024  # 16.8M tokens per step
SHARD_DOCUMENTS = 10**7
BLOCK = 1 << 20


def _rss_kb(field: str) -> int:
  with open("/proc/self/status") as f:
    for line in f:
      if line.startswith(field + ":"):
        return int(line.split()[1])
  return 0


def _virtual_meta(documents: int, block: np.ndarray, offset: int) -> Any:
  from jaxdata.mixture.stream import DatasetMeta  # noqa: PLC0415 -- in the measuring subprocess
  from jaxdata.sources.lengths import DocumentLengths  # noqa: PLC0415

  shards, rest = divmod(documents, SHARD_DOCUMENTS)
  counts = [SHARD_DOCUMENTS] * shards + ([rest] if rest else [])
  # A shard's lengths: the block read cyclically from a per-shard offset, as a view (no copy) where it fits.
  parts = []
  for s, count in enumerate(counts):
    start = (offset + 7919 * s) % BLOCK
    if start + count <= BLOCK:
      parts.append(block[start : start + count])
    else:  # longer than the block: repeat the block (views only) to cover it
      reps = [block[start:]] + [block] * ((count - (BLOCK - start)) // BLOCK)
      tail = count - sum(r.size for r in reps)
      parts.extend(reps + ([block[:tail]] if tail else []))
  # One DocumentLengths per dataset whose parts are the block views; shard counts as a dataset's.
  lengths = DocumentLengths(parts)
  return DatasetMeta(np.array(counts, dtype=np.int64), lengths)


def measure(documents: int, datasets: int, hosts: int, steps: int) -> dict[str, Any]:
  """One configuration, in this process."""
  from jaxdata import PipelineConfig  # noqa: PLC0415
  from jaxdata.order.permutation import forget_permutations  # noqa: PLC0415
  from jaxdata.pipeline import StepPlanner  # noqa: PLC0415
  from jaxdata.pipeline.planner import host_row_blocks  # noqa: PLC0415

  rng = np.random.default_rng(0)
  block = np.clip(rng.lognormal(np.log(600) - 0.5, 1.0, BLOCK), 1, 65_535).astype(np.uint16)
  shares = SHARES if datasets == 4 else tuple([1 / datasets] * datasets)
  names = [f"d{i}" for i in range(datasets)]
  # Documents split by token share (documents have one mean length): dataset i holds share_i of them.
  counts = np.maximum(1, np.round(np.array(shares) * documents).astype(np.int64))
  cfg = PipelineConfig.from_dict(
    {
      "datasets": [{"name": n} for n in names],
      "mixture": {"weights": dict(zip(names, shares)), "unit": "tokens"},
      "shuffle_block_size": "global",
      "exhausted_policy": "repeat",
      "packing": {"mode": "first_fit", "seq_len": SEQ_LEN},
      "batch": {"global_batch_size": ROWS},
    }
  )
  anon_before = _rss_kb("RssAnon")
  started = time.perf_counter()
  metadata = {n: _virtual_meta(int(c), block, 104_729 * i) for i, (n, c) in enumerate(zip(names, counts))}
  planner = StepPlanner(cfg, metadata)
  planner.plan()
  open_s = time.perf_counter() - started
  anon_open = _rss_kb("RssAnon")
  times, host_times = [], []
  for _ in range(steps):
    started = time.perf_counter()
    plan = planner.plan()
    times.append(time.perf_counter() - started)
    started = time.perf_counter()
    rows = host_row_blocks(plan.rows, hosts)[hosts // 2]  # a host in the middle
    plan.pieces.take(plan.in_rows(rows))
    host_times.append(time.perf_counter() - started)
  anon_after = _rss_kb("RssAnon")
  state = json.dumps(planner.get_state())
  expected = planner.plan()
  forget_permutations()  # a restore runs in a new process: nothing cached
  started = time.perf_counter()
  restored = StepPlanner(cfg, metadata)
  restored.set_state(json.loads(state))
  again = restored.plan()
  restore_s = time.perf_counter() - started
  same = bool(np.array_equal(again.pieces.record, expected.pieces.record))
  return {
    "open_s": open_s,
    "plan_ms": 1e3 * statistics.median(times),
    "host_rows_ms": 1e3 * statistics.median(host_times),
    "anon_mb": anon_after / 1024,
    "anon_growth_mb": (anon_after - anon_before) / 1024,
    "anon_open_mb": (anon_open - anon_before) / 1024,
    "state_bytes": len(state),
    "restore_s": restore_s,
    "restore_identical": same,
    "documents_per_step": int(plan.pieces.record.size),
  }


def run(documents: int, datasets: int, hosts: int, steps: int) -> dict[str, Any]:
  process = subprocess.run(
    [sys.executable, "-m", "benchmarks.scale", "--run", json.dumps([documents, datasets, hosts, steps])],
    capture_output=True,
    text=True,
  )
  if process.returncode:
    raise RuntimeError(f"{documents} documents, {datasets} datasets, {hosts} hosts failed:\n{process.stderr[-3000:]}")
  return json.loads(process.stdout.strip().splitlines()[-1])


def slope(sizes: list[float], values: list[float]) -> float:
  """b of value ~ size^b, least squares on log-log."""
  x, y = np.log(sizes), np.log(np.maximum(values, 1e-12))
  return float(np.polyfit(x, y, 1)[0]) if len(sizes) > 1 else 0.0


FIGURES = (
  ("open_s", "open (s)", "{:.2f}"),
  ("plan_ms", "plan/step (ms)", "{:.1f}"),
  ("host_rows_ms", "host rows (ms)", "{:.2f}"),
  ("anon_mb", "anon RSS (MB)", "{:.0f}"),
  ("state_bytes", "state (B)", "{:,}"),
  ("restore_s", "restore (s)", "{:.2f}"),
)


def table(title: str, axis: str, sizes: list[int], results: list[dict[str, Any]], extrapolate: list[int]) -> None:
  print(f"\n{title}")
  print(f"{axis:>14s}" + "".join(f"{label:>16s}" for _, label, _ in FIGURES) + "   restored identical")
  for size, r in zip(sizes, results):
    cells = "".join(f"{fmt.format(r[key]):>16s}" for key, _, fmt in FIGURES)
    print(f"{size:>14,}" + cells + f"   {r['restore_identical']}")
  laws = {key: slope(sizes, [r[key] for r in results]) for key, _, _ in FIGURES}
  print(f"{'growth ~ n^b':>14s}" + "".join(f"{'b = ' + format(laws[key], '.2f'):>16s}" for key, _, _ in FIGURES))
  for size in extrapolate:
    cells = ""
    for key, _, fmt in FIGURES:
      value = results[-1][key] * (size / sizes[-1]) ** laws[key]
      cells += f"{fmt.format(int(value) if key == 'state_bytes' else value):>16s}"
    print(f"{size:>14,}" + cells + "   (extrapolated)")


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--max-documents", type=int, default=10**10, help="the largest document count run here")
  parser.add_argument("--steps", type=int, default=5, help="global steps timed per configuration")
  parser.add_argument("--run", help="one configuration, in this process (used by the driver)")
  args = parser.parse_args()
  if args.run:
    print(json.dumps(measure(*json.loads(args.run))))
    return
  print(
    f"global step: {ROWS:,} rows x {SEQ_LEN:,} tokens ({ROWS * SEQ_LEN / 1e6:.1f}M tokens), first_fit, global "
    f"shuffle; virtual lengths (mean ~600 tokens); medians of {args.steps} steps"
  )
  documents = [10**k for k in range(6, 11) if 10**k <= args.max_documents]
  by_documents = [run(n, 4, 1, args.steps) for n in documents]
  table(
    "documents (4 datasets, 1 host)",
    "documents",
    documents,
    by_documents,
    [10**k for k in range(6, 11) if 10**k > args.max_documents],
  )
  datasets = [1, 4, 10, 100]
  table("datasets (10^8 documents, 1 host)", "datasets", datasets, [run(10**8, d, 1, args.steps) for d in datasets], [])
  hosts = [1, 16, 256, 4096, 16_384]
  table(
    "hosts (10^9 documents, 4 datasets)",
    "hosts",
    hosts,
    [run(min(10**9, args.max_documents), 4, h, args.steps) for h in hosts],
    [],
  )
  largest = by_documents[-1]
  print(
    f"\nat {documents[-1]:,} documents: planning {largest['plan_ms']:.1f} ms per global step "
    f"({largest['documents_per_step']:,} documents; goal < 100 ms, 10% of a 1 s step); "
    f"restore {largest['restore_s']:.2f} s (goal < 1 s); resident memory {largest['anon_mb']:.0f} MB against "
    f"{by_documents[0]['anon_mb']:.0f} MB at {documents[0]:,} (goal: independent of the document count)"
  )
  if math.isfinite(largest["plan_ms"]):
    print("every host plans the same global step: its planning time does not depend on the host count")


if __name__ == "__main__":
  main()
