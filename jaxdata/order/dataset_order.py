"""Per-dataset order: for pass p, a bijection from position to record.

Four levels, applied in this order (docs/order.md)::

    records of shards 0..S-1 in manifest order
      1. shuffle_shards        permute the order of the shards          (S values, stored)
      2. shuffle_within_shard  permute records inside each shard        (keyed bijection per shard)
         -> base sequence: position j -> record (shards one after another,
            or with open_shards k, k at a time side by side: streaming.py)
      3. block size B          position i reads base[B*(i//B) + f_b(i % B)]   (keyed, per block b)
         or "global"           position i reads base[g(i)]                    (keyed, whole dataset)
      4. reshuffle_on_repeat   pass p > 0 uses keys of pass p (on) or of pass 0 (off)
      5. epoch e               every pass is shifted by e: pass p uses the keys of pass e + p (or of e)

Every key is `derive_key(seed, dataset, pass, level)`. Nothing of dataset
size is ever built, so `records()` on a dataset of 10**12 records costs
memory proportional to the positions asked for.

>>> order = DatasetOrder("web", [4, 4, 2], ShuffleOptions(block_size="global"), seed=0)
>>> sorted(order.records(0, np.arange(10)).tolist()) == list(range(10))
True
"""

from __future__ import annotations

import dataclasses
import weakref
from collections.abc import Sequence
from typing import Literal

import numpy as np

from jaxdata.config.validate import check_open_shards, is_int
from jaxdata.order.feistel import derive_key
from jaxdata.order.permutation import (
  CACHED_MIN,
  EXACT_MAX,
  forget_permutations,
  permute,
  release_permutations,
  reserve_permutations,
)
from jaxdata.order.streaming import ShardLanes

__all__ = ["DatasetOrder", "ShuffleOptions"]


@dataclasses.dataclass(frozen=True)
class ShuffleOptions:
  """Resolved shuffle settings of one dataset (no inheritance, no "auto").

  Attributes:
    shuffle_shards: permute the shard order.
    shuffle_within_shard: permute the records inside each shard.
    block_size: None (no further shuffle), an int B (permute inside
      consecutive blocks of B positions), or "global" (one permutation).
    reshuffle_on_repeat: pass p > 0 gets a fresh order; off, every pass
      repeats pass 0's order.
    open_shards: k > 1 reads k shards side by side (`ShardLanes`) instead
      of one after another; the block shuffle then mixes them.
  """

  shuffle_shards: bool = True
  shuffle_within_shard: bool = False
  block_size: int | Literal["global"] | None = None
  reshuffle_on_repeat: bool = True
  open_shards: int = 1

  def __post_init__(self) -> None:
    check_open_shards(self.open_shards, self.block_size, "")
    block = self.block_size
    if block is not None and block != "global":
      if not is_int(block) or block < 1:
        raise ValueError(f"shuffle_block_size: expected None, a positive int or 'global', got {block!r}")


class DatasetOrder:
  """Maps (pass, positions) to global record indices of one dataset."""

  def __init__(
    self,
    name: str,
    shard_counts: Sequence[int] | np.ndarray,
    options: ShuffleOptions,
    seed: int,
    epoch: int = 0,
  ) -> None:
    if not is_int(epoch) or epoch < 0:
      raise ValueError(f"epoch: expected an int >= 0, got {epoch!r}")
    self.epoch = epoch
    counts = np.asarray(shard_counts, dtype=np.int64)
    if counts.ndim != 1 or counts.size == 0 or (counts < 0).any():
      raise ValueError(f"{name}: shard record counts must be a non-empty list of counts >= 0")
    self.name = name
    self.options = options
    self.seed = seed
    self.shard_counts = counts
    self.shard_starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    self.num_records = int(counts.sum())
    if self.num_records == 0:
      raise ValueError(f"{name}: the dataset has no records")
    self._shard_orders: dict[int, np.ndarray] = {}
    self._lane_schedules: dict[int, ShardLanes] = {}
    self._newest_key_pass = -1  # the cached permutations of passes two behind it are freed
    self._cached_levels = self._levels_in_cache()
    if "global" in self._cached_levels and self.num_records <= EXACT_MAX:  # looked up every step: kept
      reserve_permutations(self.num_records)
      weakref.finalize(self, release_permutations, self.num_records)

  def key_pass(self, pass_index: int) -> int:
    """The pass whose keys pass `pass_index` uses (epoch e starts at the keys of pass e)."""
    return self.epoch + (pass_index if self.options.reshuffle_on_repeat else 0)

  def records(self, pass_index: int, positions: np.ndarray) -> np.ndarray:
    """Global record index (shards in manifest order) at each position."""
    if pass_index < 0:
      raise ValueError(f"{self.name}: pass_index must be >= 0, got {pass_index}")
    positions = np.asarray(positions, dtype=np.int64)
    if positions.size and (positions.min() < 0 or positions.max() >= self.num_records):
      raise ValueError(
        f"{self.name}: positions must lie in [0, {self.num_records}), got {positions.min()}..{positions.max()}"
      )
    key_pass = self.key_pass(pass_index)
    if key_pass > self._newest_key_pass:
      self._moved_to(key_pass)
    return self._base(key_pass, self._outer(key_pass, positions))

  def _moved_to(self, key_pass: int) -> None:
    """The stream reached `key_pass`: it straddles at most it and the pass before, so the cached
    permutations of older passes are freed (a long run's memory stays flat; a rewind recomputes them)."""
    older = {k for k in (self._newest_key_pass - 1, self._newest_key_pass) if 0 <= k < key_pass - 1}
    self._newest_key_pass = key_pass
    if older and self._cached_levels:
      forget_permutations({derive_key(self.seed, self.name, k, level) for k in older for level in self._cached_levels})

  def _levels_in_cache(self) -> tuple[str, ...]:
    """The levels whose permutations can be large enough to be cached (CACHED_MIN entries or more)."""
    block, largest_shard = self.options.block_size, int(self.shard_counts.max())
    levels = []
    if block == "global" and self.num_records >= CACHED_MIN:
      levels.append("global")
    elif block is not None and block != "global" and min(block, self.num_records) >= CACHED_MIN:
      levels.append("block")
    if self.options.shuffle_within_shard and largest_shard >= CACHED_MIN:
      levels.append("within")
    if self.options.shuffle_shards and self.shard_counts.size >= CACHED_MIN:
      levels.append("shards")
    return tuple(levels)

  def _outer(self, key_pass: int, positions: np.ndarray) -> np.ndarray:
    """Level 3: block or global shuffle of positions (identity when off)."""
    block = self.options.block_size
    total = self.num_records
    if block is None:
      return positions
    if block == "global" or block >= total:
      key = derive_key(self.seed, self.name, key_pass, "global" if block == "global" else "block")
      return permute(positions, total, key)
    block_index = positions // block
    block_start = block_index * block
    block_len = np.minimum(block, total - block_start)
    key = derive_key(self.seed, self.name, key_pass, "block")
    return block_start + permute(positions - block_start, block_len, key, tweak=block_index)

  def _base(self, key_pass: int, positions: np.ndarray) -> np.ndarray:
    """Levels 1-2: position in the (shuffled) shard sequence -> record."""
    shard_order = self._shard_order(key_pass)
    if self.options.open_shards > 1:
      slot, offset = self._lanes(key_pass).locate(positions)
    else:
      ordered_counts = self.shard_counts[shard_order]
      ends = np.cumsum(ordered_counts)
      slot = np.searchsorted(ends, positions, side="right")
      offset = positions - (ends[slot] - ordered_counts[slot])
    shard = shard_order[slot]
    if self.options.shuffle_within_shard:
      key = derive_key(self.seed, self.name, key_pass, "within")
      offset = permute(offset, self.shard_counts[shard], key, tweak=shard)
    return self.shard_starts[shard] + offset

  def _lanes(self, key_pass: int) -> ShardLanes:
    """The pass's open_shards schedule (S + k values, cached with the shard order)."""
    if key_pass not in self._lane_schedules:
      if len(self._lane_schedules) >= 2:
        self._lane_schedules.pop(next(iter(self._lane_schedules)))
      counts = self.shard_counts[self._shard_order(key_pass)]
      self._lane_schedules[key_pass] = ShardLanes(counts, self.options.open_shards)
    return self._lane_schedules[key_pass]

  def _shard_order(self, key_pass: int) -> np.ndarray:
    """Shard at each slot of the pass's shard sequence (S values, cached)."""
    if key_pass not in self._shard_orders:
      count = self.shard_counts.size
      if not self.options.shuffle_shards or count == 1:
        order = np.arange(count)
      else:
        key = derive_key(self.seed, self.name, key_pass, "shards")
        order = permute(np.arange(count), count, key)
      if len(self._shard_orders) >= 2:  # the stream only straddles two passes
        self._shard_orders.pop(next(iter(self._shard_orders)))
      self._shard_orders[key_pass] = order
    return self._shard_orders[key_pass]
