"""Statistics and warnings about a mixture, from metadata: used by `jaxdata audit` and `jaxdata plan`.

Per-step residual ratio (`residual_ratio`). In step s the stream emits n_s
documents and u_sd units (documents or tokens, per the mixture unit) of
dataset d, with weights w_sd. The residual r_sd = u_sd - w_sd * U_s (U_s =
sum over d) measures how far the step's histogram is from its target::

    R_d = sum_s r_sd^2 / sum_s n_s Var_s(Y_d),
    Y_d = L (1[dataset = d] - w_d)   per document: length L (1 in the documents unit)

Under independent random picks (the random interleave: dataset j with
probability p_j, proportional to w_j / mean length_j in the tokens unit, w_j
in the documents unit) each Y has mean 0 and Var(Y_d) = sum_j p_j E[L_j^2]
(1[j = d] - w_d)^2, so by Wald's identity R_d has expectation 1 (and, with
many documents per step, standard deviation about sqrt(2 / S) over S steps).
The exact interleave keeps every r_sd within about one document, so its R_d
is far below 1 (about 1 / n_s).

Order warnings (`stored_order_warnings`): a dataset read in stored order for
long runs (no within-shard or block shuffle, and one shard holding a large
part of the dataset) repeats whatever order its writer used, every pass.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import numpy as np

from jaxdata.config.pipeline_config import PipelineConfig
from jaxdata.mixture.stream import DatasetMeta

__all__ = ["ResidualRatio", "residual_ratio", "stored_order_warnings", "weight_notices"]

STORED_ORDER_SHARE = 0.25  # warn when one shard in stored order holds this share of a dataset


@dataclasses.dataclass(frozen=True)
class ResidualRatio:
  ratio: dict[str, float]  # per dataset with 0 < weight < 1 in some step
  steps: int
  band: float  # about 3 standard deviations of R under independent random picks

  def explain(self) -> str:
    return (
      f"per-step residual ratio R (sum of squared histogram residuals / their expectation under "
      f"independent random picks): about 1 ± {self.band:.2f} for the random interleave over "
      f"{self.steps} steps; far below 1 for the exact interleave"
    )


def residual_ratio(
  units: np.ndarray,
  documents: np.ndarray,
  weights: np.ndarray,
  names: Sequence[str],
  lengths: Mapping[str, np.ndarray],
  tokens_unit: bool,
) -> ResidualRatio:
  """`units` [S, D]: units per dataset emitted in each step; `documents` [S];
  `weights` [S, D]: the weights of each step (summing to 1)."""
  steps = units.shape[0]
  if tokens_unit:
    mean = np.array([float(np.mean(lengths[n])) for n in names])
    second = np.array([float(np.mean(np.asarray(lengths[n], np.float64) ** 2)) for n in names])
    draw = weights / mean
    draw = draw / draw.sum(axis=1, keepdims=True)
  else:
    second, draw = np.ones(len(names)), weights
  residual = units - weights * units.sum(axis=1, keepdims=True)
  ratio = {}
  for d, name in enumerate(names):
    indicator = (np.arange(len(names)) == d).astype(np.float64)
    variance = (draw * second * (indicator[None, :] - weights[:, d : d + 1]) ** 2).sum(axis=1)
    expected = float((documents * variance).sum())
    if expected > 0:
      ratio[name] = float((residual[:, d] ** 2).sum() / expected)
  return ResidualRatio(ratio, steps, 3 * float(np.sqrt(2 / max(steps, 1))))


def stored_order_warnings(cfg: PipelineConfig, metadata: Mapping[str, DatasetMeta]) -> list[str]:
  """Datasets whose order keeps long runs of stored order, every pass."""
  warnings = []
  for settings in cfg.dataset_settings():
    if not settings.keeps_stored_order:  # shuffled blocks, a global shuffle, draws: no stored runs
      continue
    counts = np.asarray(metadata[settings.name].shard_counts)
    largest = int(counts.max())
    if counts.size == 1 or largest >= STORED_ORDER_SHARE * counts.sum():
      warnings.append(
        f"{settings.name}: read in stored order in runs of up to {largest:,} documents "
        f"({largest / counts.sum():.0%} of it, {counts.size} shard{'s' if counts.size > 1 else ''}), "
        f"the same every pass ({settings.order_name}: shuffle_block_size: null); the default "
        "(shuffle_block_size: global) mixes it, as would shuffle_within_shard: true"
      )
  return warnings


def weight_notices(cfg: PipelineConfig) -> list[str]:
  """A notice per mixture phase whose weights do not sum to 1, with the normalised values used.

  >>> cfg = PipelineConfig.from_dict({"datasets": [{"name": "a"}, {"name": "b"}], "mixture": {"weights": {"a": 0.6, "b": 0.5}}})
  >>> weight_notices(cfg)
  ['mixture weights sum to 1.1, not 1; used normalised: a 0.5455, b 0.4545']
  """
  notices = []
  for i, phase in enumerate(cfg.mixture.phases()):
    total = sum(float(w) for w in phase.weights.values())
    if abs(total - 1) > 1e-9 and total > 0:
      where = "mixture weights" if cfg.mixture.weights is not None else f"mixture.schedule[{i}] weights"
      shares = ", ".join(f"{n} {float(w) / total:.4f}" for n, w in phase.weights.items())
      notices.append(f"{where} sum to {total:g}, not 1; used normalised: {shares}")
  return notices
