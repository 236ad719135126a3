"""Mixture weights: validation, safe normalisation, and step schedules.

A schedule is a pure function of the training step::

    phase 0: steps [0, 1000)        weights A
    phase 1: steps [1000, 5000)     ramps from A to B over its first ramp_steps steps, then B
    phase 2: steps [5000, inf)      weights C

>>> s = Schedule.from_phases(["web", "code"], [({"web": 3, "code": 1}, 10, 0), ({"web": 1, "code": 1}, None, 0)])
>>> s.weights_at(9), s.weights_at(10)
((0.75, 0.25), (0.5, 0.5))
"""

from __future__ import annotations

import bisect
import dataclasses
import math
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any

from jaxdata.config.validate import is_int, require_keys, short, weight
from jaxdata.errors import ConfigError

__all__ = ["Schedule", "exact_weights", "normalize_weights"]


def _checked_values(weights: Any, names: Sequence[str], where: str) -> list[float]:
  if not isinstance(weights, Mapping):
    raise ConfigError(f"{where}: expected a mapping of dataset name to weight, got {short(weights)}")
  require_keys(weights, names, where, "weight (name every dataset once)")
  values = []
  for name in names:
    values.append(weight(weights[name], f"{where}: weight of {short(name)}"))
  if max(values) <= 0:
    raise ConfigError(f"{where}: weights must have a positive sum, all are 0")
  return values


def normalize_weights(weights: Mapping[str, Any], names: Sequence[str], where: str = "weights") -> tuple[float, ...]:
  """Checks that `weights` names every dataset once with a finite value >= 0
  and a positive total, and returns them in `names` order, summing to 1.

  Values are divided by their maximum before summing, so huge weights
  (1e308 and 1e308) do not overflow.

  >>> normalize_weights({"a": 1e308, "b": 1e308}, ["a", "b"])
  (0.5, 0.5)
  """
  values = _checked_values(weights, names, where)
  top = max(values)
  scaled = [v / top for v in values]
  total = math.fsum(scaled)
  return tuple(v / total for v in scaled)


def exact_weights(weights: Mapping[str, Any], names: Sequence[str], where: str = "weights") -> tuple[Fraction, ...]:
  """The weights as exact fractions summing to 1, each value read as the
  decimal number it prints as (YAML's 0.1 is 1/10, not the nearest binary
  fraction), so a mixture follows exactly the ratios written in the config.

  >>> exact_weights({"a": 0.1, "b": 0.2}, ["a", "b"])
  (Fraction(1, 3), Fraction(2, 3))
  """
  values = [Fraction(repr(v)) for v in _checked_values(weights, names, where)]
  total = sum(values)
  return tuple(v / total for v in values)


@dataclasses.dataclass(frozen=True)
class _Phase:
  start: int
  until: int | None
  ramp_steps: int
  exact: tuple[Fraction, ...]


class Schedule:
  """Normalised weights per step; phases with optional linear ramps in."""

  def __init__(self, names: Sequence[str], phases: Sequence[_Phase]) -> None:
    self.names = tuple(names)
    self._phases = tuple(phases)
    self._untils = [p.until for p in self._phases[:-1] if p.until is not None]  # every phase's but the last

  @classmethod
  def from_phases(
    cls,
    names: Sequence[str],
    phases: Sequence[tuple[Mapping[str, Any], int | None, int]],
    where: str = "mixture",
  ) -> Schedule:
    """Builds from (weights, until_step, ramp_steps) per phase, validating each."""
    if not phases:
      raise ConfigError(f"{where}: a schedule needs at least one phase")
    built = []
    start = 0
    for i, (weights, until, ramp) in enumerate(phases):
      at = f"{where}.schedule[{i}]" if len(phases) > 1 else f"{where}.weights"
      last = i == len(phases) - 1
      if last and until is not None:
        raise ConfigError(f"{at}.until_step: the last phase runs to the end; remove until_step")
      if not last:
        if not is_int(until):
          raise ConfigError(f"{at}.until_step: every phase but the last needs an int, got {short(until)}")
        if until <= start:
          raise ConfigError(f"{at}.until_step: {until} must be greater than the phase start {start}")
      if not is_int(ramp) or ramp < 0:
        raise ConfigError(f"{at}.ramp_steps: must be an int >= 0, got {short(ramp)}")
      if ramp and i == 0:
        raise ConfigError(f"{at}.ramp_steps: the first phase has nothing to ramp from")
      if ramp and until is not None and ramp > until - start:
        raise ConfigError(f"{at}.ramp_steps: {ramp} is longer than the phase ({until - start} steps)")
      built.append(_Phase(start, until, ramp, exact_weights(weights, names, at)))
      start = until if until is not None else start
    return cls(names, built)

  @property
  def constant_from(self) -> int:
    """The first step from which weights never change again."""
    last = self._phases[-1]
    return last.start + last.ramp_steps

  def phase_bounds(self) -> list[tuple[int, int | None]]:
    return [(p.start, p.until) for p in self._phases]

  def phase_index(self, step: int) -> int:
    return bisect.bisect_right(self._untils, step)

  def weights_at(self, step: int) -> tuple[float, ...]:
    """Normalised weights (in dataset order) in force at `step`, as floats
    (each the correctly rounded value of `exact_weights_at`)."""
    return tuple(float(w) for w in self.exact_weights_at(step))

  def exact_weights_at(self, step: int) -> tuple[Fraction, ...]:
    """The weights at `step` as exact fractions summing to 1 (what the exact
    interleave follows). In a ramp, linear from the previous phase's weights,
    reaching the phase's exactly at start + ramp_steps."""
    if step < 0:
      raise ValueError(f"step: must be >= 0, got {step}")
    index = self.phase_index(step)
    phase = self._phases[index]
    into = step - phase.start
    if into >= phase.ramp_steps:
      return phase.exact
    alpha = Fraction(into + 1, phase.ramp_steps + 1)
    previous = self._phases[index - 1].exact
    return tuple((1 - alpha) * a + alpha * b for a, b in zip(previous, phase.exact))

  def ever_positive(self) -> tuple[bool, ...]:
    """Whether each dataset has a positive weight in some phase."""
    return tuple(any(p.exact[i] > 0 for p in self._phases) for i in range(len(self.names)))
