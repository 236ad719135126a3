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
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping, Sequence

import numpy as np

from jaxdata.feistel import uniform

__all__ = [
    "END_OF_BUFFER",
    "END_OF_DATASET",
    "LoopResult",
    "Segment",
    "WEIGHT_SCALE",
    "pick",
    "scale_weights",
]

WEIGHT_SCALE = 1 << 20
# Marks in the per-dataset length lists the loop reads (see DatasetCursor.encoded_lengths):
# a document that completes a watched pass is stored as ~length (negative);
END_OF_DATASET = -(1 << 62)  # after the last document the dataset may still supply
END_OF_BUFFER = -(1 << 61)  # after a look-ahead buffer that can still grow
_DRAW_CHUNK = 4096


def scale_weights(weights: Sequence[float]) -> list[int]:
  """Normalised weights -> ints summing to WEIGHT_SCALE (largest remainder);
  every positive weight keeps at least 1.

  >>> scale_weights([0.5, 0.25, 0.25]) == [1 << 19, 1 << 18, 1 << 18]
  True
  """
  raw = [w * WEIGHT_SCALE for w in weights]
  scaled = [max(math.floor(r), 1) if r > 0 else 0 for r in raw]
  shortfall = WEIGHT_SCALE - sum(scaled)
  # Give (or take) single units by largest (smallest) remainder, never below 1.
  ranked = sorted(range(len(raw)), key=lambda i: (-(raw[i] - scaled[i]), i))
  if shortfall < 0:
    ranked.reverse()
  step = 1 if shortfall > 0 else -1
  while shortfall:
    for i in ranked:
      if shortfall and raw[i] > 0 and scaled[i] + step >= 1:
        scaled[i] += step
        shortfall -= step
  return scaled


@dataclasses.dataclass
class Segment:
  """A run of steps with the same weights, for the exact interleave.

  Deficits at the segment start plus the units since then give every
  deficit exactly: deficit_i = deficits_i + weights_i (t) - WEIGHT_SCALE (a_i),
  with t units emitted and a_i units taken from i since `start`.
  """

  step: int
  start: int
  weights: list[int]
  deficits: list[int]
  taken: list[int]

  def deficits_at(self, units: int, taken: Sequence[int]) -> list[int]:
    elapsed = units - self.start
    return [
        d + w * elapsed - WEIGHT_SCALE * (c - c0)
        for d, w, c, c0 in zip(self.deficits, self.weights, taken, self.taken)
    ]

  def to_json(self) -> dict[str, Any]:
    return {"step": self.step, "start": self.start, "weights": list(self.weights),
            "deficits": list(self.deficits), "taken": list(self.taken)}

  @classmethod
  def from_json(cls, raw: Mapping[str, Any], size: int) -> "Segment":
    try:
      segment = cls(
          step=raw["step"], start=raw["start"], weights=list(raw["weights"]),
          deficits=list(raw["deficits"]), taken=list(raw["taken"]),
      )
    except (KeyError, TypeError) as e:
      raise ValueError(f"stream state: malformed segment {raw!r} ({e})") from e
    values = [segment.step, segment.start, *segment.weights, *segment.deficits, *segment.taken]
    lists_ok = len(segment.weights) == len(segment.deficits) == len(segment.taken) == size
    if not lists_ok or any(isinstance(v, bool) or not isinstance(v, int) for v in values):
      raise ValueError(f"stream state: segment must hold ints for {size} datasets, got {raw!r}")
    return segment


@dataclasses.dataclass(frozen=True)
class LoopResult:
  choices: list[int]
  ended: bool


def _keys(units: int, numerator: int, weight: int, margin: int) -> tuple[float, float]:
  """(due, release) of a dataset's next document of `units` units, in units
  since the segment start. The pick loop inlines the same expressions."""
  due = ((WEIGHT_SCALE - margin) * units + numerator) / weight
  release = (margin * units + numerator) / weight - units
  return due, release


def pick(
    *,
    segment: Segment | None,
    draw: tuple[int, np.ndarray, list[int]] | None,
    counter: int,
    eligible: list[int],
    units: int,
    taken: list[int],
    lengths: list[list[int] | None],
    cursor: list[int],
    watch: list[int],
    remaining: int,
    tokens_unit: bool,
    doc_limit: int,
    token_limit: int,
) -> LoopResult:
  """Picks documents until a limit, the end of a dataset, or the last pass.

  Exactly one of `segment` (exact interleave; `units` emitted so far and
  `taken` from each dataset) and
  `draw` ((key, cumulative probabilities, eligible datasets) for the random
  interleave; `counter` = documents emitted so far) is given. `cursor` and
  `watch` are updated in place. `watch[i]` counts the pass completions
  dataset i still needs; `remaining` how many datasets still need some (-1:
  no stop_after_passes dataset, that end never comes).
  """
  marks = _Marks(watch, remaining)
  if segment is not None:
    return _pick_exact(
        segment, eligible, units, taken, lengths, cursor, marks, tokens_unit, doc_limit, token_limit
    )
  return _pick_random(draw, counter, lengths, cursor, marks, doc_limit, token_limit)


class _Marks:
  """The rare path of the pick loops: a negative (marked) length."""

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
    segment: Segment,
    eligible: list[int],
    units: int,
    taken: list[int],
    lengths: list[list[int] | None],
    cursor: list[int],
    marks: _Marks,
    tokens_unit: bool,
    doc_limit: int,
    token_limit: int,
) -> LoopResult:
  weights = segment.weights
  positive = sum(1 for i in eligible if weights[i] > 0)
  margin = WEIGHT_SCALE // (2 * positive - 2) if positive > 1 else 0
  due_scale = WEIGHT_SCALE - margin
  # numerator[i] = WEIGHT_SCALE * (units taken from i in the segment) - its deficit at the start
  numerator = [
      WEIGHT_SCALE * (c - c0) - d0 for c, c0, d0 in zip(taken, segment.taken, segment.deficits)
  ]
  due = [math.inf] * len(lengths)
  release = [math.inf] * len(lengths)
  for i in eligible:
    due[i], release[i] = _keys(_units_of(lengths[i][cursor[i]], tokens_unit), numerator[i], weights[i], margin)
  order = tuple(eligible)
  choices: list[int] = []
  append = choices.append
  count = tokens = 0
  t = float(units - segment.start)  # units since the segment start, exact below 2**53
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
        return LoopResult(choices, True)
    cursor[best] = at + 1
    step_units = length if tokens_unit else 1
    t += step_units
    tokens += length
    append(best)
    count += 1
    if last:
      return LoopResult(choices, True)
    if count >= doc_limit or tokens >= token_limit:
      return LoopResult(choices, False)
    # The keys of best's next document (_keys inlined: this is the hot path).
    n = lengths[best][at + 1] if tokens_unit else 1
    if n < 0:
      n = 1 if n <= END_OF_BUFFER else ~n
    numerator[best] += WEIGHT_SCALE * step_units
    weight = weights[best]
    due[best] = (due_scale * n + numerator[best]) / weight
    release[best] = (margin * n + numerator[best]) / weight - n


# The two loops repeat their few lines of bookkeeping on purpose: a shared
# per-document helper call would cost the exact loop a fifth of its speed.
def _pick_random(
    draw: tuple[int, np.ndarray, list[int]],
    counter: int,
    lengths: list[list[int] | None],
    cursor: list[int],
    marks: _Marks,
    doc_limit: int,
    token_limit: int,
) -> LoopResult:
  key, cumulative, among = draw
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
        return LoopResult(choices, True)
    cursor[best] = at + 1
    tokens += length
    append(best)
    count += 1
    if last:
      return LoopResult(choices, True)
    if count >= doc_limit or tokens >= token_limit:
      return LoopResult(choices, False)


def _units_of(encoded: int, tokens_unit: bool) -> int:
  """Units of an encoded length; an end mark counts as one (it is never emitted)."""
  if not tokens_unit:
    return 1
  if encoded >= 0:
    return encoded
  return 1 if encoded <= END_OF_BUFFER else ~encoded
