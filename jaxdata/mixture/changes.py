"""`ConfigChange`: a change of config at a restore, one entry of the stream's history.

The order is a pure function of (config, seed, step, the mixture updates
and the config changes with their steps). A restore with `reconfigure=True`
at step S adds one entry: the steps before S were the old config's, those
from S the new one's::

    step        0 ............ 40,000 ................ 70,000 ...........
    config      A              B (added "math")        C (removed "web", rows 4096)
    changes     []             [change@40000]          [change@40000, change@70000]

An entry keeps what a later reader needs of the config it left (the old
fingerprint's digest, which datasets came, went or were replaced, what of
the rows changed, the carried tokens dropped), never the data. The state
holds every entry (a few hundred bytes each); `jaxdata plan --state` and
`jaxdata report` show them.

>>> change = ConfigChange(40000, "9f2c1a", added=("math",))
>>> ConfigChange.from_json(change.to_json()) == change, change.summary()
(True, 'step 40000: added math')
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from jaxdata.config.validate import is_int

__all__ = ["ConfigChange", "changes_from_json"]


@dataclasses.dataclass(frozen=True)
class ConfigChange:
  """The config changed at `step` (its first step under the new config).

  Attributes:
    step: the first step of the new config.
    before: the old fingerprint's digest (16 hex digits).
    added: datasets that started at pass 0.
    removed: datasets that stopped.
    replaced: datasets whose content changed under the same name (`replaced: true`): started at pass 0.
    rows: what of the rows changed ("packing: ... -> ...", "global_batch_size: ... -> ..."), if anything.
    dropped_tokens: tokens of removed or replaced datasets that waited in the packer's carry.
  """

  step: int
  before: str
  added: tuple[str, ...] = ()
  removed: tuple[str, ...] = ()
  replaced: tuple[str, ...] = ()
  rows: tuple[str, ...] = ()
  dropped_tokens: int = 0

  def to_json(self) -> dict[str, Any]:
    out: dict[str, Any] = {"step": self.step, "before": self.before}
    for field in ("added", "removed", "replaced", "rows"):
      if getattr(self, field):
        out[field] = list(getattr(self, field))
    if self.dropped_tokens:
      out["dropped_tokens"] = self.dropped_tokens
    return out

  @classmethod
  def from_json(cls, raw: Any) -> ConfigChange:
    if not isinstance(raw, Mapping) or not is_int(raw.get("step")) or not isinstance(raw.get("before"), str):
      raise ValueError(f"stream state: a config change must hold an int step and a before digest, got {raw!r:.200}")
    lists = {}
    for field in ("added", "removed", "replaced", "rows"):
      value = raw.get(field, [])
      if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"stream state: config change {field} must be a list of strings, got {value!r:.200}")
      lists[field] = tuple(value)
    dropped = raw.get("dropped_tokens", 0)
    if not is_int(dropped) or dropped < 0:
      raise ValueError(f"stream state: config change dropped_tokens must be an int >= 0, got {dropped!r}")
    return cls(raw["step"], raw["before"], dropped_tokens=dropped, **lists)

  def summary(self) -> str:
    """One line: what changed at the step."""
    parts = [
      f"{what} {', '.join(names)}"
      for what, names in (("added", self.added), ("removed", self.removed), ("replaced", self.replaced))
      if names
    ]
    parts += list(self.rows)
    if self.dropped_tokens:
      parts.append(f"{self.dropped_tokens:,} carried tokens of removed data dropped")
    return f"step {self.step}: {'; '.join(parts) or 'weights or policies only'}"


def changes_from_json(raw: Any) -> tuple[ConfigChange, ...]:
  """A state's history (absent: none), in step order."""
  if raw is None:
    return ()
  if not isinstance(raw, Sequence) or isinstance(raw, str):
    raise ValueError(f"stream state: changes must be a list, got {raw!r:.200}")
  changes = tuple(ConfigChange.from_json(r) for r in raw)
  if any(b.step < a.step for a, b in zip(changes, changes[1:])):
    raise ValueError("stream state: config changes must be in step order")
  return changes
