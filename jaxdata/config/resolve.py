"""A dataset's settings after inheritance: `DatasetSettings` and `resolve_dataset`.

Top-level shuffle and pass settings are defaults for every dataset; a
top-level ``{dataset: value}`` dict (for ``exhausted_policy``,
``max_repeats`` and ``reshuffle_on_repeat``; ``null`` there means "no
value" for that dataset) sets them per dataset, and a dataset entry
overrides both. The pass policy comes from the most specific level that
sets one, the dataset entry or the top level (its dicts included)::

    stop_after_passes: n           repeat to hold the mixture; the stream ends once every
                                   such dataset has completed n passes (default: n = 1)
    exhausted_policy: stop         the stream ends when it cannot supply its next document
    exhausted_policy: repeat       restart on its own, forever
      + max_repeats: N             ... at most N times; the stream ends when it would exceed N

``stop_after_passes`` together with ``stop`` or ``max_repeats`` for the same
dataset at the same level is a `ConfigError` (a top-level
``stop_after_passes: 3`` with ``exhausted_policy: {web: stop}`` included).

>>> from jaxdata.config.schema import DatasetConfig
>>> top = DatasetDefaults(True, False, None, True, None, {"code": 2}, None)
>>> s = resolve_dataset(DatasetConfig("code", shuffle_block_size="auto", exhausted_policy="repeat"), top)
>>> s.policy, s.max_passes, s.block_size, s.resolve_block_size(largest_shard=100, num_records=500)
('repeat', 3, 'auto', 500)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Literal

from jaxdata.config.schema import INHERIT, BlockSize, DatasetConfig, DatasetFormat
from jaxdata.config.validate import check_open_shards
from jaxdata.errors import ConfigError

__all__ = ["DatasetDefaults", "DatasetSettings", "resolve_dataset"]

# "auto" block size: this many times the largest shard of any dataset of the mixture.
AUTO_BLOCK_SHARDS = 8
Policy = Literal["passes", "stop", "repeat"]  # a dataset's resolved exhausted policy


@dataclasses.dataclass(frozen=True)
class DatasetDefaults:
  """The top-level values a dataset entry inherits (see `PipelineConfig`)."""

  shuffle_shards: bool
  shuffle_within_shard: bool
  shuffle_block_size: BlockSize
  reshuffle_on_repeat: bool | Mapping[str, bool]
  exhausted_policy: str | Mapping[str, str] | None
  max_repeats: int | Mapping[str, int] | None
  stop_after_passes: int | None
  open_shards: int = 1


@dataclasses.dataclass(frozen=True)
class DatasetSettings:
  """A dataset's resolved settings: nothing inherited, policy decided.

  Attributes:
    policy: "passes" (stop_after_passes), "stop" or "repeat".
    max_passes: the most passes it may start (stop: 1; repeat with
      max_repeats N: N + 1); None for unlimited.
    target_passes: for "passes", the passes it must complete before the
      stream may end; None otherwise.
    block_size: None, an int, "auto" (see `resolve_block_size`) or "global".
    open_shards: shards read side by side (1: one after another).
    window: for sampling: windows, T (a sample is T + 1 tokens); None for
      document datasets.
  """

  name: str
  path: str
  shuffle_shards: bool
  shuffle_within_shard: bool
  block_size: BlockSize
  reshuffle_on_repeat: bool
  policy: Policy
  max_passes: int | None
  target_passes: int | None
  open_shards: int = 1
  format: DatasetFormat | None = None
  window: int | None = None
  with_replacement: bool = True
  cross_documents: bool = True
  holdout: int | float | None = None
  documents: tuple[int, int] | None = None

  @property
  def order_name(self) -> str:
    """The dataset's order inside a pass, in words (what `plan`, `doctor` and the `Pipeline` log say)."""
    if self.window is not None and self.with_replacement:
      return "window draws (with replacement)"
    if self.block_size == "global":
      return "global shuffle"
    if self.block_size is not None:
      return f"blocks of {self.block_size} shuffled" if self.block_size != "auto" else "auto blocks shuffled"
    inside = "shuffled within each shard" if self.shuffle_within_shard else "stored order within each shard"
    return f"{'shards shuffled' if self.shuffle_shards else 'shards in stored order'}, {inside}"

  @property
  def keeps_stored_order(self) -> bool:
    """Whether documents are read in runs of stored order (asked for by name: the default mixes)."""
    drawn = self.window is not None and self.with_replacement
    return self.block_size is None and not self.shuffle_within_shard and not drawn

  def resolve_block_size(self, largest_shard: int, num_records: int) -> int | Literal["global"] | None:
    """The block size once record counts are known: "auto" becomes 8 x the
    largest shard of any dataset of the mixture, capped at this dataset's size."""
    if self.block_size != "auto":
      return self.block_size
    return max(1, min(AUTO_BLOCK_SHARDS * largest_shard, num_records))


def _top_level(value: Any, name: str) -> Any:
  """The top-level value for dataset `name`: its dict entry, or the scalar."""
  return value.get(name) if isinstance(value, Mapping) else value


def _pass_policy(levels: list[tuple[str, Any, Any, Any]]) -> tuple[Policy, int | None, int | None]:
  """(policy, max_passes, target_passes) from (scope, exhausted_policy,
  max_repeats, stop_after_passes) levels, most specific first."""
  for scope, policy, max_repeats, passes in levels:
    if policy == "stop" and max_repeats is not None:
      raise ConfigError(f"{scope}: max_repeats has no meaning with exhausted_policy 'stop'")
    if passes is not None and (policy == "stop" or max_repeats is not None):
      other = "exhausted_policy 'stop'" if policy == "stop" else "max_repeats"
      raise ConfigError(f"{scope}: stop_after_passes cannot be combined with {other}")
  for i, (_, policy, max_repeats, passes) in enumerate(levels):
    if passes is not None:
      return "passes", None, passes
    if policy == "stop":
      return "stop", 1, None
    if policy == "repeat" or max_repeats is not None:
      # A bare "repeat" takes max_repeats from a less specific level, if any.
      inherited = next((m for _, _, m, _ in levels[i:] if m is not None), None)
      return "repeat", None if inherited is None else inherited + 1, None
  return "passes", None, 1  # nothing set: one pass of everything


def resolve_dataset(d: DatasetConfig, top: DatasetDefaults, seq_len: int = 2048) -> DatasetSettings:
  """`d`'s settings after inheriting from `top` (most specific level wins);
  a window dataset's T defaults to `seq_len`."""
  policy, max_passes, target = _pass_policy(
    [
      (f"datasets.{d.name}", d.exhausted_policy, d.max_repeats, d.stop_after_passes),
      (
        f"top level, for dataset {d.name}",
        _top_level(top.exhausted_policy, d.name),
        _top_level(top.max_repeats, d.name),
        top.stop_after_passes,
      ),
    ]
  )
  reshuffle = next(
    (v for v in (d.reshuffle_on_repeat, _top_level(top.reshuffle_on_repeat, d.name)) if v is not None), True
  )
  open_shards = top.open_shards if d.open_shards is None else d.open_shards
  block_size = top.shuffle_block_size if d.shuffle_block_size is INHERIT else d.shuffle_block_size
  if open_shards > 1 and block_size == "global" and d.shuffle_block_size is INHERIT:
    block_size = "auto"  # the streaming order reads k shards at a time: the inherited global shuffle becomes blocks
  check_open_shards(open_shards, block_size, f"datasets.{d.name}: ")
  return DatasetSettings(
    name=d.name,
    path=d.path,
    shuffle_shards=top.shuffle_shards if d.shuffle_shards is None else d.shuffle_shards,
    shuffle_within_shard=(top.shuffle_within_shard if d.shuffle_within_shard is None else d.shuffle_within_shard),
    block_size=block_size,
    reshuffle_on_repeat=reshuffle,
    policy=policy,
    max_passes=max_passes,
    target_passes=target,
    open_shards=open_shards,
    format=d.format,
    window=(d.window or seq_len) if d.sampling == "windows" else None,
    with_replacement=d.with_replacement,
    cross_documents=d.cross_documents,
    holdout=d.holdout,
    documents=d.documents,
  )
