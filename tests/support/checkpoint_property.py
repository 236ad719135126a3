"""The reusable checkpoint property: state at any point restores to the same remaining output.

Apply it to every stateful piece (stream, packer, pipeline): give a factory
for a fresh object and a function that advances it n units and returns what
it produced, as a list of comparable items.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any


def assert_restores_exactly(
  make: Callable[[], Any],
  advance: Callable[[Any, int], list[Any]],
  total: int,
  stops: Iterable[int],
) -> None:
  """For each k in `stops`: run k units, save state through JSON, restore into
  a fresh object, run the rest; prefix + rest must equal an uninterrupted run,
  and the saved-from object must continue exactly like the restored one."""
  reference = advance(make(), total)
  assert len(reference) == total, f"reference run produced {len(reference)} of {total}"
  for k in stops:
    original = make()
    prefix = advance(original, k)
    state = json.loads(json.dumps(original.get_state()))
    restored = make()
    restored.set_state(state)
    rest = advance(restored, total - k)
    assert prefix + rest == reference, f"restored at {k}: output differs from the uninterrupted run"
    assert advance(original, total - k) == rest, f"get_state at {k} changed the original's output"
