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
an `Interleave` object (`begin` a step, `pick` documents, state).
"""

from __future__ import annotations

import abc
import dataclasses
import math
from fractions import Fraction
from typing import Any, Sequence

import numpy as np

from jaxdata.config.validate import is_int
from jaxdata.order.cursor import END_OF_BUFFER, END_OF_DATASET
from jaxdata.order.feistel import derive_key, uniform

__all__ = [
    "ExactInterleave",
    "Interleave",
    "PassMarks",
    "PickLoop",
    "PickResult",
    "RandomInterleave",
    "Segment",
    "StreamPosition",
    "make_interleave",
    "scale_weights",
]

_DRAW_CHUNK = 4096


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


@dataclasses.dataclass
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
        d + w * elapsed - self.scale * (c - c0)
        for d, w, c, c0 in zip(self.deficits, self.weights, taken, self.taken)
    ]

  def then(self, step: int, units: int, taken: Sequence[int], weights: Sequence[Fraction]) -> "Segment":
    """The segment that starts now with `weights`, carrying the deficits exactly."""
    integers, scale = scale_weights(weights)
    common = math.lcm(scale, self.scale)
    deficits = [d * (common // self.scale) for d in self.deficits_at(units, taken)]
    return Segment(step, units, common, [w * (common // scale) for w in integers], deficits, list(taken))

  def to_json(self) -> dict[str, Any]:
    return {"step": self.step, "start": self.start, "scale": self.scale, "weights": list(self.weights),
            "deficits": list(self.deficits), "taken": list(self.taken)}

  @classmethod
  def from_json(cls, raw: Any, size: int) -> "Segment":
    try:
      segment = cls(
          step=raw["step"], start=raw["start"], scale=raw["scale"], weights=list(raw["weights"]),
          deficits=list(raw["deficits"]), taken=list(raw["taken"]),
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
class PickResult:
  """The datasets picked, in order, whether the stream ended, and the dataset
  that ended it (the one that could not supply, or completed the last pass)."""

  choices: list[int]
  ended: bool
  ended_by: int = -1


@dataclasses.dataclass
class PickLoop:
  """What one pick loop reads and advances.

  `lengths[i]` is dataset i's look-ahead buffer as encoded lengths (see
  `DatasetCursor.encoded_lengths`; None for a dataset not eligible now) and
  `cursor[i]` its next unread entry (advanced in place); `marks` tracks
  stop_after_passes. The loop stops after `doc_limit` documents or once
  `token_limit` tokens are reached (the crossing document included), each
  document counting its length plus `overhead` (the BOS / EOS a packer adds).
  """

  eligible: list[int]
  lengths: list[list[int] | None]
  cursor: list[int]
  marks: PassMarks
  doc_limit: int
  token_limit: int
  overhead: int = 0


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
  def begin(self, step: int, weights: Sequence[float], position: StreamPosition) -> None:
    """Called before picking for `step`, with that step's normalised weights."""

  @abc.abstractmethod
  def pick(self, loop: PickLoop, position: StreamPosition) -> PickResult:
    """Picks documents until a limit, the end of a dataset, or the last pass."""

  @abc.abstractmethod
  def get_state(self) -> Any:
    """JSON-able state (None when the strategy is a pure function of position)."""

  @abc.abstractmethod
  def set_state(self, raw: Any) -> None:
    """Restores `get_state()`; raises ValueError on a malformed state."""


class ExactInterleave(Interleave):
  """Largest deficit with release times (module docstring); state: the `Segment`."""

  def __init__(self, num_datasets: int, tokens_unit: bool, weights: Sequence[Fraction]) -> None:
    self.num_datasets = num_datasets
    self.tokens_unit = tokens_unit
    integers, scale = scale_weights(weights)
    self.segment = Segment(0, 0, scale, integers, [0] * num_datasets, [0] * num_datasets)
    self.exact: tuple[Fraction, ...] = tuple(weights)

  def begin(self, step: int, weights: Sequence[Fraction], position: StreamPosition) -> None:
    if tuple(weights) != self.exact:
      self.segment = self.segment.then(step, position.units, position.taken, weights)
      self.exact = tuple(weights)

  def pick(self, loop: PickLoop, position: StreamPosition) -> PickResult:
    return _pick_exact(self.segment, loop, position.units, position.taken, self.tokens_unit)

  def get_state(self) -> dict[str, Any]:
    return self.segment.to_json()

  def set_state(self, raw: Any) -> None:
    self.segment = Segment.from_json(raw, self.num_datasets)
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

  def begin(self, step: int, weights: Sequence[float], position: StreamPosition) -> None:
    self.among = [i for i, w in enumerate(weights) if w > 0]
    scale = [float(weights[i]) / (self.mean_lengths[i] if self.mean_lengths else 1) for i in self.among]
    self.cumulative = np.cumsum(scale) / math.fsum(scale)

  def pick(self, loop: PickLoop, position: StreamPosition) -> PickResult:
    return _pick_random(self.key, self.cumulative, self.among, position.emitted, loop)

  def get_state(self) -> None:
    return None

  def set_state(self, raw: Any) -> None:
    """Nothing to restore: the draw of document n depends on n alone."""


def make_interleave(
    kind: str, seed: int, tokens_unit: bool, weights: Sequence[Fraction], mean_lengths: Sequence[float],
    epoch: int = 0,
) -> Interleave:
  """The strategy `mixture.interleave` names: "exact" or "random" (its draws keyed by epoch too)."""
  if kind == "exact":
    return ExactInterleave(len(weights), tokens_unit, weights)
  if kind == "random":
    return RandomInterleave(seed, mean_lengths if tokens_unit else None, epoch)
  raise ValueError(f"mixture.interleave: {kind!r} is not one of exact, random")


def _ratio(numerator: int, denominator: int) -> float:
  """numerator / denominator, correctly rounded; +-inf past the float range
  (a weight many orders of magnitude below the others)."""
  try:
    return numerator / denominator
  except OverflowError:
    return math.inf if numerator > 0 else -math.inf


def _keys(units: int, shift: int, weight: int, scale: int, margin: int) -> tuple[float, float]:
  """(due, release) of a dataset's next document of `units` units, in units
  after the pick loop's start. The loop inlines the same expressions."""
  return _ratio((scale - margin) * units + shift, weight), _ratio(margin * units + shift, weight) - units


class PassMarks:
  """The rare path of the pick loops: a negative (marked) length.

  `watch[i]` counts the pass completions dataset i still needs; `remaining`
  how many datasets still need some (-1: no stop_after_passes dataset, so
  that end never comes).
  """

  def __init__(self, watch: list[int], remaining: int) -> None:
    self.watch = watch
    self.remaining = remaining

  def read(self, dataset: int, encoded: int) -> tuple[int, bool, bool]:
    """(length, ends the stream before this document, ends it after)."""
    if encoded == END_OF_DATASET:
      return 0, True, False  # the picked dataset cannot supply a next document
    if encoded == END_OF_BUFFER:
      raise RuntimeError("look-ahead buffer ran dry inside a pick loop")  # ensure() prevents it
    self.watch[dataset] -= 1  # the document completes a pass
    if self.watch[dataset] == 0:
      self.remaining -= 1
      return ~encoded, False, self.remaining == 0  # every stop_after_passes dataset is done
    return ~encoded, False, False


def _pick_exact(
    segment: Segment, loop: PickLoop, units: int, taken: list[int], tokens_unit: bool
) -> PickResult:
  eligible, lengths, cursor, marks = loop.eligible, loop.lengths, loop.cursor, loop.marks
  doc_limit, token_limit, overhead = loop.doc_limit, loop.token_limit, loop.overhead
  weights, scale = segment.weights, segment.scale
  positive = sum(1 for i in eligible if weights[i] > 0)
  margin = scale // (2 * positive - 2) if positive > 1 else 0  # exact: see scale_weights
  due_scale = scale - margin
  # Keys are measured from this loop's start, so the floats stay small (exact
  # ints below 2**53) however long the run: shift[i] = -deficit_i, in 1/scale units.
  shift = [-d for d in segment.deficits_at(units, taken)]
  due = [math.inf] * len(lengths)
  release = [math.inf] * len(lengths)
  for i in eligible:
    due[i], release[i] = _keys(_units_of(lengths[i][cursor[i]], tokens_unit), shift[i], weights[i], scale, margin)
  order = tuple(eligible)
  choices: list[int] = []
  append = choices.append
  count = tokens = 0
  t = 0.0  # units since this loop's start
  while True:
    best, best_due = -1, math.inf
    for i in order:
      if t > release[i] and due[i] < best_due:
        best, best_due = i, due[i]
    if best < 0:  # nothing released: the one due first
      for i in order:
        if due[i] < best_due:
          best, best_due = i, due[i]
    at = cursor[best]
    length = lengths[best][at]
    last = False
    if length < 0:
      length, ended, last = marks.read(best, length)
      if ended:
        return PickResult(choices, True, best)
    cursor[best] = at + 1
    step_units = length if tokens_unit else 1
    t += step_units
    tokens += length + overhead
    append(best)
    count += 1
    if last:
      return PickResult(choices, True, best)
    if count >= doc_limit or tokens >= token_limit:
      return PickResult(choices, False)
    # The keys of best's next document (_keys inlined: this is the hot path).
    n = lengths[best][at + 1] if tokens_unit else 1
    if n < 0:
      n = 1 if n <= END_OF_BUFFER else ~n
    shift[best] += scale * step_units
    weight = weights[best]
    try:
      due[best] = (due_scale * n + shift[best]) / weight
      release[best] = (margin * n + shift[best]) / weight - n
    except OverflowError:
      due[best], release[best] = _keys(n, shift[best], weight, scale, margin)


# The two loops repeat their few lines of bookkeeping on purpose: a shared
# per-document helper call would cost the exact loop a fifth of its speed.
def _pick_random(key: int, cumulative: np.ndarray, among: list[int], counter: int, loop: PickLoop) -> PickResult:
  lengths, cursor, marks = loop.lengths, loop.cursor, loop.marks
  doc_limit, token_limit, overhead = loop.doc_limit, loop.token_limit, loop.overhead
  draws: list[int] = []
  choices: list[int] = []
  append = choices.append
  count = tokens = 0
  while True:
    if count == len(draws):
      counters = np.arange(counter + count, counter + count + _DRAW_CHUNK)
      slots = np.searchsorted(cumulative, uniform(key, counters), side="right")
      draws.extend(np.asarray(among)[np.minimum(slots, len(among) - 1)].tolist())
    best = draws[count]
    at = cursor[best]
    length = lengths[best][at]
    last = False
    if length < 0:
      length, ended, last = marks.read(best, length)
      if ended:
        return PickResult(choices, True, best)
    cursor[best] = at + 1
    tokens += length + overhead
    append(best)
    count += 1
    if last:
      return PickResult(choices, True, best)
    if count >= doc_limit or tokens >= token_limit:
      return PickResult(choices, False)


def _units_of(encoded: int, tokens_unit: bool) -> int:
  """Units of an encoded length; an end mark counts as one (it is never emitted)."""
  if not tokens_unit:
    return 1
  if encoded >= 0:
    return encoded
  return 1 if encoded <= END_OF_BUFFER else ~encoded
