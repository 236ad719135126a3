"""Index layer speed: global-shuffle lookups vs Grain, stream documents/s, a 10**12-record shuffle.

    python benchmarks/make_corpus.py --out /tmp/jaxdata-bench
    python -m benchmarks.index_throughput --corpus /tmp/jaxdata-bench

1. Global shuffle, index -> record: jaxdata's vectorised keyed bijection over
   an array of positions vs Grain's `MapDataset.range(n).shuffle(seed)[i]`
   (index_shuffle underneath), one lookup per element as Grain serves them.
2. DocumentStream documents/s for the 4 benchmark datasets (their real
   lengths), tokens unit, steps of 2M tokens; exact and random interleave.
3. The first 1M positions of a global shuffle of a virtual 10**12-record
   dataset: time and peak extra memory.
"""

from __future__ import annotations

import argparse
import time
import tracemalloc

import grain.python as grain
import numpy as np
from absl import flags

from benchmarks.make_corpus import make_corpus
from jaxdata import PipelineConfig
from jaxdata.mixture import DatasetMeta, DocumentStream
from jaxdata.order import DatasetOrder, ShuffleOptions


def best_of(repeats: int, fn) -> float:
  best = float("inf")
  for _ in range(repeats):
    started = time.perf_counter()
    fn()
    best = min(best, time.perf_counter() - started)
  return best


def shuffle_lookups(n: int, positions: int, grain_lookups: int, repeats: int) -> dict[str, float]:
  order = DatasetOrder("web", [n], ShuffleOptions(block_size="global"), seed=0)
  batch = np.arange(positions)
  ours = positions / best_of(repeats, lambda: order.records(0, batch))
  shuffled = grain.MapDataset.range(n).shuffle(seed=0)
  theirs = grain_lookups / best_of(repeats, lambda: [shuffled[i] for i in range(grain_lookups)])
  return {"jaxdata": ours, "grain": theirs}


def stream_rate(metas: dict[str, DatasetMeta], interleave: str, steps: int, repeats: int) -> float:
  cfg = PipelineConfig.from_dict(
    {
      "datasets": [{"name": n} for n in metas],
      "mixture": {
        "weights": {"web": 0.5, "code": 0.25, "books": 0.15, "curated": 0.1},
        "unit": "tokens",
        "interleave": interleave,
      },
      "exhausted_policy": "repeat",
      "shuffle_block_size": "global",
    }
  )
  best = 0.0
  for _ in range(repeats):
    stream = DocumentStream(cfg, metas)
    started = time.perf_counter()
    documents = sum(len(stream.take(step, max_tokens=2_000_000)) for step in range(steps))
    best = max(best, documents / (time.perf_counter() - started))
  return best


def trillion(positions: int) -> tuple[float, float]:
  order = DatasetOrder("virtual", [10**12], ShuffleOptions(block_size="global"), seed=0)
  batch = np.arange(positions)
  tracemalloc.start()
  started = time.perf_counter()
  records = order.records(0, batch)
  seconds = time.perf_counter() - started
  peak = tracemalloc.get_traced_memory()[1]
  tracemalloc.stop()
  assert np.unique(records).size == positions
  return seconds, peak / 2**20


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--corpus", default="/tmp/jaxdata-bench")
  parser.add_argument("--steps", type=int, default=100, help="2M-token steps per stream run")
  parser.add_argument("--repeats", type=int, default=3)
  args = parser.parse_args()
  flags.FLAGS.mark_as_parsed()  # Grain reads absl flags; we are outside absl.app.run

  rates = shuffle_lookups(n=10**8, positions=1_000_000, grain_lookups=50_000, repeats=args.repeats)
  print("global shuffle lookups (10^8 records):")
  print(f"  jaxdata permute (vectorised)    {rates['jaxdata']:14,.0f} positions/s")
  print(f"  grain MapDataset.shuffle()[i]   {rates['grain']:14,.0f} positions/s")
  print(f"  ratio                           {rates['jaxdata'] / rates['grain']:14.1f}x   (goal >= 50x)")

  metas = {n: DatasetMeta.load(d) for n, d in make_corpus(args.corpus).items()}
  print("\nDocumentStream, 4 datasets, tokens unit, 2M-token steps:")
  for interleave in ("exact", "random"):
    rate = stream_rate(metas, interleave, args.steps, args.repeats)
    print(f"  {interleave:6s} interleave   {rate:14,.0f} documents/s   (goal >= 2,000,000)")

  seconds, peak_mb = trillion(1_000_000)
  print("\nvirtual 10^12-record dataset, global shuffle of the first 1M positions:")
  print(f"  {seconds:.3f} s, peak extra memory {peak_mb:.1f} MB (8 MB of it the output)   (goal < 1 s, < 50 MB)")


if __name__ == "__main__":
  main()
