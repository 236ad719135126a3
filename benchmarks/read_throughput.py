"""Batched random-order reads: jaxdata `TokenDataset.read` vs Grain's ArrayRecordDataSource.

Same files, same random record sets, same run. Every reader returns decoded
token arrays (Grain's bytes go through one `np.frombuffer` per batch, the
cheapest decode a Grain user can write), so the comparison is like for like.

    python benchmarks/make_corpus.py --out /tmp/jaxdata-bench
    python benchmarks/read_throughput.py --corpus /tmp/jaxdata-bench
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable

import grain.python as grain
import numpy as np
from absl import flags

from benchmarks.make_corpus import make_corpus
from jaxdata.sources import ReadOptions, TokenDataset

ReadBatch = Callable[[str, np.ndarray], int]  # (dataset, global indices) -> tokens read


def workload(sizes: dict[str, int], records: int, batch: int, seed: int) -> list[tuple[str, np.ndarray]]:
  """Random batches of distinct global record indices, datasets taken in turn.

  Distinct within a batch, as in a shuffled pass, which never repeats a
  document (a small dataset gives a batch of all its records at most).
  """
  rng = np.random.default_rng(seed)
  names = sorted(sizes)
  batches = []
  for i in range(max(1, records // batch)):
    name = names[i % len(names)]
    batches.append((name, rng.choice(sizes[name], min(batch, sizes[name]), replace=False)))
  return batches


def timed(read: ReadBatch, batches: list[tuple[str, np.ndarray]], repeats: int) -> tuple[float, int, int]:
  """Best of `repeats` passes: (seconds, records, tokens)."""
  best = float("inf")
  tokens = 0
  for _ in range(repeats):
    started = time.perf_counter()
    tokens = sum(read(name, indices) for name, indices in batches)
    best = min(best, time.perf_counter() - started)
  return best, sum(i.size for _, i in batches), tokens


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--corpus", default="/tmp/jaxdata-bench")
  parser.add_argument("--records", type=int, default=60_000, help="records per batched measurement")
  parser.add_argument("--single-records", type=int, default=4_000, help="records for one-at-a-time")
  parser.add_argument("--batch", type=int, nargs="+", default=[64, 512, 4096])
  parser.add_argument("--repeats", type=int, default=3)
  parser.add_argument("--json", help="also write the results here")
  args = parser.parse_args()
  flags.FLAGS.mark_as_parsed()  # Grain reads absl flags; we are outside absl.app.run

  dirs = make_corpus(args.corpus)
  ours = {n: TokenDataset(d, ReadOptions()) for n, d in dirs.items()}
  variants = {
    "jaxdata (defaults)": ours,
    "jaxdata (1 thread, serial reader)": {
      n: TokenDataset(d, ReadOptions(num_threads=1, reader_options="readahead_buffer_size:0,max_parallelism:0"))
      for n, d in dirs.items()
    },
    "jaxdata (1 thread, reader parallel)": {
      n: TokenDataset(d, ReadOptions(num_threads=1, reader_options="readahead_buffer_size:0")) for n, d in dirs.items()
    },
    "jaxdata (2 threads, reader parallel)": {
      n: TokenDataset(d, ReadOptions(num_threads=2, reader_options="readahead_buffer_size:0")) for n, d in dirs.items()
    },
  }
  theirs = {n: grain.ArrayRecordDataSource([ds.shard_path(i) for i in range(ds.num_shards)]) for n, ds in ours.items()}
  dtypes = {n: ds.dtype for n, ds in ours.items()}
  sizes = {n: ds.num_records for n, ds in ours.items()}

  def jaxdata_read(datasets: dict[str, TokenDataset]) -> ReadBatch:
    return lambda name, idx: datasets[name].read_global(idx).tokens.size

  def grain_batched(name: str, idx: np.ndarray) -> int:
    blobs = theirs[name].__getitems__(idx.tolist())
    return np.frombuffer(b"".join(blobs), dtype=dtypes[name]).size

  def grain_single(name: str, idx: np.ndarray) -> int:
    source = theirs[name]
    return sum(np.frombuffer(source[int(i)], dtype=dtypes[name]).size for i in idx)

  results = []
  print(f"corpus {args.corpus}: " + ", ".join(f"{n} {s:,} docs" for n, s in sizes.items()))
  print(f"{'reader':38s} {'batch':>6s} {'records/s':>11s} {'Mtokens/s':>10s}")
  for batch in args.batch:
    batches = workload(sizes, args.records, batch, seed=batch)
    timed(jaxdata_read(ours), batches[:10], 1)  # warm readers and page cache for all
    timed(grain_batched, batches[:10], 1)
    rows = {label: timed(jaxdata_read(v), batches, args.repeats) for label, v in variants.items()}
    rows["grain __getitems__"] = timed(grain_batched, batches, args.repeats)
    for label, (seconds, records, tokens) in rows.items():
      results.append(
        {"reader": label, "batch": batch, "records_per_s": records / seconds, "tokens_per_s": tokens / seconds}
      )
      print(f"{label:38s} {batch:6d} {records / seconds:11,.0f} {tokens / seconds / 1e6:10.1f}")
  single = workload(sizes, args.single_records, 1, seed=1)
  flat = [(n, i) for n, i in single]
  seconds, records, tokens = timed(grain_single, flat, 1)
  results.append(
    {
      "reader": "grain [i] one at a time",
      "batch": 1,
      "records_per_s": records / seconds,
      "tokens_per_s": tokens / seconds,
    }
  )
  print(f"{'grain [i] one at a time':38s} {1:6d} {records / seconds:11,.0f} {tokens / seconds / 1e6:10.1f}")

  def rate(reader: str, batch: int) -> float:
    return next(r["records_per_s"] for r in results if r["reader"] == reader and r["batch"] == batch)

  print("\nratios (records/s):")
  single_rate = rate("grain [i] one at a time", 1)
  for batch in args.batch:
    ours_rate = rate("jaxdata (defaults)", batch)
    print(
      f"  batch {batch:4d}: jaxdata / grain batched = {ours_rate / rate('grain __getitems__', batch):.2f}x"
      f"   jaxdata / grain one-at-a-time = {ours_rate / single_rate:.2f}x"
    )
  if args.json:
    with open(args.json, "w") as f:
      json.dump(results, f, indent=1)


if __name__ == "__main__":
  main()
