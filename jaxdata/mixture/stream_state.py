"""`StreamState`: where the mixture's stream stands, typed and frozen; decoded and checked once.

The state is a few integers per dataset plus the interleave's segment, the
mixture updates still to be seen and the run's config changes::

    {"version": 2, "epoch": 0, "unit": "tokens", "interleave": "exact",
     "emitted": 812, "tokens": 90112, "ended": false,
     "datasets": {"web": {"pass": 0, "position": 640, "taken": 70000}, ...},   `CursorState` each
     "segment": {...} | null,          the exact interleave's `Segment` (null: random)
     "next_step": 44, "updates": [...], "changes": [...]}       (changes only when there are)

`StreamState.from_json` checks the shape (the names it is given, every
counter an int in [0, 2**62)); `DocumentStream.restore` checks what only
the config knows (the unit, the interleave, positions within the data).

>>> state = StreamState.from_json({"version": 2, "unit": "tokens", "interleave": "random", "emitted": 5,
...                                "tokens": 9, "datasets": {"a": {"pass": 1, "position": 2, "taken": 3}}}, ["a"])
>>> state.datasets, state.next_step
((('a', CursorState(pass_index=1, position=2, taken=3)),), 0)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from jaxdata.config.validate import check_state_header, is_int
from jaxdata.errors import ConfigError
from jaxdata.mixture.changes import ConfigChange, changes_from_json
from jaxdata.mixture.interleave import Segment
from jaxdata.mixture.updates import MixtureUpdates

__all__ = ["CursorState", "StreamState"]

MAX_COUNTER = 2**62  # passes, positions and counters of a restored state stay below (int64 arithmetic)
STREAM_STATE_VERSION = 2  # 2: exact rational interleave segments (with "scale")


@dataclasses.dataclass(frozen=True)
class CursorState:
  """One dataset's cursor: its pass, the position in that pass, the mixture's units drawn from it."""

  pass_index: int
  position: int
  taken: int

  def to_json(self) -> dict[str, int]:
    return {"pass": self.pass_index, "position": self.position, "taken": self.taken}


@dataclasses.dataclass(frozen=True)
class StreamState:
  """`DocumentStream`'s state (module docstring); `datasets` in the state's own order."""

  epoch: int
  unit: str
  interleave: str
  emitted: int
  tokens: int
  ended: bool
  datasets: tuple[tuple[str, CursorState], ...]
  segment: Segment | None
  next_step: int
  updates: MixtureUpdates
  changes: tuple[ConfigChange, ...] = ()

  @property
  def names(self) -> tuple[str, ...]:
    return tuple(name for name, _ in self.datasets)

  def to_json(self) -> dict[str, Any]:
    return {
      "version": STREAM_STATE_VERSION,
      "epoch": self.epoch,
      "unit": self.unit,
      "interleave": self.interleave,
      "emitted": self.emitted,
      "tokens": self.tokens,
      "ended": self.ended,
      "datasets": {name: cursor.to_json() for name, cursor in self.datasets},
      "segment": None if self.segment is None else self.segment.to_json(),
      "next_step": self.next_step,
      "updates": self.updates.to_json(),
      **({"changes": [c.to_json() for c in self.changes]} if self.changes else {}),  # (none: as before changes)
    }

  @classmethod
  def from_json(cls, raw: Any, names: Sequence[str]) -> StreamState:
    """A saved stream state for the datasets `names` (in any order); a `ValueError` naming the field
    that is malformed. Keys that older states lack take the value they had then."""
    try:
      check_state_header(raw, "stream state", STREAM_STATE_VERSION, ("datasets", "emitted", "tokens"))
    except ConfigError as e:
      raise ValueError(str(e)) from e
    datasets = raw["datasets"]
    if not isinstance(datasets, Mapping) or set(datasets) != set(names):
      got = sorted(datasets) if isinstance(datasets, Mapping) else datasets
      raise ValueError(f"stream state: datasets {got} do not match the config's {list(names)}")
    given = [raw["emitted"], raw["tokens"], raw.get("epoch", 0), raw.get("next_step", 0)]
    emitted, tokens, epoch, next_step = _counters(
      given, f"stream state: emitted, tokens, epoch and next_step must be ints in [0, 2**62), got {given}"
    )
    ended = raw.get("ended", False)
    if not isinstance(ended, bool):
      raise ValueError(f"stream state: ended must be true or false, got {str(ended)[:100]!r}")
    for key in ("unit", "interleave"):
      if not isinstance(raw.get(key), str):
        raise ValueError(f"stream state: mixture.{key} must be a string, got {raw.get(key)!r:.100}")
    segment = raw.get("segment")
    return cls(
      epoch=epoch,
      unit=raw["unit"],
      interleave=raw["interleave"],
      emitted=emitted,
      tokens=tokens,
      ended=ended,
      datasets=tuple((str(name), _cursor(name, entry)) for name, entry in datasets.items()),
      segment=None if segment is None else Segment.from_json(segment, len(names)),
      next_step=next_step,
      updates=MixtureUpdates.from_json(raw.get("updates", []), names),  # states before updates: none
      changes=changes_from_json(raw.get("changes")),
    )


def _cursor(name: str, entry: Any) -> CursorState:
  values = [entry.get(k) if isinstance(entry, Mapping) else None for k in ("pass", "position", "taken")]
  message = f"stream state: datasets.{name}: expected ints pass, position, taken in [0, 2**62); got {str(entry)[:200]}"
  return CursorState(*_counters(values, message))


def _counters(values: list[Any], message: str) -> list[int]:
  """The state's counters, each an int in [0, MAX_COUNTER); else a ValueError with `message`."""
  if any(not is_int(v) or not 0 <= v < MAX_COUNTER for v in values):
    raise ValueError(message)
  return [int(v) for v in values]
