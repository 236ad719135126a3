"""Online mixture updates: throughput with an update every step, every 10 and every 100 steps, against none.

    python -m benchmarks.mixture_updates [--corpus /tmp/jaxdata-bench] [--scale 0.1] [--steps 300] [--prefetch 2]

The benchmark corpus (`benchmarks/make_corpus.py`, 4 datasets) and the pipeline
benchmark's workload (first_fit, 2048 tokens x 64 rows, global shuffle), in
process with `--prefetch` steps made ahead. Each update draws new random
weights (the loop's controller is not timed). `--read-ahead-tokens` sets the
read span (smaller spans waste less on an update). Printed per cadence: tokens/s,
its ratio to no updates, and the mean time of one `update_mixture` call (what
the loop waits: the steps made ahead are dropped and planned again). The
batches of every cadence are checked against a run without prefetch making
the same updates.
"""

from __future__ import annotations

import argparse
import hashlib
import time

import numpy as np

from benchmarks.make_corpus import make_corpus
from benchmarks.pipeline_throughput import jaxdata_config
from jaxdata import Pipeline
from jaxdata.pipeline.read_spans import READ_AHEAD


def _run(cfg, steps: int, every: int | None, prefetch: int, read_ahead: int) -> tuple[float, float, int, str]:
  """(seconds, mean seconds per update, tokens, digest of every batch)."""
  rng = np.random.default_rng(0)
  digest, tokens, updating = hashlib.sha256(), 0, []
  with Pipeline(cfg, prefetch=prefetch, read_ahead_tokens=read_ahead) as pipe:
    next(pipe)  # opened and warm
    started = time.perf_counter()
    for step in range(1, steps + 1):
      if every is not None and step % every == 0:
        weights = dict(zip(cfg.names, (rng.random(len(cfg.names)) + 0.05).tolist()))
        begun = time.perf_counter()
        pipe.update_mixture(weights)
        updating.append(time.perf_counter() - begun)
      batch = next(pipe)
      tokens += int(np.asarray(batch["loss_mask"]).sum())
      digest.update(np.asarray(batch["tokens"]).tobytes())
    seconds = time.perf_counter() - started
  return seconds, float(np.mean(updating)) if updating else 0.0, tokens, digest.hexdigest()


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--corpus", default="/tmp/jaxdata-bench")
  parser.add_argument("--scale", type=float, default=0.1)
  parser.add_argument("--steps", type=int, default=300)
  parser.add_argument("--prefetch", type=int, default=2)
  parser.add_argument("--read-ahead-tokens", type=int, default=READ_AHEAD, help="tokens read per read span")
  args = parser.parse_args()
  make_corpus(args.corpus, args.scale)
  cfg = jaxdata_config(args.corpus)
  baseline = None
  for every in (None, 100, 10, 1):
    seconds, per_update, tokens, digest = _run(cfg, args.steps, every, args.prefetch, args.read_ahead_tokens)
    reference = _run(cfg, args.steps, every, 0, args.read_ahead_tokens)[3]
    assert digest == reference, f"every {every}: other batches than without prefetch"
    rate = tokens / seconds
    baseline = baseline or rate
    label = "no updates" if every is None else f"every {every:3d} steps"
    print(
      f"{label:16s} {rate / 1e6:6.2f}M tokens/s  {rate / baseline:5.2f}x  "
      f"update_mixture {per_update * 1e3:6.1f} ms  ({args.steps} steps, prefetch {args.prefetch}, "
      f"read spans of {args.read_ahead_tokens:,} tokens)"
    )


if __name__ == "__main__":
  main()
