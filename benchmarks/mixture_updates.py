"""Online mixture updates: throughput with an update before every step, every 10 and every 100 steps,
against none, in every execution mode, at the default lag.

    python -m benchmarks.mixture_updates [--corpus /tmp/jaxdata-bench] [--scale 0.1] [--steps 300]
        [--widths uint32,uint16] [--modes in-process,planner-process,readers2,mesh8] [--repeats 3]

The benchmark corpus (`benchmarks/make_corpus.py`, 4 datasets, zstd records)
and the pipeline benchmark's workload (first_fit, 32 rows x 2048 tokens,
global shuffle, token shares .62/.18/.12/.08). Each update sets the weights
a controller would (drawn from a generator keyed by the step: every mode
makes the same updates; the controller is not timed). Modes: in process with
prefetch 2 (NumPy output), the planner process (NumPy), two worker processes
(NumPy), and an 8-device CPU mesh with the defaults. Runs are interleaved:
every repetition runs each cadence once, and the medians are printed with
their ratio to no updates in the same mode, the mean and worst time of one
`update_mixture` call, and how many updates planned steps again (0 at the
default lag; the first update of a run, made before the timed steps, replans
what was made ahead before the loop began steering: its time is printed
apart). Every run's batches are checked against an in-process run with
`prefetch=0` making the same updates, so every mode realises the token shares
printed for its cadence.

`--state-steps N` also measures the state's size and an update call's cost with
an update before every step for N steps (a small config: the cost is the
update's, not the reads').
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import time
from collections.abc import Mapping
from typing import Any

# Before jax initialises (only the mesh mode imports it): 8 CPU devices.
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import numpy as np

from benchmarks.make_corpus import VOCABS, corpus_dir, make_corpus
from benchmarks.pipeline_throughput import jaxdata_config
from jaxdata import Pipeline, PipelineConfig, StepMaking

CADENCES: tuple[int | None, ...] = (None, 100, 10, 1)
MODES: dict[str, dict[str, Any]] = {
  "in-process": {"prefetch": 2},
  "planner-process": {"prefetch": 2, "making": StepMaking("process")},
  "readers2": {"prefetch": 2, "making": StepMaking("process", reader_processes=2)},
  "mesh8": {},  # the defaults with a mesh: prefetch 2, a planner process on >= 2 cores
}


def weights_for(step: int, names: tuple[str, ...]) -> dict[str, float]:
  """A controller's weights before `step` (the same in every mode and run)."""
  rng = np.random.default_rng(step)
  return dict(zip(names, (rng.random(len(names)) + 0.05).tolist()))


def _mesh() -> Any:
  import jax  # noqa: PLC0415 -- only the mesh mode loads jax (after XLA_FLAGS above)

  return jax.make_mesh((8,), ("data",), axis_types=(jax.sharding.AxisType.Auto,))


def run(cfg: PipelineConfig, steps: int, every: int | None, arguments: Mapping[str, Any], mesh: Any = None) -> dict:
  """One run: seconds, tokens, the update calls' times, replans, realised shares, a digest of every batch."""
  digest, tokens, calls = hashlib.sha256(), 0, []
  per_source = np.zeros(len(cfg.names))
  with Pipeline(cfg, mesh, **arguments) as pipe:
    next(pipe)  # opened and warm (processes started, first span read)
    first = 0.0
    if every is not None:  # the run's first update replans what was made ahead before steering began: once
      begun = time.perf_counter()
      pipe.update_mixture(weights_for(0, cfg.names))
      first = time.perf_counter() - begun
      next(pipe)
    replanned_before = pipe.execution().updates_replanned
    started = time.perf_counter()
    for step in range(1, steps + 1):
      if every is not None and step % every == 0:
        weights = weights_for(step, cfg.names)
        begun = time.perf_counter()
        pipe.update_mixture(weights)
        calls.append(time.perf_counter() - begun)
      batch = next(pipe)
      mask = np.asarray(batch["loss_mask"]) == 1
      sources = np.asarray(batch["source_ids"])
      per_source += np.bincount(sources[mask], minlength=len(cfg.names))
      tokens += int(mask.sum())
      digest.update(np.asarray(batch["tokens"]).tobytes())
    seconds = time.perf_counter() - started
    replanned = pipe.execution().updates_replanned - replanned_before
  return {
    "seconds": seconds,
    "tokens": tokens,
    "calls": calls,
    "replanned": replanned,
    "first": first,
    "shares": (per_source / per_source.sum()).tolist(),
    "digest": digest.hexdigest(),
  }


def measure(cfg: PipelineConfig, steps: int, modes: list[str], repeats: int) -> None:
  references = {every: run(cfg, steps, every, {"prefetch": 0}) for every in CADENCES}
  for every, reference in references.items():
    label = "no updates" if every is None else f"every {every} steps"
    shares = " ".join(f"{n} {s:.3f}" for n, s in zip(cfg.names, reference["shares"]))
    print(f"  realised token shares, {label:16s} (every mode, batches identical): {shares}")
  mesh = _mesh() if "mesh8" in modes else None
  for mode in modes:
    runs: dict[int | None, list[dict]] = {every: [] for every in CADENCES}
    for _ in range(repeats):  # interleaved: each cadence once per repetition
      for every in CADENCES:
        result = run(cfg, steps, every, MODES[mode], mesh if mode == "mesh8" else None)
        assert result["digest"] == references[every]["digest"], f"{mode}, every {every}: other batches than prefetch=0"
        runs[every].append(result)
    rates = {every: statistics.median(r["tokens"] / r["seconds"] for r in rs) for every, rs in runs.items()}
    for every, rs in runs.items():
      calls = [c for r in rs for c in r["calls"]]
      label = "no updates" if every is None else f"every {every:3d} steps"
      first = statistics.median(r["first"] for r in rs) * 1e3
      update = (
        f"update_mixture mean {np.mean(calls) * 1e3:5.3f} ms, worst {max(calls) * 1e3:5.2f} ms (first {first:.0f} ms)"
        if calls
        else ""
      )
      print(
        f"  {mode:15s} {label:16s} {rates[every] / 1e6:6.2f}M tokens/s  {rates[every] / rates[None]:5.3f}x  "
        f"replanned {sum(r['replanned'] for r in rs)}  {update}"
      )


def state_growth(corpus: str, steps: int) -> None:
  """An update before every step for `steps` steps, on a small config: the state's size and the call's cost."""
  raw = jaxdata_config(corpus).to_dict()
  raw["packing"]["seq_len"], raw["batch"]["global_batch_size"] = 64, 1
  cfg = PipelineConfig.from_dict(raw)
  with Pipeline(cfg, prefetch=2) as pipe:
    next(pipe)
    sizes, calls = {}, []
    for step in range(1, steps + 1):
      begun = time.perf_counter()
      pipe.update_mixture(weights_for(step, cfg.names))
      calls.append(time.perf_counter() - begun)
      next(pipe)
      if step in (1, 1_000, 10_000, steps):
        sizes[step] = len(json.dumps(pipe.get_state()))
    replanned = pipe.execution().updates_replanned
  first, last = np.mean(calls[:1000]) * 1e6, np.mean(calls[-1000:]) * 1e6
  print(
    f"state with an update before every step: {', '.join(f'{s:,} B after {k:,}' for k, s in sizes.items())}; "
    f"update_mixture {first:.0f} us (first 1,000 calls) -> {last:.0f} us (last 1,000); replanned {replanned}"
  )


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--corpus", default="/tmp/jaxdata-bench", help="the uint16 corpus; uint32 is <corpus>-u32")
  parser.add_argument("--scale", type=float, default=0.1)
  parser.add_argument("--steps", type=int, default=300)
  parser.add_argument("--widths", default="uint32,uint16")
  parser.add_argument("--modes", default=",".join(MODES))
  parser.add_argument("--repeats", type=int, default=3)
  parser.add_argument("--state-steps", type=int, default=0, help="also: the state after this many updates")
  parser.add_argument("--lag", type=int, help="mixture.update_lag_steps (default: the config's default)")
  args = parser.parse_args()
  modes = args.modes.split(",")
  unknown = set(modes) - set(MODES)
  if unknown:
    parser.error(f"--modes: unknown {sorted(unknown)}; choose from {', '.join(MODES)}")
  for width in args.widths.split(","):
    corpus = corpus_dir(args.corpus, VOCABS[width])
    make_corpus(corpus, args.scale, vocab_size=VOCABS[width])
    cfg = jaxdata_config(corpus)
    if args.lag is not None:
      raw = cfg.to_dict()
      raw["mixture"]["update_lag_steps"] = args.lag
      cfg = PipelineConfig.from_dict(raw)
    print(f"{width} ids, zstd records, {args.steps} steps of 32 x 2048, lag {cfg.mixture.update_lag_steps}")
    measure(cfg, args.steps, modes, args.repeats)
    if args.state_steps:
      state_growth(corpus, args.state_steps)


if __name__ == "__main__":
  main()
