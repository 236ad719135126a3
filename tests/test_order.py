"""Per-dataset order: bijections at every shuffle level, keys by hashing, shuffle quality."""

from __future__ import annotations

import gc
import tracemalloc

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from jaxdata import PipelineConfig
from jaxdata.config import DatasetSettings
from jaxdata.mixture import DatasetMeta, DocumentStream
from jaxdata.order import DatasetOrder, ShuffleOptions, permutation
from jaxdata.order.feistel import derive_key
from jaxdata.order.permutation import permute
from jaxdata.pipeline.planner import StepPlanner
from pipeline_fixtures import coded_config

PRIMES = [2, 3, 5, 7, 11, 13, 17, 31, 61, 127]
shard_counts = st.lists(st.one_of(st.integers(0, 40), st.sampled_from(PRIMES)), min_size=1, max_size=6).filter(
  lambda c: sum(c) > 0
)
block_sizes = st.one_of(st.none(), st.just("global"), st.integers(1, 90), st.sampled_from(PRIMES))


@given(
  counts=shard_counts,
  shuffle_shards=st.booleans(),
  within=st.booleans(),
  block=block_sizes,
  reshuffle=st.booleans(),
  pass_index=st.integers(0, 3),
  seed=st.integers(0, 2**32),
)
def test_every_order_is_a_permutation(counts, shuffle_shards, within, block, reshuffle, pass_index, seed):
  order = DatasetOrder("d", counts, ShuffleOptions(shuffle_shards, within, block, reshuffle), seed)
  records = order.records(pass_index, np.arange(sum(counts)))
  assert sorted(records.tolist()) == list(range(sum(counts)))


@given(n=st.one_of(st.integers(1, 3000), st.sampled_from(PRIMES)), key=st.integers(0, 2**64 - 1))
def test_keyed_bijection_on_any_domain(n, key):
  assert sorted(permute(np.arange(n), n, key).tolist()) == list(range(n))


def test_unshuffled_order_is_manifest_order():
  order = DatasetOrder("d", [3, 0, 4], ShuffleOptions(shuffle_shards=False), seed=1)
  assert order.records(0, np.arange(7)).tolist() == list(range(7))


def test_shard_shuffle_keeps_shards_contiguous_and_within_shard_keeps_membership():
  counts = [5, 7, 3, 9]
  starts = np.cumsum([0] + counts[:-1])
  shard_of = np.repeat(np.arange(4), counts)
  order = DatasetOrder("d", counts, ShuffleOptions(True, False), seed=3)
  records = order.records(0, np.arange(24))
  shards = shard_of[records]
  assert (np.diff(shards) != 0).sum() == 3  # four runs: one per shard
  for s in range(4):  # without within-shard shuffle a shard is read in order
    assert records[shards == s].tolist() == list(range(starts[s], starts[s] + counts[s]))
  within = DatasetOrder("d", counts, ShuffleOptions(True, True), seed=3).records(0, np.arange(24))
  assert shard_of[within].tolist() == shards.tolist()  # same shard sequence, reordered inside
  assert within.tolist() != records.tolist()


@given(counts=shard_counts, block=st.integers(1, 50), seed=st.integers(0, 1000), shuffled=st.booleans())
def test_block_shuffle_keeps_every_record_inside_its_block(counts, block, seed, shuffled):
  total = sum(counts)
  base = DatasetOrder("d", counts, ShuffleOptions(shuffled, shuffled, None), seed).records(0, np.arange(total))
  blocked = DatasetOrder("d", counts, ShuffleOptions(shuffled, shuffled, block), seed).records(0, np.arange(total))
  for start in range(0, total, block):
    assert sorted(blocked[start : start + block].tolist()) == sorted(base[start : start + block].tolist())


def test_auto_block_size_is_eight_largest_shards_capped_at_dataset_size():
  settings = DatasetSettings("a", "", True, False, "auto", True, "passes", None, 1)
  assert settings.resolve_block_size(largest_shard=20, num_records=1000) == 8 * 20
  assert settings.resolve_block_size(largest_shard=20, num_records=30) == 30  # capped
  # The stream resolves "auto" with the largest shard of any dataset of the mixture.
  cfg = PipelineConfig.from_dict(
    {"datasets": [{"name": "a"}, {"name": "b"}], "mixture": {"weights": {"a": 1, "b": 1}}, "shuffle_block_size": "auto"}
  )
  metas = {
    "a": DatasetMeta.from_lengths(np.ones(30), [10, 20]),
    "b": DatasetMeta.from_lengths(np.ones(1000), [7] * 142 + [6]),
  }
  stream = DocumentStream(cfg, metas)
  assert [c.order.options.block_size for c in stream.cursors] == [30, 8 * 20]


@pytest.mark.parametrize("block", [None, 4, "global"])
def test_reshuffle_on_repeat(block):
  options = dict(shuffle_shards=True, shuffle_within_shard=True, block_size=block)
  counts = [8, 8, 8, 8]
  on = DatasetOrder("d", counts, ShuffleOptions(**options, reshuffle_on_repeat=True), 5)
  off = DatasetOrder("d", counts, ShuffleOptions(**options, reshuffle_on_repeat=False), 5)
  positions = np.arange(32)
  assert on.records(0, positions).tolist() == off.records(0, positions).tolist()
  assert on.records(1, positions).tolist() != on.records(0, positions).tolist()
  assert off.records(1, positions).tolist() == off.records(0, positions).tolist()
  assert off.records(7, positions).tolist() == off.records(0, positions).tolist()


def test_seed_and_pass_are_hashed_not_added():
  options = ShuffleOptions(block_size="global")
  positions = np.arange(1000)
  seed_s_pass_1 = DatasetOrder("web", [1000], options, seed=42).records(1, positions)
  seed_s1_pass_0 = DatasetOrder("web", [1000], options, seed=43).records(0, positions)
  assert seed_s_pass_1.tolist() != seed_s1_pass_0.tolist()
  assert derive_key(42, "web", 1, "global") != derive_key(43, "web", 0, "global")
  # The dataset name is part of the key too.
  other = DatasetOrder("code", [1000], options, seed=42).records(1, positions)
  assert other.tolist() != seed_s_pass_1.tolist()


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4])
def test_global_shuffle_has_no_rank_correlation(seed):
  # Under a uniform random permutation, Spearman's rho between position and
  # record has mean 0 and variance 1/(n-1); |rho| < 4/sqrt(n-1) fails with
  # probability ~6e-5 per seed (normal tail at 4 sigma).
  n = 20_000
  records = DatasetOrder("d", [n], ShuffleOptions(block_size="global"), seed).records(0, np.arange(n))
  rho = np.corrcoef(np.arange(n), records)[0, 1]  # ranks are the values themselves
  assert abs(rho) < 4 / np.sqrt(n - 1)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_global_shuffle_spreads_every_shard_over_the_whole_pass(seed):
  # 10 shards x 2000 records; positions cut into 10 equal bins. Independence of
  # (shard, bin) gives chi-square with 81 degrees of freedom: mean 81, sd 12.7;
  # its 0.9999 quantile is about 134 (Wilson-Hilferty), the bound used here.
  # (With a shard-order shuffle only, the statistic would be about 180,000.)
  shards, per_shard = 10, 2000
  n = shards * per_shard
  order = DatasetOrder("d", [per_shard] * shards, ShuffleOptions(block_size="global"), seed)
  source_shard = order.records(0, np.arange(n)) // per_shard
  position_bin = np.arange(n) * 10 // n
  table = np.zeros((shards, 10))
  np.add.at(table, (source_shard, position_bin), 1)
  expected = n / (shards * 10)
  chi2 = ((table - expected) ** 2 / expected).sum()
  assert chi2 < 134


@pytest.mark.slow
def test_trillion_record_global_shuffle_in_bounded_memory():
  n = 10**12
  order = DatasetOrder("huge", [n // 4] * 4, ShuffleOptions(block_size="global"), seed=9)
  tracemalloc.start()
  records = order.records(0, np.arange(1_000_000))
  _, peak = tracemalloc.get_traced_memory()
  tracemalloc.stop()
  assert peak < 50 * 2**20  # the 8 MB output and input included
  assert records.min() >= 0 and records.max() < n
  assert np.unique(records).size == 1_000_000
  # Positions far into the pass work the same way.
  tail = order.records(3, np.arange(n - 10, n))
  assert np.unique(tail).size == 10 and tail.max() < n


def test_invalid_positions_and_options_are_named():
  order = DatasetOrder("web", [5], ShuffleOptions(), 0)
  with pytest.raises(ValueError, match=r"web: positions must lie in \[0, 5\)"):
    order.records(0, np.array([5]))
  with pytest.raises(ValueError, match="shuffle_block_size"):
    ShuffleOptions(block_size=0)
  with pytest.raises(ValueError, match="web: the dataset has no records"):
    DatasetOrder("web", [0, 0], ShuffleOptions(), 0)


@pytest.mark.slow
def test_a_long_run_holds_its_live_passes_permutations_not_every_pass(tmp_path, monkeypatch):
  """The permutation cache drops what the stream stopped asking for: over many passes of repeating
  datasets it holds the same entries at pass 40 as at pass 20 (it grew with every pass before)."""
  cache = permutation._PermutationCache(permutation._CACHE_ENTRIES)
  monkeypatch.setattr(permutation, "_CACHE", cache)
  cfg = coded_config(
    tmp_path,
    [[3, 5, 2, 4] * 100, [2, 6, 3] * 100],
    exhausted_policy="repeat",
    shuffle_block_size="global",
    shuffle_within_shard=True,
  )
  planner = StepPlanner(cfg)
  held = []
  while len(held) < 3:
    planner.plan()
    passes = planner.stream.cursors[0].pass_index
    if passes in (20, 40, 60) and len(held) < (20, 40, 60).index(passes) + 1:
      held.append(cache.entries)
  assert held[0] > 0 and held[2] <= held[1] <= held[0] * 1.5 + 1024, held


def test_stable_argsort_is_numpys_stable_argsort():
  """The packed sort gives np.argsort(kind="stable") exactly, ties of the packed high bits and of whole
  keys included (forced here: real keys tie on their high bits with probability n^2 / 2^45)."""
  rng = np.random.default_rng(7)
  for trial in range(200):
    size = int(rng.integers(1, 3000))
    keys = rng.integers(0, 2**63, size, dtype=np.uint64) * np.uint64(2) + rng.integers(0, 2, size, dtype=np.uint64)
    if trial % 2:  # few distinct high parts, and whole-key duplicates
      keys = (keys >> np.uint64(52)) << np.uint64(52) | rng.integers(0, 4, size).astype(np.uint64)
    assert permutation.stable_argsort(keys).tolist() == np.argsort(keys, kind="stable").tolist(), trial


def test_global_permutations_stay_cached_when_together_they_exceed_the_cache(tmp_path, monkeypatch):
  """Three global shuffles of 600 records each look up their permutations every step; with room for
  1,000 entries they would evict each other every step (an argsort of every dataset per step). The
  orders reserve their sizes: each permutation is computed once, and the reservation ends with them."""
  cache = permutation._PermutationCache(1000)
  monkeypatch.setattr(permutation, "_CACHE", cache)
  computed = []
  image = permutation._image
  monkeypatch.setattr(permutation, "_image", lambda *a: computed.append(a) or image(*a))
  cfg = coded_config(tmp_path, [[3] * 600] * 3, shuffle_block_size="global", exhausted_policy="repeat")
  planner = StepPlanner(cfg)
  assert cache.reserved == 1800
  planned = list(planner.plans(30))  # 30 x 64 tokens: within the first pass of each dataset
  cached_sizes = [size for _, _, size in computed if size >= permutation.CACHED_MIN]  # the rest: never cached
  assert len(planned) == 30 and cached_sizes == [600] * 3, computed
  del planner, planned
  gc.collect()  # the orders' finalizers run
  assert cache.reserved == 0
