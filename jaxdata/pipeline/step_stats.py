"""`StepStats`: one step's statistics as a typed record (docs/state.md lists the fields).

The pipeline makes one when it plans a step and writes it, as JSON, to the
stats file when the step is handed out; `jaxdata doctor` and `jaxdata
report` read the file back with `from_json`. The JSON is the record's
fields by name (a `mixture_update` only at a step an update takes effect, a
`config_change` only at the first step of a config a restore changed to,
`trained_tokens_per_source` only for datasets with trained-token masks).
A file written before a field existed still reads: the field takes its
default.

>>> record = StepStats.from_json({"step": 3, "tokens_per_source": {"web": 60}, "target_share": {"web": 1.0},
...                               "share_batch": {"web": 1.0}, "padding_fraction": 0.06})
>>> record.step, record.documents_per_source, record.to_json()["padding_fraction"]
(3, {}, 0.06)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["REQUIRED", "StepStats", "trained_totals"]

REQUIRED = (
  "step",
  "tokens_per_source",
  "target_share",
  "share_batch",
  "padding_fraction",
)  # in every file ever written


@dataclasses.dataclass(frozen=True)
class StepStats:
  """One step's statistics (frozen; its `time_s` timers are filled in as the step is made)."""

  step: int
  rows: int = 0
  seq_len: int = 0
  tokens_per_source: dict[str, int] = dataclasses.field(default_factory=dict)
  share_batch: dict[str, float] = dataclasses.field(default_factory=dict)
  share_cumulative: dict[str, float] = dataclasses.field(default_factory=dict)
  target_share: dict[str, float] = dataclasses.field(default_factory=dict)
  mixture_update: dict[str, float] | None = None  # the weights of an update that takes effect at this step
  unit: str = "tokens"
  documents_per_source: dict[str, int] = dataclasses.field(default_factory=dict)
  shards: dict[str, list[int]] = dataclasses.field(default_factory=dict)  # the first few shards read per source
  shard_count: dict[str, int] = dataclasses.field(default_factory=dict)
  padding_fraction: float = 0.0
  longest_row: int = 0
  padding_fraction_to_longest: float = 0.0
  pieces_split: int = 0
  truncated_tokens: int = 0
  dropped_documents: int = 0
  final: bool = False
  passes: dict[str, int] = dataclasses.field(default_factory=dict)
  time_s: dict[str, float] = dataclasses.field(default_factory=dict)
  trained_tokens_per_source: dict[str, int] | None = None  # datasets with trained-token masks only
  config_change: dict[str, Any] | None = None  # at the first step of a config a restore changed to (ConfigChange)
  images_per_source: dict[str, int] | None = None  # packing.images only: the step's images per source
  patch_fill: float | None = None  # packing.images only: the step's patches / its rows' patch slots

  def to_json(self) -> dict[str, Any]:
    """A copy as plain JSON-able data (its dicts and the lists inside `shards` copied: a loop that
    calls `Pipeline.stats()` every step pays microseconds, not `dataclasses.asdict`'s deep copy)."""
    out: dict[str, Any] = {}
    for name in _FIELD_NAMES:
      value = getattr(self, name)
      if isinstance(value, dict):
        value = {k: list(v) if isinstance(v, list) else v for k, v in value.items()}
      elif value is None and name in _OPTIONAL:
        continue
      out[name] = value
    return out

  @classmethod
  def from_json(cls, raw: Mapping[str, Any]) -> StepStats:
    """A record as the stats file holds it; a missing required field is a `KeyError` naming it (keys
    jaxdata does not know, from a later version, are ignored)."""
    missing = [key for key in REQUIRED if key not in raw]
    if missing:
      raise KeyError(missing[0])
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in raw.items() if k in names})


_FIELD_NAMES = tuple(f.name for f in dataclasses.fields(StepStats))
# left out of the record where None
_OPTIONAL = ("mixture_update", "trained_tokens_per_source", "config_change", "images_per_source", "patch_fill")


def trained_totals(records: Sequence[StepStats], names: Sequence[str]) -> dict[str, int]:
  """Per source, the tokens that trained over `records` (a pipeline with trained-token masks), or {}."""
  counts = [r.trained_tokens_per_source for r in records]
  if not counts or any(c is None for c in counts):
    return {}
  return {n: sum(int(c.get(n, 0)) for c in counts if c is not None) for n in names}
