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

import bisect
import dataclasses
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any, TypedDict

from jaxdata.config.schedule import exact_weights
from jaxdata.config.validate import is_int

__all__ = ["MixtureUpdates", "UpdateEntry"]


class UpdateEntry(TypedDict):
  """One update as the state's JSON holds it: its step, and each dataset's weight as [numerator, denominator]."""

  step: int
  weights: dict[str, list[int]]


# Update weights are held to multiples of 1 / UPDATE_RESOLUTION: the exact interleave's common scale
# (the lcm of every weight's denominator) then stays bounded however many updates a run makes.
UPDATE_RESOLUTION = 10**9
MAX_STEP = 1 << 62  # as every counter of a state: a step beyond it cannot be saved and restored


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
  """Updates in step order: (step, exact weights summing to 1) each.

  Every operation a call or a step makes is a binary search plus, for a new
  object, a copy of its tuples: no per-update Python work, so a call's cost
  does not grow with the updates made before it (each entry's JSON is made
  once, when the entry is added or read).
  """

  names: tuple[str, ...]
  steps: tuple[int, ...] = ()
  weights: tuple[tuple[Fraction, ...], ...] = ()
  encoded: tuple[UpdateEntry, ...] = dataclasses.field(default=(), compare=False, repr=False)

  def __post_init__(self) -> None:
    if len(self.encoded) != len(self.steps):
      object.__setattr__(self, "encoded", tuple(_entry(self.names, s, w) for s, w in zip(self.steps, self.weights)))

  def added(self, step: int, weights: Mapping[str, Any]) -> MixtureUpdates:
    """With an update at `step` (replacing one already at that step); ValueError / ConfigError naming
    what is wrong (NaN, negative, all zero, an unknown or missing dataset), nothing changed."""
    if not is_int(step) or not 0 <= step < MAX_STEP:
      raise ValueError(f"at_step: must be an int in [0, 2**62), got {step!r}")
    return self.added_exact(step, quantized(exact_weights(weights, self.names, "update_mixture weights")))

  def added_exact(self, step: int, exact: tuple[Fraction, ...]) -> MixtureUpdates:
    """With an update at `step` of weights already exact (a `to_json_at` entry read back)."""
    at = bisect.bisect_left(self.steps, step)
    after = at + 1 if at < len(self.steps) and self.steps[at] == step else at
    return MixtureUpdates(
      self.names,
      self.steps[:at] + (step,) + self.steps[after:],
      self.weights[:at] + (exact,) + self.weights[after:],
      self.encoded[:at] + (_entry(self.names, step, exact),) + self.encoded[after:],
    )

  def added_entry(self, entry: Mapping[str, Any]) -> MixtureUpdates:
    """With the update `entry` (one `to_json_at` entry, as a message carries it)."""
    parsed = MixtureUpdates.from_json([entry], self.names)
    return self.added_exact(parsed.steps[0], parsed.weights[0])

  def in_force(self, step: int) -> tuple[Fraction, ...] | None:
    """The weights of the last update at or before `step`, None if none is."""
    at = bisect.bisect_right(self.steps, step) - 1
    return self.weights[at] if at >= 0 else None

  def starting_at(self, step: int) -> tuple[Fraction, ...] | None:
    """The weights of an update that takes effect exactly at `step`."""
    at = bisect.bisect_left(self.steps, step)
    return self.weights[at] if at < len(self.steps) and self.steps[at] == step else None

  @property
  def last_step(self) -> int:
    """The step of the last update (-1: none): the weights are constant from there on."""
    return self.steps[-1] if self.steps else -1

  def pruned(self, step: int) -> MixtureUpdates:
    """Without the updates that `step` and later steps can no longer see (all but the one in force)."""
    first = bisect.bisect_right(self.steps, step) - 1  # the one in force at `step`
    if first <= 0:
      return self
    return MixtureUpdates(self.names, self.steps[first:], self.weights[first:], self.encoded[first:])

  def to_json_at(self, step: int) -> UpdateEntry | None:
    """The JSON of the update at `step`, None if there is none."""
    at = bisect.bisect_left(self.steps, step)
    return UpdateEntry(**self.encoded[at]) if at < len(self.steps) and self.steps[at] == step else None

  def to_json(self) -> list[UpdateEntry]:
    return [UpdateEntry(step=entry["step"], weights=dict(entry["weights"])) for entry in self.encoded]

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
      if not is_int(step) or not 0 <= step < MAX_STEP or sum(values) != 1 or min(values) < 0:
        raise ValueError(f"stream state: mixture update {str(entry)[:200]} is not a step and weights summing to 1")
      steps.append(step)
      weights.append(tuple(values))
    if steps != sorted(set(steps)):
      raise ValueError(f"stream state: mixture updates must be in rising step order, got {steps}")
    return cls(tuple(names), tuple(steps), tuple(weights))


def _entry(names: Sequence[str], step: int, weights: Sequence[Fraction]) -> UpdateEntry:
  return UpdateEntry(step=step, weights={n: [w.numerator, w.denominator] for n, w in zip(names, weights)})
