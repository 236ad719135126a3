"""Preference pairs: jaxdata's packed layouts against one pair per row (MaxText's DPO layout) and Grain.

    python -m benchmarks.preference_throughput [--out /tmp/jaxdata-pairs] [--scale 1.0] [--steps 60] [--repetitions 2]

Two sets of pre-tokenized pairs (uint32 ids, vocabulary 128,256), written once by
`jaxdata.sources.DatasetWriter(pairs=True)`; lognormal lengths as in public preference sets:

    ultra   prompts ~150 tokens, answers ~300 (an UltraFeedback-like set)   pair weight .7
    short   prompts ~40, answers ~90                                          pair weight .3

Every side has the same pairs (weights count pairs), rows of 2,048, 16 rows a step; a pair a side of
which is longer than a row is dropped on every side.

    jaxdata one_row            packing.pairs layout one_row, best_fit (both sides in one row)
    jaxdata one_row, shared    the same with shared_prompt (the prompt laid out once)
    jaxdata parallel           layout parallel, best_fit (chosen rows and rejected rows)
    jaxdata one pair per row   layout parallel, mode none: MaxText's DPO layout (each side padded to a row)
    Grain, one pair per row    the pipeline a MaxText DPO user has: ArrayRecordDataSource, split each record
                               into its sides, pad each to 2,048, per-set shuffle + repeat, IterDataset.mix
                               by the pair weights, batch 16
    Grain, pairs packed        the same, then FirstFitPackIterDataset on the pair as one sequence (16 bins)

Printed per side: pairs/s, padding share (the slots of a step's rows that hold no token), and the
realised pair shares per set on each side (which must match the weights), with ratios to Grain's best.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Any

import numpy as np

from benchmarks.sft_throughput import grain_record_streams

SETS = {"ultra": (0.7, 150, 300, 6000), "short": (0.3, 40, 90, 6000)}  # weight, prompt mean, answer mean, pairs
SEQ_LEN, ROWS, VOCAB = 2048, 16, 128_256


def _lognormal(rng: np.random.Generator, mean: float, count: int, low: int) -> np.ndarray:
  return np.clip(rng.lognormal(np.log(mean) - 0.18, 0.6, count), low, 4 * SEQ_LEN).astype(np.int64)


def make_sets(out: str, scale: float) -> dict[str, str]:
  """The two sets of pairs (written once; reused when present)."""
  import jaxdata  # noqa: PLC0415

  paths = {}
  for i, (name, (_, prompt_mean, answer_mean, count)) in enumerate(SETS.items()):
    path = paths[name] = os.path.join(out, name)
    if os.path.isfile(os.path.join(path, "manifest.json")):
      continue
    rng = np.random.default_rng(i)
    n = int(count * scale)
    prompt, chosen, rejected = (_lognormal(rng, m, n, 1) for m in (prompt_mean, answer_mean, answer_mean))
    sides = np.stack([prompt + chosen, prompt + rejected], 1)
    lengths = sides.sum(1)
    ids = rng.integers(0, VOCAB, int(lengths.sum()), dtype=np.int64)
    # each side: the prompt (untrained), then its answer (trained); bit 1 marks the rejected side
    side_length = sides.ravel()
    offset = np.arange(int(lengths.sum())) - np.repeat(np.cumsum(side_length) - side_length, side_length)
    rejected_side = np.repeat(np.tile([0, 2], n), side_length).astype(np.uint8)
    marks = (offset >= np.repeat(np.repeat(prompt, 2), side_length)).astype(np.uint8) | rejected_side
    prompt_ids = np.repeat(np.cumsum(lengths) - lengths, prompt) + (
      np.arange(int(prompt.sum())) - np.repeat(np.cumsum(prompt) - prompt, prompt)
    )
    rejected_prompt = prompt_ids + np.repeat(prompt + chosen, prompt)
    ids[rejected_prompt] = ids[prompt_ids]  # both sides share the prompt's ids
    identity = {"kind": "synthetic", "vocab_size": VOCAB}
    writer = jaxdata.sources.DatasetWriter(path, name, np.dtype("<u4"), identity, pairs=True)
    writer.write_documents(ids, lengths, marks)
    writer.finish()
  return paths


def jaxdata_config(paths: dict[str, str], layout: str, shared: bool, mode: str) -> Any:
  import jaxdata  # noqa: PLC0415

  return jaxdata.PipelineConfig.from_dict(
    {
      "seed": 0,
      "datasets": [{"name": n, "path": p} for n, p in paths.items()],
      "mixture": {"unit": "documents", "weights": {n: s[0] for n, s in SETS.items()}},
      "exhausted_policy": "repeat",
      "packing": {"mode": mode, "seq_len": SEQ_LEN, "pairs": {"layout": layout, "shared_prompt": shared}},
      "batch": {"global_batch_size": ROWS},
    }
  )


def run_jaxdata(paths: dict[str, str], steps: int, layout: str, shared: bool = False, mode: str = "best_fit") -> dict:
  import jaxdata  # noqa: PLC0415

  prefix = "" if layout == "one_row" else "chosen_"
  with jaxdata.Pipeline(jaxdata_config(paths, layout, shared, mode)) as pipe:
    next(pipe)
    pairs, filled, shares = 0, 0, np.zeros(len(SETS))
    started = time.perf_counter()
    for _ in range(steps):
      batch = {k: np.asarray(v) for k, v in next(pipe).items()}
      if layout == "one_row":  # a pair per (row, pair id): its first slot
        first = (batch["pair_ids"] > 0) & (np.diff(batch["pair_ids"], prepend=0, axis=1) != 0)
        filled += int((batch["segment_ids"] > 0).sum())
      else:
        first = (batch[f"{prefix}segment_ids"] > 0) & (batch[f"{prefix}positions"] == 0)
        filled += sum(int((batch[f"{s}_segment_ids"] > 0).sum()) for s in ("chosen", "rejected"))
      found = np.bincount(batch[f"{prefix}source_ids"][first], minlength=len(SETS))
      pairs, shares = pairs + int(found.sum()), shares + found
    seconds = time.perf_counter() - started
  capacity = steps * ROWS * SEQ_LEN * (1 if layout == "one_row" else 2)
  return {"pairs_per_s": pairs / seconds, "padding": 1 - filled / capacity, "shares": shares / shares.sum()}


def _sides(raw: bytes, source: int) -> dict[str, np.ndarray]:
  """A pair record: n uint32 ids, then n bytes (bit 0 trained, bit 1 the rejected side)."""
  n = len(raw) // 5
  ids = np.frombuffer(raw[: 4 * n], "<u4").astype(np.int32)
  marks = np.frombuffer(raw[4 * n :], np.uint8)
  return {"ids": ids, "marks": marks.astype(np.int32), "source": np.full(n, source, np.int32)}


def _padded_pair(pair: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
  """MaxText's DPO layout: each side in its own row of SEQ_LEN, padded."""
  rejected = (pair["marks"] & 2) != 0
  out = {}
  for name, side in (("chosen", ~rejected), ("rejected", rejected)):
    ids = pair["ids"][side]
    row = np.zeros(SEQ_LEN, np.int32)
    row[: ids.size] = ids
    out[f"{name}_tokens"], out[f"{name}_length"] = row, np.int32(ids.size)
  out["source"] = pair["source"][0]
  return out


def grain_dataset(paths: dict[str, str], packed: bool) -> Any:
  import grain  # noqa: PLC0415

  fits = (
    (lambda e: e["ids"].size <= SEQ_LEN)
    if packed
    else (lambda e: max(int(((e["marks"] & 2) != 0).sum()), int(((e["marks"] & 2) == 0).sum())) <= SEQ_LEN)
  )
  datasets = [stream.filter(fits) for stream in grain_record_streams(paths, _sides)]
  weights = [s[0] for s in SETS.values()]
  mixed = grain.IterDataset.mix(datasets, [w / sum(weights) for w in weights])
  if packed:
    return grain.experimental.FirstFitPackIterDataset(
      mixed, length_struct={"ids": SEQ_LEN, "marks": SEQ_LEN, "source": SEQ_LEN}, num_packing_bins=ROWS
    ).batch(ROWS)
  return mixed.map(_padded_pair).batch(ROWS)


def run_grain(paths: dict[str, str], steps: int, packed: bool) -> dict[str, Any]:
  iterator = iter(grain_dataset(paths, packed))
  next(iterator)
  pairs, filled, shares = 0, 0, np.zeros(len(SETS))
  started = time.perf_counter()
  for _ in range(steps):
    batch = next(iterator)
    if packed:
      segments = batch["ids_segment_ids"]
      first = (batch["ids_positions"] == 0) & (segments > 0)
      found = np.bincount(batch["source"][first], minlength=len(SETS))
      filled += int((segments > 0).sum())
    else:
      found = np.bincount(batch["source"], minlength=len(SETS))
      filled += int(batch["chosen_length"].sum() + batch["rejected_length"].sum())
    pairs, shares = pairs + int(found.sum()), shares + found
  seconds = time.perf_counter() - started
  capacity = steps * ROWS * SEQ_LEN * (1 if packed else 2)
  return {"pairs_per_s": pairs / seconds, "padding": 1 - filled / capacity, "shares": shares / shares.sum()}


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--out", default="/tmp/jaxdata-pairs")
  parser.add_argument("--scale", type=float, default=1.0)
  parser.add_argument("--steps", type=int, default=60, help="timed steps per run (after the first)")
  parser.add_argument("--repetitions", type=int, default=2)
  args = parser.parse_args()
  paths = make_sets(args.out, args.scale)
  sides = {
    "jaxdata one_row": lambda: run_jaxdata(paths, args.steps, "one_row"),
    "jaxdata one_row, shared prompt": lambda: run_jaxdata(paths, args.steps, "one_row", shared=True),
    "jaxdata parallel": lambda: run_jaxdata(paths, args.steps, "parallel"),
    "jaxdata one pair per row (MaxText's layout)": lambda: run_jaxdata(paths, args.steps, "parallel", mode="none"),
    "Grain, one pair per row (MaxText's layout)": lambda: run_grain(paths, args.steps, packed=False),
    "Grain, pairs packed as sequences": lambda: run_grain(paths, args.steps, packed=True),
  }
  runs: dict[str, list[dict[str, Any]]] = {name: [] for name in sides}
  for _ in range(args.repetitions):  # interleaved: each repetition runs every side once
    for name, run in sides.items():
      runs[name].append(run())
  target = ", ".join(f"{n} {s[0]:.2f}" for n, s in SETS.items())
  print(f"uint32 ids; target pair shares: {target}; rows {ROWS} x {SEQ_LEN}")
  medians = {name: statistics.median(r["pairs_per_s"] for r in results) for name, results in runs.items()}
  grain_best = max(v for k, v in medians.items() if k.startswith("Grain"))
  for name, results in runs.items():
    shares = ", ".join(f"{s:.3f}" for s in np.mean([r["shares"] for r in results], axis=0))
    padding = statistics.median(r["padding"] for r in results)
    print(
      f"{name:44s} {medians[name]:8,.0f} pairs/s  [{medians[name] / grain_best:4.2f}x Grain's best]  "
      f"padding {padding:6.1%}  pair shares {shares}"
    )


if __name__ == "__main__":
  main()
