"""Controllers that steer the mixture while training: small objects the loop feeds, whose weights go to
`Pipeline.update_mixture`.

::

    for step, batch in enumerate(pipe):
      loss, per_token = train_step(batch)
      means, counts = per_source_loss(per_token, batch["source_ids"], batch["loss_mask"], K)   # on device
      pipe.update_mixture(controller.observe(step, dict(zip(pipe.cfg.names, means.tolist()))))

`DoReMiController` (Xie et al., 2023), the proxy's online step: with per-domain excess losses
(clip per token, then average: `per_source_excess_loss`),

    w'_d = w_d exp(eta * excess_d) / Z        w_d <- (1 - c) w'_d + c / K        (eta 0.1, c 1e-3)

and `averaged()` the mean of the weights of every step (the paper's output).

`EXP3Controller`, ODM's bandit (Albalak et al., 2023), with K domains, step t = 1, 2, ...:

    eps_t    = min(1 / K, sqrt(ln K / (K t)))
    pi_t(d)  = (1 - K eps_t) exp(eps_{t-1} R_d) / sum_j exp(eps_{t-1} R_j) + eps_t
    R_d     <- alpha R_d + (1 - alpha) L_d / pi_t(d)      for the domains the batch held (loss L_d)

`ReplayController` hands back a recorded trajectory: a main run follows a proxy's weights.

>>> replay = ReplayController([(0, {"a": 1, "b": 1}), (10, {"a": 3, "b": 1})])
>>> replay.observe(12, {})
{'a': 3, 'b': 1}
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxdata.config.validate import require_keys
from jaxdata.research.mixing import doremi_average

__all__ = ["DoReMiController", "EXP3Controller", "ReplayController", "per_source_excess_loss"]


@functools.partial(jax.jit, static_argnames="num_sources")
def per_source_excess_loss(
  token_loss: jax.Array, reference_loss: jax.Array, source_ids: jax.Array, loss_mask: jax.Array, num_sources: int
) -> tuple[jax.Array, jax.Array]:
  """(mean over valid tokens of max(loss - reference, 0), valid token count) per source: DoReMi's
  clip-then-average, on device; over global (mesh-sharded) arrays it sums across the mesh."""
  mask = loss_mask.astype(token_loss.dtype) * (source_ids >= 0)
  excess = jnp.where(mask > 0, jnp.maximum(token_loss - reference_loss, 0.0), 0.0)  # masked NaN / inf: left out
  index = jnp.clip(source_ids, 0, num_sources - 1).ravel()
  total = jax.ops.segment_sum(excess.ravel(), index, num_segments=num_sources)
  count = jax.ops.segment_sum(mask.ravel(), index, num_segments=num_sources)
  return jnp.where(count > 0, total / jnp.maximum(count, 1), 0.0), count


def _values(name: str, values: Mapping[str, Any], domains: Sequence[str]) -> np.ndarray:
  require_keys(values, domains, name, "value")
  array = np.array([float(values[d]) for d in domains], np.float64)
  if not np.isfinite(array).all() or (array < 0).any():
    raise ValueError(f"{name}: every value must be a finite number >= 0, got {dict(zip(domains, array.tolist()))}")
  return array


class DoReMiController:
  """DoReMi's online proxy step on per-domain excess losses; `averaged()` are the final weights."""

  def __init__(
    self,
    domains: Sequence[str],
    eta: float = 0.1,
    smoothing: float = 1e-3,
    initial: Mapping[str, float] | None = None,
  ) -> None:
    self.domains = tuple(domains)
    if not math.isfinite(eta) or eta <= 0 or not 0 <= smoothing <= 1:
      raise ValueError(f"eta must be > 0 and smoothing in [0, 1], got {eta!r}, {smoothing!r}")
    self.eta, self.smoothing = eta, smoothing
    if len(set(self.domains)) != len(self.domains):
      raise ValueError(f"domains: each once, got {list(self.domains)}")
    start = _values("initial", initial, self.domains) if initial is not None else np.ones(len(self.domains))
    if (start <= 0).any():
      raise ValueError("initial: DoReMi's weights stay positive; give every domain a weight > 0")
    self.weights = start / start.sum()
    self.history: list[dict[str, float]] = []

  def observe(self, step: int, excess_loss: Mapping[str, float]) -> dict[str, float]:
    """The weights after this step's excess losses (also kept for `averaged`)."""
    excess = _values("excess_loss", excess_loss, self.domains)
    logits = np.log(self.weights) + self.eta * excess
    logits -= logits.max()
    updated = np.exp(logits)
    updated /= updated.sum()
    self.weights = (1 - self.smoothing) * updated + self.smoothing / len(self.domains)
    current = dict(zip(self.domains, self.weights.tolist()))
    self.history.append(current)
    return current

  def averaged(self) -> dict[str, float]:
    """The mean of every step's weights: what DoReMi hands the main run."""
    return doremi_average(self.history)


class EXP3Controller:
  """ODM's EXP3 over per-domain losses (rewards); `observe` returns pi for the next step."""

  def __init__(self, domains: Sequence[str], alpha: float = 0.9) -> None:
    self.domains = tuple(domains)
    if len(set(self.domains)) != len(self.domains):
      raise ValueError(f"domains: each once, got {list(self.domains)}")
    if len(self.domains) < 2 or not 0 <= alpha < 1:
      raise ValueError(f"EXP3 needs >= 2 domains and alpha in [0, 1), got {len(self.domains)}, {alpha!r}")
    self.alpha = alpha
    self.rewards = np.zeros(len(self.domains))
    self.t = 1
    self.previous_eps = self._eps(1)
    self.pi = self._policy(self._eps(1), self.previous_eps)

  def _eps(self, t: int) -> float:
    k = len(self.domains)
    return min(1 / k, math.sqrt(math.log(k) / (k * t)))

  def _policy(self, eps: float, previous_eps: float) -> np.ndarray:
    k = len(self.domains)
    logits = previous_eps * self.rewards
    logits -= logits.max()
    soft = np.exp(logits) / np.exp(logits).sum()
    return (1 - k * eps) * soft + eps

  def observe(self, step: int, per_source_loss: Mapping[str, float]) -> dict[str, float]:
    """Updates the rewards of the domains with a loss this step (absent or NaN: not in the batch)."""
    losses = {}
    for d in self.domains:  # every loss checked before any reward changes
      value = per_source_loss.get(d)
      if value is None or (isinstance(value, float) and math.isnan(value)):
        continue  # not in the batch
      if isinstance(value, bool) or not isinstance(value, (int, float, np.number)) or not 0 <= value < math.inf:
        raise ValueError(f"per_source_loss: {d!r} is {value!r}; a loss is a finite number >= 0 (NaN: absent)")
      losses[self.domains.index(d)] = float(value)
    for i, loss in losses.items():
      self.rewards[i] = self.alpha * self.rewards[i] + (1 - self.alpha) * loss / self.pi[i]
    eps = self._eps(self.t + 1)
    self.pi = self._policy(eps, self._eps(self.t))
    self.t += 1
    return dict(zip(self.domains, self.pi.tolist()))


class ReplayController:
  """A recorded weight trajectory, [(step, weights), ...] in step order: the weights in force at a step."""

  def __init__(self, trajectory: Sequence[tuple[int, Mapping[str, float]]]) -> None:
    steps = [s for s, _ in trajectory]
    if not trajectory or steps != sorted(set(steps)) or steps[0] != 0:
      raise ValueError(f"trajectory: steps must rise from 0, got {steps[:10]}")
    domains = sorted(trajectory[0][1])
    for step, weights in trajectory:
      if sorted(weights) != domains:
        raise ValueError(f"trajectory: step {step} names {sorted(weights)}, step 0 {domains}")
      _values(f"trajectory step {step}", weights, domains)
    self.trajectory = [(s, dict(w)) for s, w in trajectory]

  def observe(self, step: int, per_source_loss: Mapping[str, float]) -> dict[str, float]:
    current = self.trajectory[0][1]
    for start, weights in self.trajectory:
      if start > step:
        break
      current = weights
    return dict(current)  # a copy: the caller's changes stay out of the record
