"""`jaxdata ablate`: a fixed-budget mixture comparison, with the demo's model.

Every candidate mixture trains the same model from the same initialisation
for the same number of valid (loss-bearing) tokens, then is evaluated on
the same held-out documents::

    base config (+ holdout per dataset)       the candidates differ only in mixture weights
    for each candidate:  init (key 0) -> train until `tokens` valid tokens (the last batch's
                         loss mask cut at the budget: processed tokens are equal exactly)
                      -> Pipeline(split="eval"): mean loss per held-out token, per domain
    table: processed tokens, tokens by domain, per-domain loss, loss under the fixed target mixture

The target mixture is the base config's weights (its first phase).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import yaml

from jaxdata.config.pipeline_config import PipelineConfig
from jaxdata.config.validate import weight
from jaxdata.demo import model
from jaxdata.errors import ConfigError
from jaxdata.pipeline.pipeline import Pipeline
from jaxdata.sources.manifest import Manifest

__all__ = ["AblationRow", "ablation_config", "evaluate", "load_candidate", "run_ablation", "token_losses"]

HOLDOUT = 0.05  # of every dataset, unless the base config sets its own


@dataclasses.dataclass(frozen=True)
class AblationRow:
  name: str
  weights: dict[str, float]
  processed_tokens: int
  tokens_by_domain: dict[str, int]
  domain_loss: dict[str, float]
  target_loss: float
  # per domain, the standard error of its mean held-out loss over tokens (tokens of one document are
  # correlated, so the noise is at least this much): the error bars of the plot
  domain_stderr: dict[str, float] = dataclasses.field(default_factory=dict)


def ablation_config(base: PipelineConfig, weights: Mapping[str, float] | None = None) -> PipelineConfig:
  """`base` with a holdout on every dataset (5% unless set), fixed weights (`weights`, or the base's
  first phase), and every dataset repeating."""
  raw = base.to_dict()
  for entry in raw["datasets"]:
    if entry.get("holdout") is None:
      entry["holdout"] = HOLDOUT
  target = dict(weights) if weights is not None else dict(base.mixture.phases()[0].weights)
  unknown = set(target) - set(base.names)
  if unknown:
    raise ConfigError(f"ablate: candidate weights name {sorted(unknown)}, not datasets of the base config")
  raw["mixture"] = {
    "weights": {n: float(target.get(n, 0.0)) for n in base.names},
    "unit": base.mixture.unit,
    "interleave": base.mixture.interleave,
  }
  for key in ("max_repeats", "stop_after_passes", "stats_path"):
    raw.pop(key, None)
  raw["exhausted_policy"] = "repeat"
  return PipelineConfig.from_dict(raw)


def load_candidate(path: str) -> tuple[str, dict[str, float]]:
  """(name, weights) of a candidate YAML: `{name: ..., weights: {...}}`, or a config's `mixture.weights`."""
  with open(path, encoding="utf-8") as f:
    raw = yaml.safe_load(f)
  weights = raw.get("weights") if isinstance(raw, dict) else None
  if weights is None and isinstance(raw, dict) and isinstance(raw.get("mixture"), dict):
    weights = raw["mixture"].get("weights")
  if not isinstance(weights, dict) or not weights:
    raise ConfigError(f"{path}: a candidate needs weights: {{dataset: weight}} (or mixture.weights)")
  name = raw.get("name") or os.path.splitext(os.path.basename(path))[0]
  return str(name), {str(k): weight(v, f"{path}: weight of {k!r}") for k, v in weights.items()}


@jax.jit
def token_losses(params: Any, batch: dict[str, jax.Array]) -> jax.Array:
  """The model's loss at every position (rows x positions), masked nowhere."""
  log_probs = jax.nn.log_softmax(model.logits_fn(params, batch))
  return -jnp.take_along_axis(log_probs, batch["targets"][..., None], axis=-1)[..., 0]


def _cut_at(batch: dict[str, np.ndarray], remaining: int) -> tuple[dict[str, np.ndarray], int]:
  """The batch with its loss mask cut to the first `remaining` valid tokens (row-major); their count."""
  mask = np.asarray(batch["loss_mask"])
  valid = np.cumsum(mask.ravel()).reshape(mask.shape)
  kept = np.where(valid <= remaining, mask, 0).astype(np.int32)
  return {**batch, "loss_mask": kept}, int(kept.sum())


def evaluate(params: Any, cfg: PipelineConfig, eval_tokens: int | None = None) -> dict[str, float]:
  """Mean held-out loss per dataset (the config's split="eval"): over every held-out trained token,
  or the first `eval_tokens` of them (the same documents for every model evaluated on `cfg`'s split)."""
  return evaluate_with_errors(params, cfg, eval_tokens)[0]


def evaluate_with_errors(
  params: Any, cfg: PipelineConfig, eval_tokens: int | None = None
) -> tuple[dict[str, float], dict[str, float]]:
  """`evaluate`'s means and, per dataset, the standard error of each mean over its tokens."""
  if eval_tokens is not None and eval_tokens < 1:
    raise ValueError(f"eval_tokens: must be >= 1 (or None: every held-out token), got {eval_tokens}")
  sums, squares, counts = np.zeros(len(cfg.names)), np.zeros(len(cfg.names)), np.zeros(len(cfg.names))
  remaining = eval_tokens if eval_tokens is not None else -1
  with Pipeline(cfg, prefetch=0, split="eval") as evaluation:
    position = np.array([cfg.names.index(name) for name in evaluation.cfg.names])  # source id -> our index
    for batch in evaluation:
      if remaining >= 0:
        batch, valid = _cut_at(batch, remaining)
        remaining -= valid
      losses = np.asarray(token_losses(params, {k: jnp.asarray(v) for k, v in batch.items()}))
      trained = np.asarray(batch["loss_mask"]) == 1
      where = position[np.asarray(batch["source_ids"])[trained]]
      sums += np.bincount(where, weights=losses[trained], minlength=len(cfg.names))
      squares += np.bincount(where, weights=np.square(losses[trained]), minlength=len(cfg.names))
      counts += np.bincount(where, minlength=len(cfg.names))
      if remaining == 0:
        break
  means = {n: float(sums[i] / counts[i]) if counts[i] else float("nan") for i, n in enumerate(cfg.names)}
  errors = {}
  for i, n in enumerate(cfg.names):
    variance = squares[i] / counts[i] - (sums[i] / counts[i]) ** 2 if counts[i] > 1 else float("nan")
    errors[n] = float(np.sqrt(max(variance, 0.0) / (counts[i] - 1))) if counts[i] > 1 else float("nan")
  return means, errors


SHARE_TOLERANCE = 0.05  # a candidate whose trained shares drift further from its weights is named


def share_drift(weights: Mapping[str, float], trained: Mapping[str, int]) -> str:
  """ "" where every dataset's share of the trained tokens is within SHARE_TOLERANCE of its weight's,
  else the shares trained against the weights, in words.

  >>> share_drift({"a": 1, "b": 1}, {"a": 84_477, "b": 115_523})
  'a 42.2% (weight 50.0%), b 57.8% (weight 50.0%)'
  >>> share_drift({"a": 1, "b": 1}, {"a": 99, "b": 101})
  ''
  """
  total_weight, total = sum(weights.values()), sum(trained.values())
  if not total or not total_weight:
    return ""
  shares = {n: trained.get(n, 0) / total for n in weights}
  target = {n: w / total_weight for n, w in weights.items()}
  if max(abs(shares[n] - target[n]) for n in weights) <= SHARE_TOLERANCE:
    return ""
  return ", ".join(f"{n} {shares[n]:.1%} (weight {target[n]:.1%})" for n in weights)


def run_ablation(
  base: PipelineConfig,
  candidates: Sequence[tuple[str, Mapping[str, float]]],
  tokens: int,
  log: Any = print,
  eval_tokens: int | None = None,
) -> list[AblationRow]:
  """Trains and evaluates every candidate (see the module docstring); `eval_tokens` as in `evaluate`."""
  if tokens < 1:
    raise ValueError(f"tokens: must be >= 1, got {tokens}")
  target_cfg = ablation_config(base)
  target = _weights(target_cfg)
  total = sum(target.values())
  vocab = max(int(Manifest.load(d.path).tokenizer.get("vocab_size") or 1 << 16) for d in base.datasets)
  rows = []
  for index, (name, weights) in enumerate(candidates):
    log(f"{name}: training on {tokens:,} valid tokens (candidate {index + 1} of {len(candidates)}) ...")
    cfg = ablation_config(base, weights)
    params = model.init_params(jax.random.key(0), vocab, cfg.packing.seq_len)
    state = {
      "step": jnp.zeros((), jnp.int32),
      "mu": jax.tree.map(jnp.zeros_like, params),
      "nu": jax.tree.map(jnp.zeros_like, params),
    }
    processed, by_domain = 0, dict.fromkeys(cfg.names, 0)
    with Pipeline(cfg, prefetch=0) as pipe:
      while processed < tokens:
        batch, valid = _cut_at(next(pipe), tokens - processed)
        sources = np.asarray(batch["source_ids"])
        for d, n in enumerate(cfg.names):
          by_domain[n] += int(((sources == d) & (batch["loss_mask"] == 1)).sum())
        params, state, _ = model.train_step(params, state, {k: jnp.asarray(v) for k, v in batch.items()})
        processed += valid
    losses, errors = evaluate_with_errors(params, cfg, eval_tokens)
    target_loss = sum(target[n] / total * losses[n] for n in cfg.names)
    rows.append(AblationRow(name, _weights(cfg), processed, by_domain, losses, float(target_loss), errors))
    log(f"{name}: {processed:,} tokens trained, target-mixture loss {target_loss:.4f}")
    off = share_drift(_weights(cfg), by_domain)
    if off:
      log(
        f"warning: {name} trained {off}; its documents are large against {tokens:,} tokens (or the loss "
        "mask drops each document's last token): the comparison is not of these weights; raise `tokens`"
      )
  return rows


def _weights(cfg: PipelineConfig) -> dict[str, float]:
  """A candidate's constant mixture weights (every ablation config has them)."""
  if cfg.mixture.weights is None:
    raise ValueError("ablation: a candidate's mixture needs constant weights, not a schedule")
  return {name: float(w) for name, w in cfg.mixture.weights.items()}
