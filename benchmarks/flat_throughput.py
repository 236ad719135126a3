"""Flat token sources and window sampling: in-place reads against their baselines, in one run.

    python -m benchmarks.flat_throughput [--corpus /tmp/jaxdata-bench] [--out /tmp/jaxdata-flat-bench]

The benchmark corpus (100M tokens, four datasets) is rewritten once as flat
token files (one per ArrayRecord shard, with offsets files: the same
documents in the same shards) and as Megatron .bin/.idx pairs, each indexed
in place by `jaxdata index`. Printed, as medians of interleaved repetitions:

1. Window reads (T = 2048, 4,096 uniform draws per call over the web
   dataset): `WindowView.read` with memory maps and with tensorstore's file
   kvstore, against a bare `np.memmap` gather of the same windows; and from
   the local S3 server (moto on 127.0.0.1, the same two cores) through
   tensorstore's s3 kvstore.
2. The pipeline over the four datasets as windows (seq_len 2048, 32 rows,
   the benchmark's token shares), NumPy output: local files and S3.
3. Documents: the benchmark's pipeline (global shuffle, first_fit, 2048 x
   32) over ArrayRecord, flat and Megatron copies of the same corpus; the
   batches are checked identical, the rates compared. Both sides realise the
   same token shares (printed).
Grain has neither window sampling nor flat sources to compare with.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable

import numpy as np

from benchmarks import TEST_SUPPORT
from benchmarks.make_corpus import make_corpus

sys.path.insert(0, TEST_SUPPORT)
import jaxdata
import object_store  # the tests' local object stores
from flat_fixtures import write_megatron  # the tests' reference Megatron writer
from jaxdata.sources.boundaries import DocumentBoundaries
from jaxdata.sources.flat_index import build_flat_index
from jaxdata.sources.opening import open_dataset
from jaxdata.sources.sampling_windows import WindowOptions

TOKEN_SHARES = {"web": 0.62, "code": 0.18, "books": 0.12, "curated": 0.08}
T = 2048
DRAWS = 4096
REPEATS = 3


def write_copies(corpus: dict[str, str], out: str) -> tuple[dict[str, str], dict[str, str]]:
  """Flat (with offsets) and Megatron copies of every dataset, shard for shard; reused when present."""
  flat, megatron = {}, {}
  for name, path in corpus.items():
    flat[name], megatron[name] = os.path.join(out, "flat", name), os.path.join(out, "megatron", name)
    if os.path.exists(os.path.join(megatron[name], "manifest.json")):
      continue
    os.makedirs(flat[name], exist_ok=True)
    os.makedirs(megatron[name], exist_ok=True)
    with jaxdata.sources.TokenDataset(path) as source:
      files, prefixes = [], []
      for shard in range(source.num_shards):
        records = np.arange(source.record_starts[shard], source.record_starts[shard + 1])
        docs = source.read_global(records)
        files.append(os.path.join(flat[name], f"{name}-{shard:05d}.bin"))
        docs.tokens.tofile(files[-1])
        np.save(files[-1] + ".offsets.npy", docs.offsets[:-1])
        prefixes.append(os.path.join(megatron[name], f"{name}-{shard:05d}"))
        write_megatron(prefixes[-1], [[d] for d in docs.to_list()])
      tokenizer = source.manifest.tokenizer
    build_flat_index("flat", files, dtype="uint16", boundaries=DocumentBoundaries.offsets(), tokenizer=tokenizer)
    build_flat_index("megatron", prefixes, tokenizer=tokenizer)
  return flat, megatron


def median_rate(measure: Callable[[], tuple[int, float]]) -> float:
  rates = []
  for _ in range(REPEATS):
    tokens, seconds = measure()
    rates.append(tokens / seconds)
  return statistics.median(rates)


def window_reads(path: str, reader: str, calls: int) -> tuple[Callable[[], tuple[int, float]], Callable]:
  view = open_dataset(path, jaxdata.sources.ReadOptions(flat_reader=reader), windows=WindowOptions(T))
  rng = np.random.default_rng(0)
  batches = [view.locate(rng.integers(0, view.num_records, DRAWS)) for _ in range(calls)]

  def ours() -> tuple[int, float]:
    started = time.perf_counter()
    for shards, records in batches:
      view.read(shards, records)
    return calls * DRAWS * (T + 1), time.perf_counter() - started

  maps = [] if "://" in path else [np.memmap(view.shard_path(s), np.uint16, "r") for s in range(view.num_shards)]

  def baseline() -> tuple[int, float]:
    started = time.perf_counter()
    for shards, records in batches:
      for s in np.unique(shards).tolist():  # np.memmap gathers one file at a time
        maps[s][records[shards == s][:, None] + np.arange(T + 1)]
    return calls * DRAWS * (T + 1), time.perf_counter() - started

  return ours, baseline


def pipeline_rate(cfg: jaxdata.PipelineConfig, steps: int) -> tuple[Callable[[], tuple[int, float]], list]:
  digests: list = []

  def measure() -> tuple[int, float]:
    with jaxdata.Pipeline(cfg, prefetch=2) as pipe:
      next(pipe)  # construction and the first batch are not the steady rate
      started, tokens = time.perf_counter(), 0
      for _ in range(steps):
        batch = next(pipe)
        tokens += int(np.count_nonzero(batch["segment_ids"]))
        if len(digests) < 20:
          digests.append(batch["tokens"].tobytes())
      seconds = time.perf_counter() - started
      digests.append(pipe.stats()["share_cumulative"])
    return tokens, seconds

  return measure, digests


def config(paths: dict[str, str], windows: bool) -> jaxdata.PipelineConfig:
  return jaxdata.PipelineConfig.from_dict(
    {
      "datasets": [{"name": n, "path": p, **({"sampling": "windows"} if windows else {})} for n, p in paths.items()],
      "mixture": {"weights": TOKEN_SHARES},
      "exhausted_policy": "repeat",
      "shuffle_block_size": "global",
      "packing": {"mode": "first_fit", "seq_len": 2048},
      "batch": {"global_batch_size": 32},
    }
  )


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--corpus", default="/tmp/jaxdata-bench")
  parser.add_argument("--out", default="/tmp/jaxdata-flat-bench")
  args = parser.parse_args()
  corpus = make_corpus(args.corpus)
  flat, megatron = write_copies(corpus, args.out)
  servers = object_store.servers()
  stores = next(servers)
  try:
    s3 = stores["s3"]
    urls = {n: s3.upload(p, "jaxdata-bench", f"flat/{n}") for n, p in flat.items()}
    print(f"1. window reads, T = {T}, {DRAWS} uniform draws per call (tokens read per second, median of {REPEATS})")
    mapped, baseline = window_reads(flat["web"], "mmap", 8)
    kv, _ = window_reads(flat["web"], "tensorstore", 8)
    remote, _ = window_reads(urls["web"], "tensorstore", 2)
    rates = {
      "np.memmap baseline": median_rate(baseline),
      "WindowView, mmap": median_rate(mapped),
      "WindowView, tensorstore file": median_rate(kv),
      "WindowView, tensorstore s3 (moto)": median_rate(remote),
    }
    for label, rate in rates.items():
      print(f"   {label:36s} {rate / 1e6:8.1f} M/s   {rate / rates['np.memmap baseline']:5.2f}x the baseline")
    print("2. pipeline of four window datasets (non-pad tokens/s, NumPy output)")
    local_measure, local_digests = pipeline_rate(config(flat, True), 300)
    remote_measure, _ = pipeline_rate(config(urls, True), 60)
    local_rate, remote_rate = median_rate(local_measure), median_rate(remote_measure)
    print(
      f"   local files {local_rate / 1e6:6.1f} M/s   s3 (moto) {remote_rate / 1e6:6.1f} M/s   "
      f"shares {format_shares(local_digests[-1])}"
    )
  finally:
    servers.close()
  print("3. documents: ArrayRecord vs flat vs Megatron copies (non-pad tokens/s, NumPy output)")
  runs = {
    kind: pipeline_rate(config(paths, False), 300)
    for kind, paths in (("arrayrecord", corpus), ("flat", flat), ("megatron", megatron))
  }
  rates = {kind: [] for kind in runs}
  for _ in range(REPEATS):  # interleaved: a slow moment of the machine hits every kind alike
    for kind, (measure, _) in runs.items():
      tokens, seconds = measure()
      rates[kind].append(tokens / seconds)
  same = all(runs[k][1][:20] == runs["arrayrecord"][1][:20] for k in runs)
  for kind, values in rates.items():
    rate = statistics.median(values)
    print(
      f"   {kind:12s} {rate / 1e6:6.1f} M/s   {rate / statistics.median(rates['arrayrecord']):5.2f}x ArrayRecord   "
      f"shares {format_shares(runs[kind][1][-1])}"
    )
  print(f"   first 20 batches identical across the three: {same}")


def format_shares(shares: dict[str, float]) -> str:
  return " ".join(f"{n} {v:.3f}" for n, v in shares.items())


if __name__ == "__main__":
  main()
