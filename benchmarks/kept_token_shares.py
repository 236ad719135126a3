"""Realised token shares under every `long_docs` policy: the mixture counts the tokens that reach the batches.

    python -m benchmarks.kept_token_shares [--steps 200]

Workload: web and code at .75 / .25, web documents of 50-1,500 tokens, code
documents of 2,000-10,000 (mean ~6,000) against rows of 2,048 tokens, 32 rows
a step, EOS added; planned from lengths alone (no token is read), for the
fit, concat and unpacked (`none`) modes under `split`, `truncate` and `drop`.
Prints each configuration's share of the tokens in the batches, its gap to
the target and the bound the exact interleave allows over those steps (one
kept document plus the carry of packing, as `jaxdata audit` computes it).
"""

from __future__ import annotations

import argparse

import numpy as np

from jaxdata.config import PipelineConfig
from jaxdata.mixture.stream import DatasetMeta
from jaxdata.pipeline.planner import StepPlanner

WEIGHTS = {"web": 0.75, "code": 0.25}
SEQ_LEN, ROWS = 2048, 32


def realised(mode: str, long_docs: str, metas: dict[str, DatasetMeta], steps: int) -> tuple[np.ndarray, int]:
  """Tokens per dataset in `steps` planned steps, and the longest document's kept tokens."""
  cfg = PipelineConfig.from_dict(
    {
      "datasets": [{"name": n} for n in WEIGHTS],
      "mixture": {"weights": WEIGHTS},
      "exhausted_policy": "repeat",
      "packing": {"mode": mode, "seq_len": SEQ_LEN, "long_docs": long_docs, "add_eos": True, "eos_id": 2},
      "batch": {"global_batch_size": ROWS},
    }
  )
  tokens = np.zeros(len(WEIGHTS))
  for plan in StepPlanner(cfg, metas).plans(steps):
    tokens += np.bincount(plan.pieces.dataset, weights=plan.pieces.length, minlength=len(WEIGHTS))
  longest = max(int(m.lengths.max()) for m in metas.values())
  return tokens, int(cfg.packing.kept_tokens(np.array([longest]), SEQ_LEN)[0])


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--steps", type=int, default=200)
  args = parser.parse_args()
  rng = np.random.default_rng(0)
  metas = {
    "web": DatasetMeta.from_lengths(rng.integers(50, 1500, 20000)),
    "code": DatasetMeta.from_lengths(rng.integers(2000, 10000, 5000)),
  }
  print(f"{'mode':10s} {'long_docs':9s} {'web':>7s} {'code':>7s} {'gap':>7s} {'bound':>7s}")
  for mode in ("first_fit", "concat", "none"):
    for long_docs in ("split", "truncate", "drop"):
      tokens, longest = realised(mode, long_docs, metas, args.steps)
      share = tokens / tokens.sum()
      bound = (longest + SEQ_LEN * ROWS + longest) / tokens.sum()  # a document, and the carry
      gap = abs(share[1] - WEIGHTS["code"])
      print(f"{mode:10s} {long_docs:9s} {share[0]:7.4f} {share[1]:7.4f} {gap:7.4f} {bound:7.4f}")


if __name__ == "__main__":
  main()
