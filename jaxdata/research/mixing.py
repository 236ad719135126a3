"""Helpers from the data-mixing literature: DoReMi weights, importance weights, per-source loss.

DoReMi (Xie et al., 2023) domain-weight update, one round (`doremi_round`; `doremi_update` keeps
only the weights), and the final weights as the average over rounds (`doremi_average`, the
paper's step 3)::

    excess_d  = mean over d's tokens of max(proxy_loss - reference_loss, 0)   (clip, then average)
    w'_d      ∝ w_d * exp(eta * excess_d)                                     (exponentiated gradient, eta 0.1)
    w_d(new)  = (1 - c) * w'_d + c / K                                        (smoothing toward uniform)
    w_final   = mean over rounds t of w(t)

The recipe (reference -> proxy -> main model) with jaxdata's stats and
`per_source_loss` is in docs/research.md.

>>> w = doremi_update({"a": 0.5, "b": 0.5}, {"a": [3.0, 1.0], "b": [2.0, 2.0]},
...                   {"a": [2.0, 2.0], "b": [2.0, 2.0]}, eta=1.0, smoothing=0.0)
>>> round(w["a"], 4), round(w["b"], 4)
(0.6225, 0.3775)
"""

from __future__ import annotations

import dataclasses
import functools
import math
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxdata.config.validate import require_keys

__all__ = ["DoReMiRound", "doremi_average", "doremi_round", "doremi_update", "importance_weights", "per_source_loss"]

IW_ESS_WARNING = 0.5  # warn when importance weights leave less than this share of the effective sample size


@dataclasses.dataclass(frozen=True)
class DoReMiRound:
  """One round's new weights and the excess loss of each domain that moved them."""

  weights: dict[str, float]
  excess: dict[str, float]


def _losses(name: str, value: Any, domain: str) -> np.ndarray:
  array = np.asarray(value, dtype=np.float64)
  if array.size == 0:
    raise ValueError(f"{name}[{domain!r}]: no tokens")
  if not np.isfinite(array).all():
    raise ValueError(f"{name}[{domain!r}]: contains NaN or infinite losses")
  if (array < 0).any():
    raise ValueError(f"{name}[{domain!r}]: losses must be >= 0, got {array.min()}")
  return array


def doremi_update(
  weights: Mapping[str, float],
  proxy_loss: Mapping[str, Any],
  reference_loss: Mapping[str, Any],
  eta: float = 0.1,
  smoothing: float = 1e-3,
) -> dict[str, float]:
  """One DoReMi round's new weights (see `doremi_round`)."""
  return doremi_round(weights, proxy_loss, reference_loss, eta, smoothing).weights


def doremi_average(rounds: Sequence[Mapping[str, float]]) -> dict[str, float]:
  """The final DoReMi weights: the mean of every round's weights (renormalised).

  >>> doremi_average([{"a": 0.5, "b": 0.5}, {"a": 0.7, "b": 0.3}])
  {'a': 0.6, 'b': 0.4}

  Raises ValueError for no rounds, rounds with other domains, a weight that
  is not a finite number >= 0, and a round whose weights sum to 0.
  """
  if not rounds:
    raise ValueError("doremi_average: no rounds")
  domains = list(rounds[0])
  for i, r in enumerate(rounds):
    if set(r) != set(domains):
      raise ValueError(f"doremi_average: round {i} has domains {sorted(r)}, round 0 {sorted(domains)}")
    for d in domains:
      w = r[d]
      if isinstance(w, bool) or not isinstance(w, (int, float, np.number)) or not math.isfinite(w) or w < 0:
        raise ValueError(f"doremi_average: round {i} weight {d!r} must be a finite number >= 0, got {w!r}")
    if not any(float(r[d]) > 0 for d in domains):
      raise ValueError(f"doremi_average: round {i} has no positive weight")
  # Each round as a distribution (scaled by its max first, so huge weights cannot overflow), then their mean.
  shares = np.array([[float(r[d]) for d in domains] for r in rounds])
  shares /= shares.max(axis=1, keepdims=True)
  shares /= shares.sum(axis=1, keepdims=True)
  mean = shares.mean(axis=0)
  return dict(zip(domains, np.round(mean / mean.sum(), 12).tolist()))


def doremi_round(
  weights: Mapping[str, float],
  proxy_loss: Mapping[str, Any],
  reference_loss: Mapping[str, Any],
  eta: float = 0.1,
  smoothing: float = 1e-3,
) -> DoReMiRound:
  """One DoReMi round on per-token losses of each domain (NumPy or jnp arrays): new weights and
  the excess losses. `eta` 0.1 as the paper uses.

  Raises ValueError for NaN / negative losses, proxy and reference shapes
  that differ, missing or extra domains, prior weights <= 0 or non-finite,
  and an update that overflows.
  """
  domains = list(weights)
  if not domains:
    raise ValueError("weights: need at least one domain")
  for name, losses in (("proxy_loss", proxy_loss), ("reference_loss", reference_loss)):
    require_keys(losses, domains, name, "losses")
  for d in domains:
    w = weights[d]
    if not isinstance(w, (int, float, np.floating, np.integer)) or not math.isfinite(w) or w <= 0:
      raise ValueError(f"weights[{d!r}]: prior weights must be finite and > 0, got {w!r}")
  if not math.isfinite(eta) or eta <= 0:
    raise ValueError(f"eta: must be a positive finite number, got {eta!r}")
  if not 0 <= smoothing <= 1:
    raise ValueError(f"smoothing: must lie in [0, 1], got {smoothing!r}")
  excess = []
  for d in domains:
    proxy = _losses("proxy_loss", proxy_loss[d], d)
    reference = _losses("reference_loss", reference_loss[d], d)
    if proxy.shape != reference.shape:
      raise ValueError(f"domain {d!r}: proxy_loss shape {proxy.shape} != reference_loss shape {reference.shape}")
    excess.append(float(np.maximum(proxy - reference, 0.0).mean()))  # clip per token, then average
  with np.errstate(over="ignore"):  # overflow is detected and reported just below
    logits = np.log([float(weights[d]) for d in domains]) + eta * np.asarray(excess)
  if not np.isfinite(logits).all():
    raise ValueError(f"doremi_update: eta * excess loss overflowed ({dict(zip(domains, excess))})")
  logits -= logits.max()  # exponentiate safely
  updated = np.exp(logits)
  updated /= updated.sum()
  smoothed = (1 - smoothing) * updated + smoothing / len(domains)
  return DoReMiRound(dict(zip(domains, smoothed.tolist())), dict(zip(domains, excess)))


def importance_weights(target: Mapping[str, float], sampling: Mapping[str, float]) -> dict[str, float]:
  """pi_d / q_d: reweights a loss on data drawn from q toward the target mix pi.

  A small q_d gives a large weight and a noisy estimate: the effective sample size is the share
  1 / (1 + chi2(pi || q)) of the tokens, chi2 = sum_d pi_d^2 / q_d - 1; below IW_ESS_WARNING a
  RuntimeWarning names the domain with the largest weight.

  >>> importance_weights({"a": 0.5, "b": 0.5}, {"a": 0.25, "b": 0.75})
  {'a': 2.0, 'b': 0.6666666666666666}
  """
  if set(target) != set(sampling):
    raise ValueError(f"importance_weights: domains differ: {sorted(target)} vs {sorted(sampling)}")
  out = {}
  for d in target:
    pi, q = float(target[d]), float(sampling[d])
    if not (math.isfinite(pi) and math.isfinite(q)) or pi < 0 or q < 0:
      raise ValueError(f"importance_weights: {d!r} has target {pi} and sampling {q}; both must be finite and >= 0")
    if q == 0 and pi > 0:
      raise ValueError(f"importance_weights: {d!r} is never sampled (q = 0) but has target share {pi}")
    out[d] = pi / q if q > 0 else 0.0
  chi2 = sum(float(target[d]) ** 2 / float(sampling[d]) for d in target if float(sampling[d]) > 0) - 1
  ess = 1 / (1 + max(chi2, 0.0))
  if ess < IW_ESS_WARNING:
    worst = max(out, key=lambda name: out[name])
    warnings.warn(
      f"importance_weights: weight {out[worst]:.1f} for {worst!r} (q = {float(sampling[worst]):.3g}): "
      f"the weighted loss has the variance of {ess:.0%} of the tokens; sample {worst!r} more",
      RuntimeWarning,
      stacklevel=2,
    )
  return out


@functools.partial(jax.jit, static_argnames="num_sources")
def per_source_loss(
  token_loss: jax.Array, source_ids: jax.Array, loss_mask: jax.Array, num_sources: int
) -> tuple[jax.Array, jax.Array]:
  """(mean loss over valid tokens, valid token count) per source, from a batch.

  Padding has source_id -1 and loss_mask 0; a source with no valid token gets
  mean 0 and count 0. jit-able (num_sources is static).
  """
  mask = loss_mask.astype(token_loss.dtype) * (source_ids >= 0)
  index = jnp.clip(source_ids, 0, num_sources - 1).ravel()
  kept = jnp.where(mask > 0, token_loss, 0.0)  # a NaN / inf at a masked position must not reach a source
  total = jax.ops.segment_sum(kept.ravel(), index, num_segments=num_sources)
  count = jax.ops.segment_sum(mask.ravel(), index, num_segments=num_sources)
  return jnp.where(count > 0, total / jnp.maximum(count, 1), 0.0), count
