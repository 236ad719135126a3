"""`SampledOrder`: draws with replacement, a pure function of (seed, dataset, draw index).

For window datasets sampled with replacement . Draw i of the
dataset is uniform over its N records (all eligible window starts, so a
shard comes up in proportion to its L - T starts)::

    draw index  c = (epoch + pass) * P + position     (P = U // T draws make a "pass")
    record      floor(uniform(key, c) * N)       key = derive_key(seed, dataset, "draws")

No generator state: resume and elastic restore only need the cursor.

>>> order = SampledOrder("web", num_choices=10, pass_records=4, seed=0)
>>> draws = order.records(1, np.arange(4))
>>> bool(((draws >= 0) & (draws < 10)).all()), bool(order.records(1, np.array([2]))[0] == draws[2])
(True, True)
"""

from __future__ import annotations

import numpy as np

from jaxdata.order.feistel import derive_key, uniform

__all__ = ["SampledOrder"]


class SampledOrder:
  """The `DatasetOrder` interface for with-replacement draws."""

  def __init__(self, name: str, num_choices: int, pass_records: int, seed: int, epoch: int = 0) -> None:
    if num_choices < 1 or pass_records < 1:
      raise ValueError(f"{name}: draws need num_choices >= 1 and pass_records >= 1, got {num_choices}, {pass_records}")
    if num_choices >= 1 << 52:
      raise ValueError(f"{name}: {num_choices} choices; draws support fewer than 2^52")
    self.name, self.seed = name, seed
    self.num_choices = int(num_choices)
    self.num_records = int(pass_records)  # positions per pass, as the cursor counts them
    self.key = derive_key(seed, name, "draws")
    self.epoch = epoch  # epoch e starts at the draws of pass e

  def describe(self) -> str:
    return "draws=uniform"

  def records(self, pass_index: int, positions: np.ndarray) -> np.ndarray:
    """The record of each draw (pass, position)."""
    positions = np.asarray(positions, dtype=np.int64)
    if pass_index < 0 or (positions.size and (positions.min() < 0 or positions.max() >= self.num_records)):
      raise ValueError(f"{self.name}: draws need pass >= 0 and positions in [0, {self.num_records})")
    draws = uniform(self.key, (self.epoch + pass_index) * self.num_records + positions)
    # u < 1 and N < 2^52 keep floor(u N) <= N - 1; the clip only guards the rounding argument.
    return np.minimum((draws * self.num_choices).astype(np.int64), self.num_choices - 1)
