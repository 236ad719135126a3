"""Permutations are uniform at every size: statistics with known nulls, fixed seeds.

Every bound is at about 5 standard deviations (or the chi-square quantile at
z = 5), so a correct implementation fails with probability below 1e-6 per
assertion, while the 4-round Feistel network of jaxdata 0.1 fails each of
them by a wide margin (its values are noted beside each test).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from jaxdata.order import DatasetOrder, ShuffleOptions
from jaxdata.order.feistel import derive_key, feistel_permute
from jaxdata.order.permutation import EXACT_MAX, permute
from null_statistics import (
  adjacent_pairs,
  chi_square_quantile,
  expected_distinct,
  parity,
  position_chi_square,
  serial_correlation,
)

pytestmark = [pytest.mark.slow]


@pytest.mark.parametrize("n", [5, 6, 10])
def test_every_item_lands_at_every_position_equally_often(n):
  # The shard-order shuffle of a dataset with n shards, 20,000 seeds (as the
  # audit's reproducer). Null: chi-square with (n-1)^2 df; bound at z = 5.
  # (0.1: n = 10 gave 1,635 on 81 df, bound 183.)
  seeds = 20_000
  perms = np.stack([permute(np.arange(n), n, derive_key(s, "web", 0, "shards")) for s in range(seeds)])
  assert position_chi_square(perms) < chi_square_quantile((n - 1) ** 2, 5.0)


@pytest.mark.parametrize("n", [16, 1024])
def test_odd_and_even_permutations_are_equally_likely(n):
  # Null: odd count ~ Binomial(2000, 1/2), sd 22.4; bound 5 sd. (0.1: 0 odd of 200.)
  samples = 2000
  odd = sum(parity(permute(np.arange(n), n, derive_key(s, "parity", n))) for s in range(samples))
  assert abs(odd - samples / 2) < 5 * math.sqrt(samples / 4)


@pytest.mark.parametrize("n, samples", [(1024, 2000), (10_000, 1000)])
def test_adjacent_positions_keep_adjacent_images_as_often_as_chance(n, samples):
  # Null: the count per permutation has mean 2 (n-1)/n and variance close to 2
  # (Poisson); the mean of `samples` counts is within 4 sd = 4 sqrt(2 / samples)
  # (two-sided normal tail 6e-5). (0.1: 2.4-2.6 at n = 64..1024 and 2.26 at
  # 10^4, against 2.0 +- 0.13 / 0.18.)
  counts = [adjacent_pairs(permute(np.arange(n), n, derive_key(s, "adjacent", n))) for s in range(samples)]
  assert abs(np.mean(counts) - 2 * (n - 1) / n) < 4 * math.sqrt(2 / samples)


def test_all_orders_of_eight_items_occur_as_often_as_chance():
  # 100,000 permutations of 8 (tweaks select independent permutations, as for
  # the shards of a within-shard shuffle). Null: occupancy of 8! = 40,320 cells,
  # mean 36,946 distinct, sd 49; bound 5 sd. (Even permutations only would give
  # at most 20,160.)
  draws, n = 100_000, 8
  images = permute(np.tile(np.arange(n), draws), n, derive_key(0, "distinct"), tweak=np.repeat(np.arange(draws), n))
  distinct = np.unique(images.reshape(draws, n), axis=0).shape[0]
  mean, sd = expected_distinct(draws, math.factorial(n))
  assert abs(distinct - mean) < 5 * sd


@pytest.mark.parametrize("n", [10**6, 3 * 10**6])
def test_consecutive_images_are_uncorrelated(n):
  # 10^6 is below EXACT_MAX (exact permutation), 3e6 above (Feistel network).
  # Null: mean about -1/n, sd 1/sqrt(n); bound 5 sd.
  assert (n > EXACT_MAX) == (n == 3 * 10**6)
  for seed in range(2):
    perm = permute(np.arange(n), n, derive_key(seed, "serial", n))
    assert abs(serial_correlation(perm)) < 5 / math.sqrt(n)


def test_feistel_network_alone_passes_position_and_adjacency_tests():
  # Above EXACT_MAX only the Feistel network runs; check its statistics where
  # they are cheap: position chi-square at n = 10 (5,000 seeds; null as above)
  # and adjacency at n = 10^4 (400 seeds). Its permutations of a power-of-two
  # domain are all even (every Feistel round is), which docs/order.md states.
  perms = np.stack([feistel_permute(np.arange(10), 10, derive_key(s, "f10")) for s in range(5_000)])
  assert position_chi_square(perms) < chi_square_quantile(81, 5.0)
  counts = [adjacent_pairs(feistel_permute(np.arange(10_000), 10_000, derive_key(s, "f-adj"))) for s in range(400)]
  assert abs(np.mean(counts) - 2.0) < 5 * math.sqrt(2 / 400)


def test_a_single_shard_dataset_is_shuffled_by_the_default_block_shuffle_only_when_asked():
  # Default settings shuffle shard order only: a one-shard dataset keeps its stored order.
  order = DatasetOrder("one", [1000], ShuffleOptions(), seed=0)
  assert order.records(0, np.arange(1000)).tolist() == list(range(1000))
  shuffled = DatasetOrder("one", [1000], ShuffleOptions(shuffle_within_shard=True), seed=0)
  assert shuffled.records(0, np.arange(1000)).tolist() != list(range(1000))
