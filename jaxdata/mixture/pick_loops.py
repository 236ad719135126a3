"""The pick loops: which dataset supplies each next document, one document at a time.

`pick_exact` is the exact interleave's largest-deficit loop (its rule and
bound are in `jaxdata.mixture.interleave`), in C where it was built
(`jaxdata/mixture/_exact_pick.c`, identical picks; ``JAXDATA_NATIVE=0``
runs the Python loop); `pick_random` reads counter-based draws. Both stop
after `doc_limit` documents or at `token_limit` tokens, and hand pass ends
and dataset ends to `PassMarks`.

>>> loop = PickLoop([0, 1], [[3, 3, 3, END_OF_DATASET], [1, 1, 1, END_OF_DATASET]], [0, 0],
...                 PassMarks([0, 0], -1), doc_limit=4, token_limit=100)
>>> pick_exact([1, 1], 2, [0, 0], loop, tokens_unit=False).choices
[0, 1, 0, 1]
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from jaxdata._native_switch import native_wanted
from jaxdata.order.cursor import END_OF_BUFFER, END_OF_DATASET
from jaxdata.order.feistel import uniform

try:
  import jaxdata.mixture._exact_pick as _exact_pick
except ImportError:  # built without a C compiler: the Python loop below
  _exact_pick = None

__all__ = ["BUILT", "NATIVE", "PassMarks", "PickLoop", "PickResult", "pick_exact", "pick_random"]

_DRAW_CHUNK = 4096
BUILT: bool = _exact_pick is not None  # the extension was compiled at install
NATIVE: bool = BUILT and native_wanted()  # the exact pick loop runs in C


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
  lengths: list[list[int]]  # empty for a dataset not eligible
  cursor: list[int]
  marks: PassMarks
  doc_limit: int
  token_limit: int
  overhead: int = 0


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


def pick_exact(
  weights: list[int],
  scale: int,
  deficits: list[int],
  loop: PickLoop,
  tokens_unit: bool,
  native: bool | None = None,
) -> PickResult:
  """The exact interleave's loop (`jaxdata.mixture.interleave`): dataset i has
  weight weights[i] / scale and deficit deficits[i] / scale at the loop's start.

  It runs in C (`_exact_pick.c`) while its numbers stay below 2**53 and no
  pick reads a marked length; each such pick, or the rest of the loop once a
  number leaves that range, runs in Python. Both make the same picks.
  `native` None: `NATIVE`.
  """
  native = NATIVE if native is None else native
  eligible, lengths, cursor, marks = loop.eligible, loop.lengths, loop.cursor, loop.marks
  doc_limit, token_limit, overhead = loop.doc_limit, loop.token_limit, loop.overhead
  positive = sum(1 for i in eligible if weights[i] > 0)
  margin = scale // (2 * positive - 2) if positive > 1 else 0  # exact: see scale_weights
  due_scale = scale - margin
  # Keys are measured from this loop's start, so the floats stay small (exact
  # ints below 2**53) however long the run: shift[i] = -deficit_i, in 1/scale units.
  shift = [-d for d in deficits]
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
    if native:
      status, t, count, tokens = _exact_pick.pick(
        lengths,
        cursor,
        order,
        shift,
        due,
        release,
        weights,
        choices,
        t,
        count,
        tokens,
        doc_limit,
        token_limit,
        overhead,
        tokens_unit,
        due_scale,
        margin,
        scale,
        END_OF_BUFFER,
      )
      if status == _exact_pick.DONE:
        return PickResult(choices, False)
      native = status == _exact_pick.ONE_PICK  # else a number left C's exact range: Python goes on
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
def pick_random(key: int, cumulative: np.ndarray, among: list[int], counter: int, loop: PickLoop) -> PickResult:
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
