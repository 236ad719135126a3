"""Statistics with a known null distribution, for the order tests.

Each helper says what it computes and under which null; the tests state
their tolerance from these in a comment.
"""

from __future__ import annotations

import math

import numpy as np


def chi_square_quantile(df: int, z: float) -> float:
  """Wilson-Hilferty: the chi-square(df) quantile at the standard normal
  quantile z (z = 5: upper tail about 3e-7). Accurate to a few percent of
  the tail probability for df >= 10."""
  return df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3


def position_chi_square(perms: np.ndarray) -> float:
  """perms: [S, n], row s a permutation (perms[s, i] = image of i). The
  Pearson statistic of the n x n table of (item, image) counts; under uniform
  permutations each cell has expectation S / n, and the statistic is
  approximately chi-square with (n - 1)^2 degrees of freedom (both margins
  are fixed at S)."""
  samples, n = perms.shape
  table = np.zeros((n, n))
  np.add.at(table, (np.broadcast_to(np.arange(n), perms.shape), perms), 1)
  expected = samples / n
  return float(((table - expected) ** 2 / expected).sum())


def parity(perm: np.ndarray) -> int:
  """0 for an even permutation, 1 for odd: (n - number of cycles) mod 2."""
  n = perm.size
  seen = np.zeros(n, dtype=bool)
  cycles = 0
  for start in range(n):
    if not seen[start]:
      cycles += 1
      i = start
      while not seen[i]:
        seen[i] = True
        i = perm[i]
  return (n - cycles) % 2


def adjacent_pairs(perm: np.ndarray) -> int:
  """Positions i whose images differ by one: |perm[i+1] - perm[i]| == 1.
  Under a uniform permutation of n, each of the n - 1 pairs does so with
  probability 2/n: expectation 2 (n - 1) / n, and the count is close to
  Poisson(2) (variance about 2) for large n."""
  return int((np.abs(np.diff(perm)) == 1).sum())


def serial_correlation(perm: np.ndarray) -> float:
  """Pearson correlation of perm[i] and perm[i+1]. Under a uniform
  permutation of n: mean about -1/n, standard deviation about 1/sqrt(n)."""
  return float(np.corrcoef(perm[:-1], perm[1:])[0, 1])


def expected_distinct(draws: int, outcomes: int) -> tuple[float, float]:
  """Mean and standard deviation of the number of distinct outcomes among
  `draws` uniform draws from `outcomes` equally likely ones (occupancy)."""
  n, m = outcomes, draws
  p_empty = (1 - 1 / n) ** m
  p_both_empty = (1 - 2 / n) ** m
  mean = n * (1 - p_empty)
  variance = n * p_empty + n * (n - 1) * p_both_empty - (n * p_empty) ** 2
  return mean, math.sqrt(variance)
