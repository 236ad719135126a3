"""Remote datasets: local files vs the same datasets in an S3 server, in one run.

    python -m benchmarks.remote_throughput [--out /tmp/jaxdata-remote-bench]

A quarter-size benchmark corpus in 256 KB shards (about 100 shards, 50 MB),
uploaded to a local S3 server (moto, on 127.0.0.1, on the same two cores:
its throughput bounds the remote figure here). The config is the
two-level streaming order scaled down to these small shards: open_shards 2
per dataset, blocks of 64 documents (16 for books, whose shards hold about 15
long documents), a 256K-token read span, a cache of 10% of the corpus's bytes. Printed: non-padding tokens/s for local and remote, the bytes fetched
per token read against the dataset's bytes per token (goal: <= 1.05x over a
pass), and how each shard get was served (present, prefetched, fetched on
demand). Grain has no remote ArrayRecord source to compare with.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from typing import Any

import numpy as np

from benchmarks.make_corpus import make_corpus

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))
import jaxdata  # noqa: E402
import object_store  # noqa: E402 -- the tests' local object stores

TOKEN_SHARES = {"web": 0.62, "code": 0.18, "books": 0.12, "curated": 0.08}
STEPS = 1640  # two passes of books (6.3M tokens at 12% of 65,536 per step), more of the others


def config(paths: dict[str, str], cache_dir: str, cache_bytes: int) -> jaxdata.PipelineConfig:
  return jaxdata.PipelineConfig.from_dict(
    {
      # books' 256 KB shards hold about 15 documents: its blocks are smaller, to span as few shards.
      "datasets": [
        {"name": n, "path": p, **({"shuffle_block_size": 16} if n == "books" else {})} for n, p in paths.items()
      ],
      "mixture": {"weights": TOKEN_SHARES, "unit": "tokens"},
      "exhausted_policy": "repeat",
      "open_shards": 2,
      "shuffle_block_size": 64,
      "packing": {"mode": "first_fit", "seq_len": 2048},
      "batch": {"global_batch_size": 32},
      "cache_dir": cache_dir,
      "cache_bytes": cache_bytes,
    }
  )


def run(
  cfg: jaxdata.PipelineConfig, planner_process: bool = False
) -> tuple[float, dict[str, float], dict[str, int], Any]:
  """(non-pad tokens/s, share of the tokens per dataset, bytes fetched per dataset, the cache).
  `planner_process`: windows planned by a planner process and read here (the default with a mesh)."""
  with jaxdata.Pipeline(cfg, prefetch=2, read_ahead_tokens=1 << 18, planner_process=planner_process) as pipe:
    started, tokens = time.perf_counter(), 0
    for _ in range(STEPS):
      tokens += int(np.count_nonzero(next(pipe)["segment_ids"]))
    elapsed = time.perf_counter() - started
    read = pipe.stats()["share_cumulative"]
    remotes = [d.remote for d in pipe.reader.datasets]
    fetched = {name: r.fetched_bytes for name, r in zip(read, remotes) if r is not None}
    cache = next((r.cache for r in remotes if r is not None), None)
  return tokens / elapsed, read, fetched, cache


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--out", default="/tmp/jaxdata-remote-bench")
  args = parser.parse_args()
  paths = make_corpus(args.out, scale=0.25, shard_bytes=256 << 10)
  sizes = {
    n: sum(os.path.getsize(os.path.join(p, f)) for f in os.listdir(p) if f.endswith(".array_record"))
    for n, p in paths.items()
  }
  tokens = {n: jaxdata.TokenDataset(p).num_tokens for n, p in paths.items()}
  cache_bytes = sum(sizes.values()) // 10
  servers = object_store.servers()
  stores = next(servers)
  try:
    s3 = stores["s3"]
    urls = {n: s3.upload(p, "jaxdata-bench", f"corpus/{n}") for n, p in paths.items()}
    with tempfile.TemporaryDirectory() as cache_dir:
      local_rate, *_ = run(config(paths, cache_dir, cache_bytes))
      remote_rate, shares, fetched, cache = run(config(urls, cache_dir, cache_bytes))
    with tempfile.TemporaryDirectory() as cache_dir:  # a cold cache again
      planner_rate, _, _, planner_cache = run(config(urls, cache_dir, cache_bytes), planner_process=True)
  finally:
    servers.close()
  total_tokens = STEPS * 32 * 2048
  print(
    f"corpus: {sum(sizes.values()) / 1e6:.1f} MB in {sum(len(os.listdir(p)) // 2 for p in paths.values())} "
    f"shards; cache_bytes {cache_bytes / 1e6:.1f} MB (10%); {STEPS} steps"
  )
  print(
    f"non-pad tokens/s   local {local_rate / 1e6:6.2f} M   remote (moto S3) {remote_rate / 1e6:6.2f} M   "
    f"ratio {remote_rate / local_rate:.2f}"
  )
  print("dataset  passes  bytes fetched / (dataset bytes x passes)  (goal <= 1.05x)")
  for name, share in shares.items():
    passes = share * total_tokens / tokens[name]
    print(
      f"{name:8s} {passes:6.2f}  {fetched[name] / (sizes[name] * passes):6.3f}x  "
      f"({fetched[name] / 1e6:.1f} MB fetched, {sizes[name] / 1e6:.1f} MB per pass)"
    )
  for label, shard_cache in (("planned in process", cache), ("planner process", planner_cache)):
    gets = shard_cache.hits + shard_cache.prefetched + shard_cache.misses
    print(
      f"shard gets, {label}: {shard_cache.hits / gets:.1%} present, {shard_cache.prefetched / gets:.1%} on "
      f"their way, {shard_cache.misses / gets:.1%} fetched on demand; {shard_cache.ahead_gets / gets:.1%} asked "
      f"for a window ahead; peak held {shard_cache.peak_bytes / 1e6:.1f} MB"
    )
  print(f"remote with a planner process (the default with a mesh): {planner_rate / 1e6:.2f} M non-pad tokens/s")


if __name__ == "__main__":
  main()
