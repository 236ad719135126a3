"""`MixtureUpdates`: weights the training loop set while the stream runs, each from a fixed step on.

The order stays a pure function of (config, seed, the updates with their
steps): an update's weights replace the config's (weights or schedule)
from its step on, until the next update::

    step            0 ......... 40 ............ 90 ..........
    weights         schedule    update(40, w1)  update(90, w2)
    weights_at(s)   schedule(s) w1              w2

The exact interleave carries its deficits across the change (as for a
schedule's phases): the stream moves toward the new targets without a
jump. Only what the next steps need is kept (the update in force and
those still to come); the history goes to the per-step stats.

>>> updates = MixtureUpdates(("a", "b")).added(40, {"a": 1, "b": 3})
>>> [float(w) for w in updates.in_force(45)]
[0.25, 0.75]
>>> updates.in_force(39) is None
True
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any

from jaxdata.config.schedule import exact_weights
from jaxdata.config.validate import is_int

__all__ = ["MixtureUpdates", "UPDATE_RESOLUTION", "quantized"]

# Update weights are held to multiples of 1 / UPDATE_RESOLUTION: the exact interleave's common scale
# (the lcm of every weight's denominator) then stays bounded however many updates a run makes.
UPDATE_RESOLUTION = 10**9


def quantized(weights: Sequence[Fraction]) -> tuple[Fraction, ...]:
  """Weights summing to 1 as multiples of 1 / UPDATE_RESOLUTION still summing to exactly 1 (largest
  remainders round up); a positive weight stays positive (one unit, taken from the largest).

  >>> [str(w) for w in quantized([Fraction(1, 3), Fraction(2, 3)])]
  ['333333333/1000000000', '666666667/1000000000']
  """
  scaled = [w * UPDATE_RESOLUTION for w in weights]
  units = [int(v) for v in scaled]  # floors (weights are >= 0)
  order = sorted(range(len(scaled)), key=lambda i: (-(scaled[i] - units[i]), i))
  for i in order[: UPDATE_RESOLUTION - sum(units)]:
    units[i] += 1
  for i, w in enumerate(weights):
    if w > 0 and units[i] == 0:
      units[i] = 1
      units[max(range(len(units)), key=lambda j: units[j])] -= 1
  return tuple(Fraction(u, UPDATE_RESOLUTION) for u in units)


@dataclasses.dataclass(frozen=True)
class MixtureUpdates:
  """Updates in step order: (step, exact weights summing to 1) each."""

  names: tuple[str, ...]
  steps: tuple[int, ...] = ()
  weights: tuple[tuple[Fraction, ...], ...] = ()

  def added(self, step: int, weights: Mapping[str, Any]) -> MixtureUpdates:
    """With an update at `step` (replacing one already at that step); ValueError / ConfigError naming
    what is wrong (NaN, negative, all zero, an unknown or missing dataset), nothing changed."""
    if not is_int(step) or step < 0:
      raise ValueError(f"at_step: must be an int >= 0, got {step!r}")
    exact = quantized(exact_weights(weights, self.names, "update_mixture weights"))
    kept = [(s, w) for s, w in zip(self.steps, self.weights) if s != step] + [(step, exact)]
    kept.sort(key=lambda entry: entry[0])
    return MixtureUpdates(self.names, tuple(s for s, _ in kept), tuple(w for _, w in kept))

  def in_force(self, step: int) -> tuple[Fraction, ...] | None:
    """The weights of the last update at or before `step`, None if none is."""
    found = None
    for start, weights in zip(self.steps, self.weights):
      if start > step:
        break
      found = weights
    return found

  def starting_at(self, step: int) -> tuple[Fraction, ...] | None:
    """The weights of an update that takes effect exactly at `step`."""
    return self.weights[self.steps.index(step)] if step in self.steps else None

  @property
  def last_step(self) -> int:
    """The step of the last update (-1: none): the weights are constant from there on."""
    return self.steps[-1] if self.steps else -1

  def pruned(self, step: int) -> MixtureUpdates:
    """Without the updates that `step` and later steps can no longer see (all but the one in force)."""
    keep = [i for i, s in enumerate(self.steps) if s > step]
    in_force = [i for i, s in enumerate(self.steps) if s <= step][-1:]
    indices = in_force + keep
    return MixtureUpdates(self.names, tuple(self.steps[i] for i in indices), tuple(self.weights[i] for i in indices))

  def to_json(self) -> list[dict[str, Any]]:
    return [
      {"step": step, "weights": {n: [w.numerator, w.denominator] for n, w in zip(self.names, weights)}}
      for step, weights in zip(self.steps, self.weights)
    ]

  @classmethod
  def from_json(cls, raw: Any, names: Sequence[str]) -> MixtureUpdates:
    """Reads `to_json()`; ValueError naming what is malformed."""
    if not isinstance(raw, list):
      raise ValueError(f"stream state: updates must be a list, got {str(raw)[:200]}")
    steps, weights = [], []
    for entry in raw:
      try:
        step, values = entry["step"], [Fraction(*entry["weights"][n]) for n in names]
      except (KeyError, TypeError, ValueError, ZeroDivisionError) as e:
        raise ValueError(f"stream state: malformed mixture update {str(entry)[:200]} ({e})") from e
      if not is_int(step) or step < 0 or sum(values) != 1 or min(values) < 0:
        raise ValueError(f"stream state: mixture update {str(entry)[:200]} is not a step and weights summing to 1")
      steps.append(step)
      weights.append(tuple(values))
    if steps != sorted(set(steps)):
      raise ValueError(f"stream state: mixture updates must be in rising step order, got {steps}")
    return cls(tuple(names), tuple(steps), tuple(weights))
