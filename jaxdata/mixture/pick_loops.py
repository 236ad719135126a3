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


@dataclasses.dataclass
class _ExactKeys:
  """The exact loop's per-dataset keys, measured from the loop's start so the floats stay small (exact
  ints below 2**53) however long the run: `shift[i]` is -deficit_i in 1/scale units, `due` and `release`
  the next document's keys (`_keys`). Advanced in place as the loop picks."""

  shift: list[int]
  due: list[float]
  release: list[float]
  due_scale: int
  margin: int


def _start_keys(weights: list[int], scale: int, deficits: list[int], loop: PickLoop, tokens_unit: bool) -> _ExactKeys:
  """Each eligible dataset's keys for its next document at the loop's start (others never due)."""
  positive = sum(1 for i in loop.eligible if weights[i] > 0)
  margin = scale // (2 * positive - 2) if positive > 1 else 0  # exact: see scale_weights
  keys = _ExactKeys(
    [-d for d in deficits], [math.inf] * len(loop.lengths), [math.inf] * len(loop.lengths), scale - margin, margin
  )
  for i in loop.eligible:
    units = _units_of(loop.lengths[i][loop.cursor[i]], tokens_unit)
    keys.due[i], keys.release[i] = _keys(units, keys.shift[i], weights[i], scale, margin)
  return keys


def _native_picks(
  keys: _ExactKeys,
  loop: PickLoop,
  choices: list[int],
  progress: tuple[float, int, int],
  *,
  weights: list[int],
  scale: int,
  tokens_unit: bool,
) -> tuple[int, float, int, int]:
  """Runs the C loop from `progress` (units, documents, tokens so far): (status, units, documents, tokens)."""
  t, count, tokens = progress
  return _exact_pick.pick(
    loop.lengths, loop.cursor, tuple(loop.eligible), keys.shift, keys.due, keys.release, weights, choices,
    t, count, tokens, loop.doc_limit, loop.token_limit, loop.overhead, tokens_unit, keys.due_scale, keys.margin,
    scale, END_OF_BUFFER,
  )  # fmt: skip


def pick_exact(
  weights: list[int],
  scale: int,
  deficits: list[int],
  loop: PickLoop,
  tokens_unit: bool,
  native: bool | None = None,
) -> PickResult:
  """The exact interleave's loop (`jaxdata.mixture.interleave`): dataset i has weight weights[i] / scale
  and deficit deficits[i] / scale at the loop's start. It runs in C (`_exact_pick.c`) while its numbers
  stay below 2**53 and no pick reads a marked length; each such pick, or the rest of the loop once a
  number leaves that range, runs in Python. Both make the same picks. `native` None: `NATIVE`."""
  native = NATIVE if native is None else native
  lengths, cursor, marks, order = loop.lengths, loop.cursor, loop.marks, tuple(loop.eligible)
  keys = _start_keys(weights, scale, deficits, loop, tokens_unit)
  shift, due, release, due_scale, margin = keys.shift, keys.due, keys.release, keys.due_scale, keys.margin
  choices: list[int] = []
  count, tokens, t = 0, 0, 0.0  # t: units since this loop's start
  while True:
    if native:
      status, t, count, tokens = _native_picks(
        keys, loop, choices, (t, count, tokens), weights=weights, scale=scale, tokens_unit=tokens_unit
      )
      if status == _exact_pick.DONE:
        return PickResult(choices, False)
      native = status == _exact_pick.ONE_PICK  # else a number left C's exact range: Python goes on
    best, best_due = -1, math.inf
    for i in order:
      if t > release[i] and due[i] < best_due:
        best, best_due = i, due[i]
    if best < 0:  # nothing released: the one due first (the first of equals, as the loop above)
      best = min(order, key=due.__getitem__)
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
    tokens += length + loop.overhead
    choices.append(best)
    count += 1
    if last:
      return PickResult(choices, True, best)
    if count >= loop.doc_limit or tokens >= loop.token_limit:
      return PickResult(choices, False)
    # The keys of best's next document (_keys inlined: this is the hot path).
    n = lengths[best][at + 1] if tokens_unit else 1
    if n < 0:
      n = 1 if n <= END_OF_BUFFER else ~n
    shift[best] += scale * step_units
    try:
      due[best] = (due_scale * n + shift[best]) / weights[best]
      release[best] = (margin * n + shift[best]) / weights[best] - n
    except OverflowError:
      due[best], release[best] = _keys(n, shift[best], weights[best], scale, margin)


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
