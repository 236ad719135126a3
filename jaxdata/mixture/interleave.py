"""Which dataset supplies each next document: exact (earliest deadline) or random.

Exact interleave, a largest-deficit rule with a proven bound. For dataset i
with normalised weight w_i, target_i grows by w_i per emitted unit (token or
document) and deficit_i = target_i - taken_i. Dataset i's next document, of
n units, is *due* when its deficit reaches (1 - mu) n and *released* once
taking it would overshoot the target by less than (1 - mu) n; each position
takes the released document due first (ties: lower dataset index), or the
one due first if none is released::

    units emitted t --->
    web   |--released--|====due====>         picked first: due earliest and released
    code      |--released------|====due==>
    books            (long doc: not released yet, even though due soon)

With mu = 1 / (2K - 2) for K datasets this is Tijdeman's chairman-assignment
algorithm: in the documents unit every prefix stays within 1 - 1/(2K - 2)
documents of every target; in the tokens unit, within one document's tokens
(checked by the tests on random mixtures).

Arithmetic is exact: weights are ints summing to WEIGHT_SCALE; deficits,
taken and t are ints; a key is one int / int division, a correctly rounded
pure function of the stream state, so the picks never depend on how the
stream was cut into calls.

Random interleave: the dataset of document n is a counter-based draw for n.

The mode string is read once, by `make_interleave`; the stream then talks to
an `Interleave` object (`begin` a step, `pick` documents, state). The loops
themselves are in `jaxdata.mixture.pick_loops` (the exact one in C where built).
"""

from __future__ import annotations

import abc
import dataclasses
import math
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import numpy as np

from jaxdata.config.validate import is_int
from jaxdata.mixture.pick_loops import PickLoop, PickResult, pick_exact, pick_random
from jaxdata.order.feistel import derive_key

__all__ = [
  "ExactInterleave",
  "Interleave",
  "RandomInterleave",
  "Segment",
  "StreamPosition",
  "make_interleave",
  "scale_weights",
]


def scale_weights(weights: Sequence[Fraction]) -> tuple[list[int], int]:
  """Exact rational weights summing to 1 -> (integers, scale) with
  weights[i] == integers[i] / scale exactly. The scale is also a multiple of
  2K - 2 (K positive weights), so the release margin 1 / (2K - 2) is exact.

  >>> scale_weights([Fraction(3, 4), Fraction(1, 4)])
  ([6, 2], 8)
  """
  if sum(weights) != 1:
    raise ValueError(f"weights must sum to exactly 1, got {weights}")
  positive = sum(1 for w in weights if w > 0)
  scale = math.lcm(*(w.denominator for w in weights)) * (2 * positive - 2 if positive > 1 else 1)
  return [int(w * scale) for w in weights], scale


@dataclasses.dataclass(frozen=True)
class Segment:
  """A run of steps with the same weights, for the exact interleave.

  All quantities are integers in units of 1/`scale`: weights_i / scale is
  dataset i's exact weight, and with t units emitted and a_i units taken
  from i since `start`, deficit_i = deficits_i + weights_i t - scale a_i.
  """

  step: int
  start: int
  scale: int
  weights: list[int]
  deficits: list[int]
  taken: list[int]

  def deficits_at(self, units: int, taken: Sequence[int]) -> list[int]:
    elapsed = units - self.start
    return [
      d + w * elapsed - self.scale * (c - c0) for d, w, c, c0 in zip(self.deficits, self.weights, taken, self.taken)
    ]

  def then(self, step: int, units: int, taken: Sequence[int], weights: Sequence[Fraction]) -> Segment:
    """The segment that starts now with `weights`, carrying the deficits exactly."""
    integers, scale = scale_weights(weights)
    common = math.lcm(scale, self.scale)
    deficits = [d * (common // self.scale) for d in self.deficits_at(units, taken)]
    return Segment(step, units, common, [w * (common // scale) for w in integers], deficits, list(taken))

  def to_json(self) -> dict[str, Any]:
    return {
      "step": self.step,
      "start": self.start,
      "scale": self.scale,
      "weights": list(self.weights),
      "deficits": list(self.deficits),
      "taken": list(self.taken),
    }

  @classmethod
  def from_json(cls, raw: Any, size: int) -> Segment:
    try:
      segment = cls(
        step=raw["step"],
        start=raw["start"],
        scale=raw["scale"],
        weights=list(raw["weights"]),
        deficits=list(raw["deficits"]),
        taken=list(raw["taken"]),
      )
    except (KeyError, TypeError) as e:
      raise ValueError(f"stream state: malformed segment {raw!r:.200} ({e})") from e
    values = [segment.step, segment.start, segment.scale, *segment.weights, *segment.deficits, *segment.taken]
    lists_ok = len(segment.weights) == len(segment.deficits) == len(segment.taken) == size
    if not lists_ok or any(not is_int(v) for v in values):
      raise ValueError(f"stream state: segment must hold ints for {size} datasets, got {raw!r:.200}")
    if segment.scale < 1 or sum(segment.weights) != segment.scale or min(segment.weights) < 0:
      raise ValueError(f"stream state: segment weights must be >= 0 and sum to its scale, got {raw!r:.200}")
    return segment


@dataclasses.dataclass(frozen=True)
class StreamPosition:
  """Where the stream stands: units emitted (tokens or documents, per the
  mixture unit), units taken from each dataset, documents emitted."""

  units: int
  taken: list[int]
  emitted: int


class Interleave(abc.ABC):
  """Chooses the dataset of every next document; built once per stream."""

  @abc.abstractmethod
  def begin(self, step: int, weights: Sequence[float | Fraction], position: StreamPosition) -> None:
    """Called before picking for `step`, with that step's normalised weights."""

  @abc.abstractmethod
  def pick(self, loop: PickLoop, position: StreamPosition) -> PickResult:
    """Picks documents until a limit, the end of a dataset, or the last pass."""

  @abc.abstractmethod
  def get_state(self) -> Segment | None:
    """The state (None when the strategy is a pure function of position)."""

  @abc.abstractmethod
  def set_state(self, segment: Segment | None) -> None:
    """Restores `get_state()`; raises ValueError when it is not this strategy's."""


class ExactInterleave(Interleave):
  """Largest deficit with release times (module docstring); state: the `Segment`."""

  def __init__(self, num_datasets: int, tokens_unit: bool, weights: Sequence[Fraction]) -> None:
    self.num_datasets = num_datasets
    self.tokens_unit = tokens_unit
    integers, scale = scale_weights(weights)
    self.segment = Segment(0, 0, scale, integers, [0] * num_datasets, [0] * num_datasets)
    self.exact: tuple[Fraction, ...] = tuple(weights)

  def begin(self, step: int, weights: Sequence[float | Fraction], position: StreamPosition) -> None:
    exact = tuple(Fraction(w) for w in weights)  # the stream gives this interleave exact weights
    if exact != self.exact:
      self.segment = self.segment.then(step, position.units, position.taken, exact)
      self.exact = exact

  def pick(self, loop: PickLoop, position: StreamPosition) -> PickResult:
    segment = self.segment
    return pick_exact(
      segment.weights, segment.scale, segment.deficits_at(position.units, position.taken), loop, self.tokens_unit
    )

  def get_state(self) -> Segment:
    return self.segment

  def set_state(self, segment: Segment | None) -> None:
    if segment is None or len(segment.weights) != self.num_datasets:
      raise ValueError(f"stream state: the exact interleave needs a segment for {self.num_datasets} datasets")
    self.segment = segment
    self.exact = tuple(Fraction(w, self.segment.scale) for w in self.segment.weights)


class RandomInterleave(Interleave):
  """An independent counter-based draw per document position.

  In the tokens unit, documents are drawn in proportion to w_i / (mean
  length of dataset i), so that tokens follow w_i.
  """

  def __init__(self, seed: int, mean_lengths: Sequence[float] | None, epoch: int = 0) -> None:
    # Epoch 0 keeps the key of every run before epochs existed; epoch e draws afresh.
    self.key = derive_key(seed, "interleave") if not epoch else derive_key(seed, "interleave", epoch)
    self.mean_lengths = mean_lengths
    self.among: list[int] = []
    self.cumulative = np.zeros(0)

  def begin(self, step: int, weights: Sequence[float | Fraction], position: StreamPosition) -> None:
    self.among = [i for i, w in enumerate(weights) if w > 0]
    scale = [float(weights[i]) / (self.mean_lengths[i] if self.mean_lengths else 1) for i in self.among]
    self.cumulative = np.cumsum(scale) / math.fsum(scale)

  def pick(self, loop: PickLoop, position: StreamPosition) -> PickResult:
    return pick_random(self.key, self.cumulative, self.among, position.emitted, loop)

  def get_state(self) -> None:
    return None

  def set_state(self, segment: Segment | None) -> None:
    """Nothing to restore: the draw of document n depends on n alone."""


def make_interleave(
  kind: str,
  seed: int,
  tokens_unit: bool,
  weights: Sequence[Fraction],
  mean_lengths: Sequence[float],
  epoch: int = 0,
) -> Interleave:
  """The strategy `mixture.interleave` names: "exact" or "random" (its draws keyed by epoch too)."""
  if kind == "exact":
    return ExactInterleave(len(weights), tokens_unit, weights)
  if kind == "random":
    return RandomInterleave(seed, mean_lengths if tokens_unit else None, epoch)
  raise ValueError(f"mixture.interleave: {kind!r} is not one of exact, random")
