"""The parallelism chosen from a store's latency: Little's law, within its floor and cap."""

from __future__ import annotations

import math

import pytest

from jaxdata.conversion.options import ConvertOptions
from jaxdata.sources import parallelism


def test_parallelism_follows_littles_law_within_floor_and_cap() -> None:
  # 50 ms to a store: 8,000 ranges a second need 400 in flight; 256 MB shards at 100 MB/s each need
  # 1 GiB/s x (0.05 + 2.68 s) / 256 MiB = 11 fetches.
  assert parallelism.range_requests(0.05) == 400
  assert parallelism.fetch_threads(0.05, 256 << 20) == math.ceil((1 << 30) * (0.05 + (256 << 20) / 100e6) / (256 << 20))
  assert parallelism.range_requests(0.0) == parallelism.RANGE_REQUESTS  # a local emulator: the floor
  # No latency: bandwidth alone, 1 GiB/s over 100 MB/s connections, whatever the shard size.
  assert parallelism.fetch_threads(0.0, 64 << 20) == parallelism.fetch_threads(0.0, 1 << 30) == 11
  assert parallelism.range_requests(10.0) == parallelism.MAX_RANGE_REQUESTS
  assert parallelism.fetch_threads(0.05, 1) == parallelism.MAX_FETCH_THREADS


@pytest.mark.parametrize("latency", [math.inf, math.nan])
def test_a_latency_that_is_not_a_number_asks_for_the_cap(latency: float) -> None:
  assert parallelism.range_requests(latency) == parallelism.MAX_RANGE_REQUESTS
  assert parallelism.fetch_threads(latency, 1 << 20) == parallelism.MAX_FETCH_THREADS


def test_an_unknown_compression_is_refused_naming_the_field() -> None:
  with pytest.raises(ValueError, match=r"compression: 'lz4' is not one of \['none', 'snappy', 'zstd'\]"):
    ConvertOptions(compression="lz4")
