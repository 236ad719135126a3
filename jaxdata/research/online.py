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
  if not isinstance(values, Mapping):
    raise ValueError(f"{name}: a mapping of domain -> value, got {values!r:.200}")
  require_keys(values, domains, name, "value")
  bad = [
    d for d in domains if isinstance(values[d], (bool, np.bool_)) or not isinstance(values[d], (int, float, np.number))
  ]
  if bad:
    raise ValueError(f"{name}: {bad[0]!r} is {values[bad[0]]!r:.100}; every value must be a finite number >= 0")
  array = np.array([float(values[d]) for d in domains], np.float64)
  if not np.isfinite(array).all() or (array < 0).any():
    raise ValueError(f"{name}: every value must be a finite number >= 0, got {dict(zip(domains, array.tolist()))}")
  return array


def _domains(domains: Sequence[str], least: int, who: str) -> tuple[str, ...]:
  if isinstance(domains, (str, bytes)) or not isinstance(domains, Sequence):
    raise ValueError(f"domains: a list of domain names, got {domains!r:.200}")
  out = tuple(domains)
  if len(out) < least:
    raise ValueError(f"domains: {who} needs at least {least} domain{'s' * (least > 1)}, got {list(out)}")
  if len(set(out)) != len(out) or not all(isinstance(d, str) and d for d in out):
    raise ValueError(f"domains: each a non-empty name, each once, got {list(out)}")
  return out


def _losses(name: str, values: Any, domains: Sequence[str], absent_ok: bool) -> dict[int, float]:
  """Every controller's check of what the loop feeds it, before anything changes: a mapping of known
  domains to finite numbers >= 0; with `absent_ok`, a missing, None or NaN value is a domain the batch
  did not hold (left out of the result); without, it is an error naming the domain."""
  if not isinstance(values, Mapping):
    raise ValueError(f"{name}: a mapping of domain -> value, got {values!r:.200}")
  unknown = sorted(str(k) for k in values if k not in domains)
  if unknown:
    raise ValueError(f"{name}: unknown domain(s) {unknown}; the controller's domains are {list(domains)}")
  out = {}
  for i, d in enumerate(domains):
    value = values.get(d)
    if value is None or (isinstance(value, (float, np.floating)) and math.isnan(value)):
      if absent_ok:
        continue
      raise ValueError(f"{name}: {d!r} is {value!r}; give every domain a finite number >= 0")
    if (
      isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.number)) or not 0 <= value < math.inf
    ):
      raise ValueError(f"{name}: {d!r} is {value!r:.100}; a value is a finite number >= 0")
    out[i] = float(value)
  return out


def _finite_weights(weights: np.ndarray, domains: Sequence[str], who: str) -> dict[str, float]:
  if not (np.isfinite(weights).all() and (weights >= 0).all() and weights.sum() > 0):
    raise ValueError(f"{who}: the update gave weights {weights.tolist()}; nothing was changed")  # a guard: never sent
  return dict(zip(domains, weights.tolist()))


class DoReMiController:
  """DoReMi's online proxy step on per-domain excess losses; `averaged()` are the final weights."""

  def __init__(
    self,
    domains: Sequence[str],
    eta: float = 0.1,
    smoothing: float = 1e-3,
    initial: Mapping[str, float] | None = None,
  ) -> None:
    self.domains = _domains(domains, 1, "DoReMi")
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (eta, smoothing))
    if not numbers or not math.isfinite(eta) or eta <= 0 or not 0 <= smoothing <= 1:
      raise ValueError(f"eta must be > 0 and smoothing in [0, 1], got {eta!r}, {smoothing!r}")
    self.eta, self.smoothing = float(eta), float(smoothing)
    start = _values("initial", initial, self.domains) if initial is not None else np.ones(len(self.domains))
    if (start <= 0).any():
      raise ValueError("initial: DoReMi's weights stay positive; give every domain a weight > 0")
    self.weights = start / start.sum()
    self.history: list[dict[str, float]] = []

  def observe(self, step: int, excess_loss: Mapping[str, float]) -> dict[str, float]:
    """The weights after this step's excess losses (also kept for `averaged`)."""
    given = _losses("excess_loss", excess_loss, self.domains, absent_ok=False)
    excess = np.array([given[i] for i in range(len(self.domains))], np.float64)
    with np.errstate(over="ignore"):
      step_size = np.minimum(self.eta * excess, np.finfo(np.float64).max)  # 1e308 x eta: the largest, not inf
    logits = np.log(self.weights) + step_size
    logits -= logits.max()
    updated = np.exp(logits)
    updated /= updated.sum()
    weights = (1 - self.smoothing) * updated + self.smoothing / len(self.domains)
    current = _finite_weights(weights, self.domains, "DoReMiController")
    self.weights = weights
    self.history.append(current)
    return current

  def averaged(self) -> dict[str, float]:
    """The mean of every step's weights: what DoReMi hands the main run."""
    return doremi_average(self.history)


class EXP3Controller:
  """ODM's EXP3 over per-domain losses (rewards); `observe` returns pi for the next step."""

  def __init__(self, domains: Sequence[str], alpha: float = 0.9) -> None:
    self.domains = _domains(domains, 2, "EXP3")
    if not isinstance(alpha, (int, float)) or not 0 <= alpha < 1:
      raise ValueError(f"alpha: EXP3 needs alpha in [0, 1), got {alpha!r}")
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
    losses = _losses("per_source_loss", per_source_loss, self.domains, absent_ok=True)  # before anything changes
    rewards = self.rewards.copy()
    for i, loss in losses.items():
      rewards[i] = self.alpha * rewards[i] + (1 - self.alpha) * loss / self.pi[i]
    if not np.isfinite(rewards).all():
      raise ValueError(f"per_source_loss: {dict(per_source_loss)!r:.200} makes a reward overflow; nothing was changed")
    previous, self.rewards = self.rewards, rewards
    pi = self._policy(self._eps(self.t + 1), self._eps(self.t))
    try:
      current = _finite_weights(pi, self.domains, "EXP3Controller")
    except ValueError:
      self.rewards = previous
      raise
    self.pi, self.t = pi, self.t + 1
    return current


class ReplayController:
  """A recorded weight trajectory, [(step, weights), ...] in step order: the weights in force at a step."""

  def __init__(self, trajectory: Sequence[tuple[int, Mapping[str, float]]]) -> None:
    if not isinstance(trajectory, Sequence) or not all(
      isinstance(e, (list, tuple)) and len(e) == 2 and isinstance(e[1], Mapping) for e in trajectory
    ):
      raise ValueError(f"trajectory: a list of (step, weights) pairs, got {trajectory!r:.200}")
    steps = [s for s, _ in trajectory]
    if not all(isinstance(s, int) and not isinstance(s, bool) for s in steps):
      raise ValueError(f"trajectory: steps must be ints, got {steps[:10]}")
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
