"""Lengths of a 10^9-document dataset: memory added on opening, and the planning rate.

    python -m benchmarks.lengths_scale [--documents 1000000000] [--dir /tmp/jaxdata-lengths]

Writes (once) the lengths index of a virtual dataset, `--shards` .npy files
of uint16 lengths (lognormal, mean ~600 tokens; 2 GB for 10^9 documents),
opens them as `DocumentLengths` (memory-mapped, totals computed once) and
plans steps over them through the real `StepPlanner` (global shuffle, first_fit
to 2048, 32 rows); the same is done for the first 10^5 of those documents.
Goal: opening adds < 100 MB of resident memory, and planning runs at the
small dataset's rate.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

from jaxdata import PipelineConfig
from jaxdata.mixture.stream import DatasetMeta
from jaxdata.pipeline import StepPlanner
from jaxdata.sources.lengths import DocumentLengths

STEPS = 300


def rss_mb(kind: str = "VmRSS") -> float:
  """Resident memory: VmRSS (all), RssAnon (the process's own) or RssFile (mapped files, reclaimable)."""
  with open("/proc/self/status") as f:
    for line in f:
      if line.startswith(kind + ":"):
        return int(line.split()[1]) / 1024
  return 0.0


def write_lengths(directory: str, documents: int, shards: int) -> list[str]:
  """Shard lengths files (reused when present)."""
  os.makedirs(directory, exist_ok=True)
  rng = np.random.default_rng(0)
  block = np.clip(rng.lognormal(np.log(600) - 0.5, 1.0, 1 << 20), 1, 65_535).astype(np.uint16)
  per_shard = documents // shards
  paths = []
  for s in range(shards):
    path = os.path.join(directory, f"shard-{s:05d}.lengths.npy")
    paths.append(path)
    if os.path.exists(path):
      continue
    out = np.lib.format.open_memmap(path + ".tmp.npy", mode="w+", dtype=np.uint16, shape=(per_shard,))
    for begin in range(0, per_shard, block.size):
      end = min(per_shard, begin + block.size)
      out[begin:end] = np.roll(block, s)[: end - begin]
    out.flush()
    del out
    os.replace(path + ".tmp.npy", path)
  return paths


def planning_ms(meta: DatasetMeta) -> float:
  cfg = PipelineConfig.from_dict(
    {
      "datasets": [{"name": "big"}],
      "mixture": {"weights": {"big": 1}},
      "shuffle_block_size": "global",
      "exhausted_policy": "repeat",
      "packing": {"mode": "first_fit", "seq_len": 2048},
      "batch": {"global_batch_size": 32},
    }
  )
  planner = StepPlanner(cfg, {"big": meta})
  for _ in range(20):
    planner.plan()
  started = time.perf_counter()
  for _ in range(STEPS):
    planner.plan()
  return (time.perf_counter() - started) / STEPS * 1e3


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--documents", type=int, default=10**9)
  parser.add_argument("--shards", type=int, default=1000)
  parser.add_argument("--dir", default="/tmp/jaxdata-lengths")
  args = parser.parse_args()
  paths = write_lengths(args.dir, args.documents, args.shards)
  before, before_anon = rss_mb(), rss_mb("RssAnon")
  started = time.perf_counter()
  parts = [np.load(p, mmap_mode="r") for p in paths]
  big = DocumentLengths(parts)
  opened_s = time.perf_counter() - started
  added = rss_mb() - before
  big_meta = DatasetMeta(np.array([p.size for p in parts], dtype=np.int64), big)
  small_lengths = np.array(parts[0][:100_000])
  small_meta = DatasetMeta.from_lengths(small_lengths)
  small_ms, big_ms = planning_ms(small_meta), planning_ms(big_meta)
  print(
    f"{big.size:,} documents in {len(parts)} shards: opened in {opened_s:.1f} s, "
    f"resident memory added {added:.0f} MB (goal < 100 MB)"
  )
  print(
    f"after planning {2 * STEPS + 40} steps: anonymous memory +{rss_mb('RssAnon') - before_anon:.0f} MB; "
    f"mapped lengths pages (page cache, reclaimable) +{rss_mb() - before - (rss_mb('RssAnon') - before_anon):.0f} MB"
  )
  print(
    f"planning: {big_ms:.3f} ms/step on {big.size:,} documents, {small_ms:.3f} ms/step on "
    f"{small_lengths.size:,}: ratio {big_ms / small_ms:.2f} (goal ~1)"
  )


if __name__ == "__main__":
  main()
