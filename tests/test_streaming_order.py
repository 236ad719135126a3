"""`open_shards: k` (the streaming order): k shards read side by side, mixed by the block shuffle."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from jaxdata import CheckpointError, ConfigError, Pipeline, PipelineConfig
from jaxdata.order import DatasetOrder, ShuffleOptions
from jaxdata.order.streaming import ShardLanes
from jaxdata.tools.cache_plan import cache_needs, lru_fetched, thrash_threshold
from null_statistics import chi_square_quantile
from pipeline_fixtures import coded_config, write_coded_dataset

shard_counts = st.lists(st.integers(0, 60), min_size=1, max_size=12).filter(lambda c: sum(c) > 0)


@given(
  counts=shard_counts,
  lanes=st.integers(1, 9),
  block=st.one_of(st.none(), st.integers(1, 50)),
  within=st.booleans(),
  shuffle_shards=st.booleans(),
  pass_index=st.integers(0, 3),
  seed=st.integers(0, 2**32),
)
def test_every_streaming_order_is_a_permutation_and_random_access_equals_sequential(
  counts, lanes, block, within, shuffle_shards, pass_index, seed
):
  order = DatasetOrder("d", counts, ShuffleOptions(shuffle_shards, within, block, True, lanes), seed)
  total = sum(counts)
  records = order.records(pass_index, np.arange(total))
  assert sorted(records.tolist()) == list(range(total))
  picks = np.random.default_rng(seed % 1000).integers(0, total, 17)
  assert order.records(pass_index, picks).tolist() == records[picks].tolist()


@given(counts=shard_counts, lanes=st.integers(1, 9))
def test_each_shard_is_read_front_to_back_with_at_most_k_open_at_once(counts, lanes):
  order = DatasetOrder("d", counts, ShuffleOptions(shuffle_shards=False, open_shards=lanes), seed=0)
  records = order.records(0, np.arange(sum(counts)))
  starts = np.concatenate([[0], np.cumsum(counts)])
  shard = np.searchsorted(starts, records, side="right") - 1
  for s in np.unique(shard):  # in record order, without within-shard shuffle
    assert records[shard == s].tolist() == list(range(starts[s], starts[s + 1]))
  first = {s: int(np.flatnonzero(shard == s)[0]) for s in np.unique(shard)}
  last = {s: int(np.flatnonzero(shard == s)[-1]) for s in np.unique(shard)}
  opened = np.zeros(records.size + 1, np.int64)  # shards begun and not finished at each position
  for s in first:
    opened[first[s]] += 1
    opened[last[s] + 1] -= 1
  assert np.cumsum(opened).max() <= lanes
  # A finished shard is replaced by the next in the shard order: shards open (the
  # round at which their lane starts them) in that order; the first k at round 0.
  schedule = ShardLanes(np.array(counts), lanes)
  opens = schedule.start[np.argsort(schedule.slot)]
  assert (np.diff(opens) >= 0).all() and (opens[:lanes] == 0).all()


def test_the_docstring_schedule_deals_shards_to_the_lane_that_frees_first():
  shard, offset = ShardLanes(np.array([3, 2, 4, 1, 2]), 2).locate(np.arange(12))
  assert "".join("ABCDE"[s] for s in shard) == "ABABACDCECEC"
  assert offset.tolist() == [0, 0, 1, 1, 2, 0, 0, 1, 0, 2, 1, 3]
  # Uneven lanes: once a lane runs dry, the others go on in turn.
  shard, _ = ShardLanes(np.array([2, 6, 0, 1]), 3).locate(np.arange(9))
  assert shard.tolist() == [1, 0, 3, 1, 0, 1, 1, 1, 1]


K, BLOCK, SHARDS, RECORDS = 4, 40, 64, 100


def lane_blocks(pass_index: int, block_size: int | None = BLOCK) -> np.ndarray:
  """[blocks, BLOCK] shard of each position of one pass."""
  order = DatasetOrder("d", [RECORDS] * SHARDS, ShuffleOptions(block_size=block_size, open_shards=K), seed=5)
  records = order.records(pass_index, np.arange(SHARDS * RECORDS))
  return (records // RECORDS).reshape(-1, BLOCK)


def test_every_block_draws_equally_from_the_k_open_shards():
  for pass_index in range(3):
    for block in lane_blocks(pass_index):
      # Equal shards: the lanes switch shards together, every RECORDS rounds; a
      # block of 40 positions spans 10 rounds, so it never straddles a switch.
      counts = np.unique(block, return_counts=True)[1]
      assert counts.tolist() == [BLOCK // K] * K


def test_the_block_shuffle_places_the_open_shards_like_a_uniform_permutation():
  """Each block holds 10 records of each of 4 open shards; under a uniform
  shuffle of the block, the shard at any given place is uniform over the 4.
  Chi-square over (place, shard label) with 40 x 3 = 120 degrees of freedom
  (the fixed 10-per-shard totals only shrink the statistic); bound: the
  quantile at z = 4.75 (p ~ 1e-6, about 209). The lanes without the block
  shuffle (turns in a fixed order) score about 2,000."""
  bound = chi_square_quantile(BLOCK * (K - 1), 4.75)
  assert place_statistic(np.concatenate([lane_blocks(p) for p in range(5)])) < bound  # 800 blocks
  assert place_statistic(np.concatenate([lane_blocks(p, None) for p in range(5)])) > bound  # the lanes alone


def place_statistic(blocks: np.ndarray) -> float:
  """Chi-square of (place in block, label of the record's shard among the 4 of its block)."""
  labels = np.stack([np.searchsorted(np.unique(b), b) for b in blocks])
  table = np.stack([np.bincount(labels[:, place], minlength=K) for place in range(BLOCK)])
  expected = blocks.shape[0] / K
  return float(((table - expected) ** 2 / expected).sum())


def test_open_shards_is_configured_per_dataset_or_at_the_top_and_checked(tmp_path):
  raw = coded_config(tmp_path, [list(range(1, 60)), list(range(1, 40))], shuffle_block_size=16, open_shards=3).to_dict()
  raw["datasets"][1]["open_shards"] = 1
  cfg = PipelineConfig.from_dict(raw)
  assert [s.open_shards for s in cfg.dataset_settings()] == [3, 1]
  with pytest.raises(ConfigError, match="open_shards: expected an int >= 1, got 0"):
    coded_config(tmp_path / "b", [[1, 2]], open_shards=0)
  raw = coded_config(tmp_path / "c", [[1, 2]], open_shards=2).to_dict()
  raw["datasets"][0]["shuffle_block_size"] = "global"  # the dataset's own: refused
  with pytest.raises(ConfigError, match=r"datasets\.d0: open_shards: 2 .* 'global'"):
    PipelineConfig.from_dict(raw)
  # inherited (the top-level default, global): the streaming order reads auto blocks
  (settings,) = coded_config(tmp_path / "d", [[1, 2]], open_shards=2).dataset_settings()
  assert settings.block_size == "auto"


def test_a_checkpoint_does_not_restore_under_another_open_shards(tmp_path):
  lengths = [np.random.default_rng(1).integers(1, 30, 200).tolist()]
  with Pipeline(coded_config(tmp_path / "a", lengths, shuffle_block_size=8, open_shards=4), prefetch=0) as pipe:
    next(pipe)
    state = json.loads(json.dumps(pipe.get_state()))
  with Pipeline(coded_config(tmp_path / "b", lengths, shuffle_block_size=8), prefetch=0) as other:
    with pytest.raises(CheckpointError, match="open=4"):
      other.set_state(state)


@pytest.mark.parametrize("lanes", [2, 4])
def test_a_read_span_touches_about_k_shards_of_each_dataset(tmp_path, lanes):
  """`jaxdata plan`'s read-span measurement. Shards hold about 42 documents
  (3,360 bytes of ids of mean length 20); a 1,024-token window takes about 26
  documents of each dataset, which with blocks of 16 spans at most
  (26 + 2 x 16) / k + 1 < 42 rounds of each lane: every lane touches at most
  2 shards, a window at most 2k. A global shuffle touches half the shards."""
  rng = np.random.default_rng(3)
  for d in range(2):
    write_coded_dataset(str(tmp_path / f"d{d}"), d, rng.integers(1, 40, 1600).tolist(), shard_bytes=40 * 21 * 4)

  def needs(**order):
    cfg = PipelineConfig.from_dict(
      {
        "datasets": [{"name": f"d{d}", "path": str(tmp_path / f"d{d}")} for d in range(2)],
        "mixture": {"weights": {"d0": 1, "d1": 1}},
        "exhausted_policy": "repeat",
        **order,
        "packing": {"mode": "first_fit", "seq_len": 32},
        "batch": {"global_batch_size": 8},
      }
    )
    return cache_needs(cfg, hosts=1, spans=10, read_ahead_tokens=1024)

  streaming, scattered = needs(open_shards=lanes, shuffle_block_size=16), needs(shuffle_block_size="global")
  # Replayed through the LRU cache: the streaming order needs a fraction of what the global one does.
  assert streaming.thrash_bytes * 3 < scattered.thrash_bytes
  for near, far in zip(streaming.datasets, scattered.datasets):
    assert near.shards >= 38 and lanes <= near.max_shards <= 2 * lanes
    assert far.mean_shards >= 3 * near.mean_shards


def test_the_cache_replay_is_least_recently_used_with_whole_windows_held():
  a, b, c = (0, 0), (0, 1), (1, 0)
  windows = [{a: 4, b: 4}, {c: 4}, {a: 4}, {b: 4}, {c: 4}]
  assert lru_fetched(windows, 12) == 12  # everything fits: each shard once
  assert lru_fetched(windows, 8) == 24  # c evicts a, a evicts b, b evicts c, c evicts a: five fetches after the first
  assert lru_fetched(windows, 1) == 24  # a window's shards are all held, whatever the capacity
  assert thrash_threshold(windows) == 12
