"""`ShardLanes`: k shards read side by side (`open_shards: k`, the streaming order).

Shards, in the pass's shard order, are dealt to k lanes the way a reader
with k open shards would take them: each lane reads its shard from start to
end, and the lane whose shard ends first opens the next shard of the order
(ties: the lowest lane). Position i of the pass then reads round
i // (lanes still reading) of the lanes in turn::

    shard order   A(3) B(2) C(4) D(1) E(2)          k = 2
    lane 0        A A A D E E                       (A ends at round 3, takes D; D ends at 4, takes E)
    lane 1        B B C C C C                       (B ends at round 2, takes C)
    positions     A B A B A C D C E C E C
                  round 0 | 1  | 2  | 3  | 4  | 5

Every window of k consecutive positions (while all lanes read) holds one
record from each open shard; a block shuffle of B positions on top keeps
that mix inside every aligned block of B. A pass is still a bijection from
position to record, computed per position from S + k numbers (the lanes'
schedule): O(1) resume, nothing in the state, no record data read.

>>> lanes = ShardLanes(np.array([3, 2, 4, 1, 2]), 2)
>>> shard, offset = lanes.locate(np.arange(12))
>>> "".join("ABCDE"[s] for s in shard)
'ABABACDCECEC'
>>> offset.tolist()
[0, 0, 1, 1, 2, 0, 0, 1, 0, 2, 1, 3]
"""

from __future__ import annotations

import heapq

import numpy as np

__all__ = ["ShardLanes"]


class ShardLanes:
  """The lanes' schedule for one pass.

  Args:
    counts: records of each slot of the pass's shard order.
    lanes: k, the shards read at a time (more than the non-empty shards is
      as many as there are).
  """

  def __init__(self, counts: np.ndarray, lanes: int) -> None:
    counts = np.asarray(counts, np.int64)
    slots = np.flatnonzero(counts > 0)  # empty shards take no time in a lane
    k = max(1, min(lanes, slots.size))
    lane_of = np.empty(slots.size, np.int64)
    start = np.empty(slots.size, np.int64)
    # (round at which the lane's current shard ends, lane): the smallest opens the next shard.
    ends: list[tuple[int, int]] = []
    for i, slot in enumerate(slots.tolist()):
      if i < k:
        lane, begin = i, 0
      else:
        begin, lane = heapq.heappop(ends)
      lane_of[i], start[i] = lane, begin
      heapq.heappush(ends, (begin + int(counts[slot]), lane))
    length = np.zeros(k, np.int64)
    for end, lane in ends:
      length[lane] = end
    self.total = int(counts.sum())
    # Shards sorted by (lane, start round): a lane's shards are one run.
    by_lane = np.lexsort((start, lane_of))
    self.slot, self.start, self.count = slots[by_lane], start[by_lane], counts[slots][by_lane]
    self.key = lane_of[by_lane] * (self.total + 1) + self.start
    # Rounds run the lanes still reading, longest lanes first (then lowest):
    # segment j spans rounds [bounds[j], bounds[j+1]) with active[j] lanes.
    self.rank = np.lexsort((np.arange(k), -length))  # lane at each turn of a round
    bounds = np.concatenate([[0], np.sort(length)])
    self.round_start = bounds[:-1]
    self.active = k - np.arange(k)
    self.position_start = np.concatenate([[0], np.cumsum(self.active * np.diff(bounds))])[:-1]

  def locate(self, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(slot in the shard order, record offset in that shard) of each position."""
    positions = np.asarray(positions, np.int64)
    # The last segment holding each position (empty segments share their start with the next one).
    segment = np.searchsorted(self.position_start, positions, side="right") - 1
    within = positions - self.position_start[segment]
    active = self.active[segment]
    round_index = self.round_start[segment] + within // active
    lane = self.rank[within % active]
    shard = np.searchsorted(self.key, lane * (self.total + 1) + round_index, side="right") - 1
    return self.slot[shard], round_index - self.start[shard]
