"""Fine-tuning batches: jaxdata against Grain on the same masked examples, at the same document shares.

    python -m benchmarks.sft_throughput [--out /tmp/jaxdata-sft] [--scale 1.0] [--steps 300] [--repetitions 3]
                                        [--compression zstd|none]

Three sets of pre-tokenized examples with trained-token masks (uint32 ids, vocabulary 128,256; lognormal
lengths): `chat` (mean ~700 tokens), `tool_calls` (~1,500), `safety` (~300), written once by
`jaxdata.sources.DatasetWriter(masks=True)`. The workload: document weights .6 / .3 / .1 (each set upsampled or
not by its weight, reshuffled every pass), rows of 2,048 tokens, 32 rows a step, at most 16 examples a
row, examples longer than a row dropped, the mask carried into the batch.

    jaxdata   Pipeline(best_fit, max_segments_per_row 16, long_docs drop): NumPy rows in process, and
              global arrays on an 8-device CPU mesh (the defaults, and planning in process)
    Grain     the same ArrayRecord shards through grain.sources.ArrayRecordDataSource, each record split
              into ids and mask, examples over 2,048 dropped, per-set shuffle + repeat, IterDataset.mix by
              the same document weights, FirstFitPackIterDataset (32 bins, length_struct with the mask),
              batch 32; single process and mp_prefetch(2)

Sides run interleaved, medians of `--repetitions`; printed: non-padding tokens/s, trained tokens per
step, realised document shares per set (both sides must match the weights), and ratios to Grain's best.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import numpy as np

SETS = {"chat": (0.6, 700, 12000), "tool_calls": (0.3, 1500, 3000), "safety": (0.1, 300, 6000)}  # weight, mean, count
SEQ_LEN, ROWS, CAP, VOCAB = 2048, 32, 16, 128_256
CHECK_EVERY = 25  # every 25th jaxdata batch is copied back and its counts checked against the stats


def make_sets(out: str, scale: float, compression: str = "zstd") -> dict[str, str]:
  """The three masked sets (written once; reused when present)."""
  import jaxdata  # noqa: PLC0415

  paths = {}
  for i, (name, (_, mean, count)) in enumerate(SETS.items()):
    path = paths[name] = os.path.join(out, f"{name}-{compression}")
    if os.path.isfile(os.path.join(path, "manifest.json")):
      continue
    rng = np.random.default_rng(i)
    # at most a row: every example fits, so both sides place every example they draw (equal shares)
    lengths = np.clip(rng.lognormal(np.log(mean) - 0.18, 0.6, int(count * scale)), 8, SEQ_LEN).astype(np.int64)
    ids = rng.integers(0, VOCAB, int(lengths.sum()), dtype=np.int64)
    # a prompt (untrained) then an answer (trained) per example: the answer starts at 30-70% of it
    cut = (lengths * rng.uniform(0.3, 0.7, lengths.size)).astype(np.int64)
    offset = np.arange(int(lengths.sum())) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    mask = (offset >= np.repeat(cut, lengths)).astype(np.uint8)
    identity = {"kind": "synthetic", "vocab_size": VOCAB}
    writer = jaxdata.sources.DatasetWriter(path, name, np.dtype("<u4"), identity, compression=compression, masks=True)
    writer.write_documents(ids, lengths, mask)
    writer.finish()
  return paths


def jaxdata_config(paths: dict[str, str]) -> Any:
  import jaxdata  # noqa: PLC0415

  return jaxdata.PipelineConfig.from_dict(
    {
      "seed": 0,
      "datasets": [{"name": n, "path": p} for n, p in paths.items()],
      "mixture": {"unit": "documents", "weights": {n: w for n, (w, _, _) in SETS.items()}},
      "shuffle_block_size": "global",
      "exhausted_policy": "repeat",
      "packing": {"mode": "best_fit", "seq_len": SEQ_LEN, "max_segments_per_row": CAP, "long_docs": "drop"},
      "batch": {"global_batch_size": ROWS},
    }
  )


def run_jaxdata(paths: dict[str, str], steps: int, mesh: bool, planner_process: bool | None = None) -> dict[str, Any]:
  import jax  # noqa: PLC0415

  import jaxdata  # noqa: PLC0415

  cfg = jaxdata_config(paths)
  device_mesh = jax.make_mesh((len(jax.devices()),), ("data",)) if mesh else None
  with jaxdata.Pipeline(cfg, mesh=device_mesh, planner_process=planner_process) as pipe:
    next(pipe)
    tokens, trained, documents = 0, 0, np.zeros(len(SETS))
    started = time.perf_counter()
    for step in range(steps):
      # Counted from the pipeline's own stats of the step (a training loop never copies its device
      # batches back); every CHECK_EVERY-th batch is copied back and checked against them.
      batch = jax.block_until_ready(next(pipe))
      stats = pipe.stats()
      counts = _stated(stats)
      if step % CHECK_EVERY == 0 and counts != _counted(batch):
        raise AssertionError(f"step {step}: the batch's counts {_counted(batch)} differ from its stats {counts}")
      tokens, trained, documents = tokens + counts[0], trained + counts[1], documents + counts[2]
    seconds = time.perf_counter() - started
  return {"tokens_per_s": tokens / seconds, "trained_per_step": trained / steps, "shares": documents / documents.sum()}


def _stated(stats: dict[str, Any]) -> tuple[int, int, list[int]]:
  """(non-padding tokens, trained tokens, documents per set) as the step's stats give them."""
  return (
    sum(stats["tokens_per_source"].values()),
    sum(stats["trained_tokens_per_source"].values()),
    [stats["documents_per_source"][name] for name in SETS],
  )


def _counted(batch: dict[str, Any]) -> tuple[int, int, list[int]]:
  """The same, counted in the batch's arrays (documents: segments that start in it)."""
  segments, sources = np.asarray(batch["segment_ids"]), np.asarray(batch["source_ids"])
  starts = (np.asarray(batch["positions"]) == 0) & (segments > 0)
  documents = np.bincount(sources[starts], minlength=len(SETS))
  return int((segments > 0).sum()), int(np.asarray(batch["loss_mask"]).sum()), documents.tolist()


def _split(raw: bytes, source: int) -> dict[str, np.ndarray]:
  """A masked record: n uint32 ids, then n mask bytes."""
  n = len(raw) // 5
  return {
    "tokens": np.frombuffer(raw[: 4 * n], "<u4").astype(np.int32),
    "mask": np.frombuffer(raw[4 * n :], np.uint8).astype(np.int32),
    "source": np.full(n, source, np.int32),
  }


def grain_record_streams(paths: dict[str, str], decode: Callable[[bytes, int], dict[str, np.ndarray]]) -> list[Any]:
  """Per dataset, in order: Grain's `MapDataset.source(ArrayRecordDataSource).shuffle(seed=i).repeat()` over
  its shards, each record `decode(raw, i)`, as an `IterDataset` (the Grain side the benchmarks share)."""
  import grain  # noqa: PLC0415
  from absl import flags  # noqa: PLC0415

  import jaxdata  # noqa: PLC0415

  flags.FLAGS.mark_as_parsed()  # Grain reads absl flags; we are outside absl.app.run
  streams = []
  for i, path in enumerate(paths.values()):
    with jaxdata.sources.TokenDataset(path) as local:
      shards = [local.shard_path(s) for s in range(local.num_shards)]
    streams.append(
      grain.MapDataset.source(grain.sources.ArrayRecordDataSource(shards))
      .shuffle(seed=i)
      .repeat()
      .map(lambda raw, i=i: decode(raw, i))
      .to_iter_dataset(grain.ReadOptions(num_threads=0))
    )
  return streams


def grain_dataset(paths: dict[str, str], workers: int) -> Any:
  import grain  # noqa: PLC0415

  datasets = [
    stream.filter(lambda e: e["tokens"].size <= SEQ_LEN)  # as long_docs: drop
    for stream in grain_record_streams(paths, _split)
  ]
  weights = [w for w, _, _ in SETS.values()]
  mixed = grain.IterDataset.mix(datasets, [w / sum(weights) for w in weights])
  packed = grain.experimental.FirstFitPackIterDataset(
    mixed, length_struct={"tokens": SEQ_LEN, "mask": SEQ_LEN, "source": SEQ_LEN}, num_packing_bins=ROWS
  ).batch(ROWS)
  if workers:
    packed = packed.mp_prefetch(grain.MultiprocessingOptions(num_workers=workers))
  return packed


def run_grain(paths: dict[str, str], steps: int, workers: int) -> dict[str, Any]:
  iterator = iter(grain_dataset(paths, workers))
  next(iterator)
  tokens, trained, documents = 0, 0, np.zeros(len(SETS))
  started = time.perf_counter()
  for _ in range(steps):
    batch = next(iterator)
    segments = batch["tokens_segment_ids"]
    tokens += int((segments > 0).sum())
    trained += int(batch["mask"].sum())
    starts = (batch["tokens_positions"] == 0) & (segments > 0)
    documents += np.bincount(batch["source"][starts], minlength=len(SETS))
  seconds = time.perf_counter() - started
  return {"tokens_per_s": tokens / seconds, "trained_per_step": trained / steps, "shares": documents / documents.sum()}


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--out", default="/tmp/jaxdata-sft")
  parser.add_argument("--scale", type=float, default=1.0)
  parser.add_argument("--steps", type=int, default=300, help="timed steps per run (after the first)")
  parser.add_argument("--repetitions", type=int, default=3)
  parser.add_argument("--compression", default="zstd", choices=("zstd", "none"), help="the sets' record compression")
  args = parser.parse_args()
  paths = make_sets(args.out, args.scale, args.compression)
  sides = {
    "jaxdata, NumPy in process": lambda: run_jaxdata(paths, args.steps, mesh=False),
    "jaxdata, 8-device mesh (defaults)": lambda: run_jaxdata(paths, args.steps, mesh=True),
    "jaxdata, 8-device mesh, planning in process": lambda: run_jaxdata(paths, args.steps, True, planner_process=False),
    "Grain, single process": lambda: run_grain(paths, args.steps, workers=0),
    "Grain, mp_prefetch(2)": lambda: run_grain(paths, args.steps, workers=2),
  }
  runs: dict[str, list[dict[str, Any]]] = {name: [] for name in sides}
  for _ in range(args.repetitions):  # interleaved: each repetition runs every side once
    for name, run in sides.items():
      runs[name].append(run())
  target = ", ".join(f"{n} {w:.2f}" for n, (w, _, _) in SETS.items())
  print(f"target document shares: {target}; rows {ROWS} x {SEQ_LEN}, cap {CAP}, uint32 ids")
  medians = {name: statistics.median(r["tokens_per_s"] for r in results) for name, results in runs.items()}
  grain_best = max(v for k, v in medians.items() if k.startswith("Grain"))
  for name, results in runs.items():
    shares = ", ".join(f"{s:.3f}" for s in np.mean([r["shares"] for r in results], axis=0))
    trained = statistics.median(r["trained_per_step"] for r in results)
    print(
      f"{name:44s} {medians[name] / 1e6:6.2f}M non-padding tokens/s  [{medians[name] / grain_best:4.2f}x Grain's best]  "
      f"trained/step {trained:,.0f}  document shares {shares}"
    )


if __name__ == "__main__":
  main()
