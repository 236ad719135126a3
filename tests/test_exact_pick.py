"""The exact interleave's pick loop in C (`jaxdata.mixture._exact_pick`) makes the
same picks as the Python loop, including where it hands picks back to Python
(pass marks, ends of datasets) and where its numbers leave the exact range."""

from __future__ import annotations

import collections
import copy
import random
from fractions import Fraction
from typing import Any

import numpy as np
import pytest

from jaxdata.mixture import pick_loops
from jaxdata.mixture.interleave import Segment, scale_weights
from jaxdata.mixture.pick_loops import PassMarks, PickLoop, pick_exact
from jaxdata.order.cursor import END_OF_BUFFER, END_OF_DATASET
from pipeline_fixtures import fresh_python


def test_the_extension_is_built_and_used_by_default() -> None:
  # `pip install -e .` compiles jaxdata/mixture/_exact_pick.c; a missing build must fail here.
  assert pick_loops._exact_pick is not None, "jaxdata.mixture._exact_pick was not built"
  assert pick_loops.NATIVE


def random_weights(rng: np.random.Generator, k: int, huge: bool) -> list[Fraction]:
  """k positive weights summing to 1; `huge` gives denominators whose lcm passes 2**53."""
  if huge:
    primes = [1_000_003, 1_000_033, 1_000_037, 1_000_039, 1_000_081, 1_000_099]
    raw = [Fraction(int(rng.integers(1, 50)), primes[i % len(primes)]) for i in range(k)]
  else:
    raw = [Fraction(int(rng.integers(1, 20))) for _ in range(k)]
  total = sum(raw)
  return [w / total for w in raw]


def random_lengths(rng: np.random.Generator, size: int, marked: bool) -> list[int]:
  """Encoded lengths: some documents mark a pass end (~length); the list ends
  with END_OF_DATASET or END_OF_BUFFER, as `DatasetCursor.encoded_lengths` does."""
  lengths = rng.integers(1, 3000, size).tolist()
  if marked:
    for at in rng.choice(size, min(size, int(rng.integers(0, 3))), replace=False).tolist():
      lengths[at] = ~lengths[at]
  return lengths + [END_OF_DATASET if rng.random() < 0.5 else END_OF_BUFFER]


def random_case(rng: np.random.Generator) -> dict[str, Any]:
  k = int(rng.integers(1, 7))
  weights = random_weights(rng, k, huge=rng.random() < 0.15)
  integers, scale = scale_weights(weights)
  tokens_unit = bool(rng.random() < 0.7)
  marked = bool(rng.random() < 0.4)
  lengths: list[list[int] | None] = [random_lengths(rng, int(rng.integers(1, 400)), marked) for _ in range(k)]
  eligible = sorted(rng.choice(k, int(rng.integers(1, k + 1)), replace=False).tolist())
  for i in range(k):
    if i not in eligible and rng.random() < 0.5:
      lengths[i] = None
  cursor = [int(rng.integers(0, len(lengths[i]) // 4 + 1)) if lengths[i] else 0 for i in range(k)]
  # Deficits of a run already under way (some far past 2**53 in units of 1/scale), and units emitted.
  spread = 10 ** int(rng.integers(1, 19))  # up to 10**18, past 2**53
  deficits = [int(rng.integers(-spread, spread)) // max(1, k) for _ in range(k)]
  deficits[-1] = -sum(deficits[:-1])
  segment = Segment(0, 0, scale, integers, deficits, [0] * k)
  watch = [int(rng.integers(0, 3)) for _ in range(k)] if marked else [0] * k
  remaining = sum(1 for w in watch if w > 0) if marked else -1
  return {
    "segment": segment,
    "tokens_unit": tokens_unit,
    "loop": PickLoop(
      eligible,
      lengths,
      cursor,
      PassMarks(watch, remaining),
      doc_limit=int(rng.integers(1, 600)),
      token_limit=int(rng.integers(1, 400_000)),
      overhead=int(rng.integers(0, 3)),
    ),
  }


def run(case: dict[str, Any], native: bool) -> tuple[Any, list[int], list[int], int]:
  """(the result or the error, cursor, pass watch, datasets still watched) after a loop."""
  case = copy.deepcopy(case)
  loop = case["loop"]
  segment = case["segment"]  # picking from its start: its deficits apply as they are
  try:
    result: Any = pick_exact(segment.weights, segment.scale, segment.deficits, loop, case["tokens_unit"], native)
  except (RuntimeError, IndexError, ZeroDivisionError) as e:
    result = (type(e).__name__, str(e))
  return result, loop.cursor, loop.marks.watch, loop.marks.remaining


class CountingPick:
  """The C module, counting the statuses its loop returns (nothing else changed)."""

  def __init__(self, module: Any) -> None:
    self.module = module
    self.DONE, self.ONE_PICK, self.OUT_OF_RANGE = module.DONE, module.ONE_PICK, module.OUT_OF_RANGE
    self.statuses: collections.Counter[int] = collections.Counter()

  def pick(self, *args: Any) -> tuple[int, float, int, int]:
    out = self.module.pick(*args)
    self.statuses[out[0]] += 1
    return out


@pytest.mark.slow
def test_c_and_python_make_the_same_picks_on_random_loops(monkeypatch: pytest.MonkeyPatch) -> None:
  counting = CountingPick(pick_loops._exact_pick)
  monkeypatch.setattr(pick_loops, "_exact_pick", counting)
  rng = np.random.default_rng(2026)
  outcomes = {"done": 0, "ended": 0, "error": 0, "long": 0}
  for _ in range(1500):
    case = random_case(rng)
    c, python = run(case, True), run(case, False)
    assert c == python
    result = c[0]
    if isinstance(result, tuple):
      outcomes["error"] += 1
    else:
      outcomes["ended" if result.ended else "done"] += 1
      outcomes["long"] += len(result.choices) >= 50
  # Every way a loop ends, and every way C hands back, is exercised (counted so that a
  # generator change cannot hide one).
  assert min(outcomes.values()) >= 20, outcomes
  statuses = [counting.statuses[s] for s in (counting.DONE, counting.ONE_PICK, counting.OUT_OF_RANGE)]
  assert min(statuses) >= 20, statuses


def test_keys_past_the_exact_range_go_on_in_python() -> None:
  # Weights with denominators near 10**6: the scale passes 2**53 and C hands the whole
  # loop to Python at once; the picks are the same, and not a trivial sequence.
  weights = [Fraction(1, 1_000_003), Fraction(1, 1_000_033), Fraction(1, 1_000_037)]
  weights.append(1 - sum(weights))
  integers, scale = scale_weights(weights)
  assert scale > 2**53
  lengths = [[5] * 50 + [END_OF_DATASET] for _ in range(4)]
  loop = PickLoop([0, 1, 2, 3], lengths, [0] * 4, PassMarks([0] * 4, -1), doc_limit=40, token_limit=10**6)
  case = {
    "segment": Segment(0, 0, scale, integers, [scale * 7, -scale * 7, 0, 0], [0] * 4),
    "tokens_unit": True,
    "loop": loop,
  }
  c, python = run(case, True), run(case, False)
  assert c == python
  assert len(c[0].choices) == 40 and len(set(c[0].choices)) >= 2


@pytest.mark.parametrize("tokens_unit", [True, False])
def test_a_pass_end_is_picked_in_python_then_c_goes_on(tokens_unit: bool) -> None:
  # One dataset, a pass end at its 3rd document: picks 0-1 in C, the 3rd in Python
  # (the mark), then C again until the limit.
  lengths = [[4, 4, ~4, 4, 4, 4, END_OF_BUFFER]]
  loop = PickLoop([0], lengths, [0], PassMarks([2], 1), doc_limit=5, token_limit=10**6)
  case = {"segment": Segment(0, 0, 1, [1], [0], [0]), "tokens_unit": tokens_unit, "loop": loop}
  c, python = run(case, True), run(case, False)
  assert c == python
  assert c[0].choices == [0] * 5 and not c[0].ended and c[2] == [1]


def test_the_c_loop_refuses_lists_of_different_sizes() -> None:
  with pytest.raises(ValueError, match="must have one size"):
    pick_loops._exact_pick.pick(
      [[1, 2]], [0, 0], (0,), [0], [0.0], [0.0], [1], [], 0.0, 0, 0, 1, 1, 0, True, 1, 0, 1, END_OF_BUFFER
    )


@pytest.mark.slow
def test_jaxdata_native_0_runs_the_python_loop() -> None:
  script = "from jaxdata.mixture import pick_loops; print(pick_loops.NATIVE)"
  assert [fresh_python(script, native).strip() for native in ("0", "1")] == ["False", "True"]


def test_without_the_extension_the_python_loop_runs() -> None:
  script = (
    "from jaxdata.mixture import pick_loops\n"
    "from jaxdata.order.cursor import END_OF_DATASET\n"
    "loop = pick_loops.PickLoop([0, 1], [[3, 3, END_OF_DATASET], [1, 1, END_OF_DATASET]], [0, 0],\n"
    "                           pick_loops.PassMarks([0, 0], -1), doc_limit=3, token_limit=100)\n"
    "print(pick_loops._exact_pick, pick_loops.NATIVE, pick_loops.pick_exact([1, 1], 2, [0, 0], loop, False).choices)"
  )
  assert fresh_python(script, missing="jaxdata.mixture._exact_pick").strip() == "None False [0, 1, 0]"


@pytest.mark.slow
def test_c_and_python_agree_at_the_edges_of_the_exact_range() -> None:
  # Scales and deficits at and around 2**53 (where C must hand over), document lengths
  # up to 2**40, weights of 0 among the eligible datasets (Python raises before the loop),
  # limits up to 2**62: the same results, errors and cursors either way.
  rng = random.Random(7)
  for _ in range(4000):
    k = rng.randint(1, 5)
    scale = rng.choice([1, 2, 6, 2**20, 2**30 + 1, 2**45, 2**52, 2**53 - 1, 2**53, 2**53 + 2])
    cuts = sorted(rng.randint(0, scale) for _ in range(k - 1))
    weights = [b - a for a, b in zip([0, *cuts], [*cuts, scale])]
    lengths: list[list[int] | None] = []
    for _ in range(k):
      run_lengths = [rng.choice([1, 2, 3, 1000, 2**20, 2**31, 2**40]) for _ in range(rng.randint(1, 30))]
      if rng.random() < 0.2:
        run_lengths[0] = ~run_lengths[0]
      lengths.append(run_lengths + [rng.choice([END_OF_DATASET, END_OF_BUFFER])])
    eligible = [i for i in range(k) if weights[i] > 0 or rng.random() < 0.1] or [0]
    spread = rng.choice([0, 1, 2**30, 2**52, 2**53 - 5, 2**60])
    loop = PickLoop(
      eligible,
      lengths,
      [0] * k,
      PassMarks([rng.randint(0, 2) for _ in range(k)], rng.choice([-1, 1, 2])),
      doc_limit=rng.randint(1, 40),
      token_limit=rng.choice([1, 100, 2**35, 2**62]),
      overhead=rng.choice([0, 1, 2]),
    )
    case = {
      "segment": Segment(0, 0, scale, weights, [rng.randint(-spread, spread) for _ in range(k)], [0] * k),
      "tokens_unit": rng.random() < 0.7,
      "loop": loop,
    }
    assert run(case, True) == run(case, False)
