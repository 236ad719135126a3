"""How many requests to keep in flight to a bucket, from its measured latency.

A remote dataset times the small requests it makes when it opens (the
manifest, a few bytes of a file) and keeps the fastest as the store's round
trip `L`. By Little's law, a host that wants to move `R` per second with
requests that each take `L + size / B` (B: one connection's bandwidth)
needs `R x (L + size / B) / size` of them in flight:

    whole shards (ArrayRecord, ShardCache)   threads  = R_bytes x (L + S / B) / S   in [8, 64]
    byte ranges (flat files, tensorstore)    requests = R_requests x L               in [32, 1024]

    R_bytes    = 1 GiB/s          a host's read target: several times what one
                                  host's training step consumes
    R_requests = 8,000 per s      windows of 2,049 uint32 tokens at 16M tokens/s
    B          = 100 MB/s         one connection to GCS / S3

At the latency of a local emulator (< 1 ms) range requests stay at their
floor (tensorstore's 32); shard fetches are 11 (8 before this rule) at any
latency, since 1 GiB/s at 100 MB/s a connection needs 11 connections
whatever the shard size, plus 1 GiB/s x L / S for the round trips. At 50 ms
a flat dataset keeps 400 ranges in flight and a cache of 256 KB shards 64
fetches. Parallelism never changes what is read, only when: the batches
are the same at any setting.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import TypeVar

__all__ = [
  "FETCH_THREADS",
  "MAX_FETCH_THREADS",
  "MAX_RANGE_REQUESTS",
  "RANGE_REQUESTS",
  "fetch_threads",
  "range_requests",
  "timed",
]

FETCH_THREADS, MAX_FETCH_THREADS = 8, 64
RANGE_REQUESTS, MAX_RANGE_REQUESTS = 32, 1024
TARGET_BYTES_PER_S = 1 << 30
TARGET_REQUESTS_PER_S = 8_000
CONNECTION_BYTES_PER_S = 100e6

T = TypeVar("T")


def fetch_threads(latency_s: float, shard_bytes: float) -> int:
  """Whole-shard fetches to keep in flight.

  >>> fetch_threads(0.0005, 256 << 20), fetch_threads(0.05, 256 << 20), fetch_threads(0.05, 256 << 10)
  (11, 11, 64)
  """
  shard_bytes = max(float(shard_bytes), 1.0)
  needed = TARGET_BYTES_PER_S * (latency_s + shard_bytes / CONNECTION_BYTES_PER_S) / shard_bytes
  return _clamped(needed, FETCH_THREADS, MAX_FETCH_THREADS)


def range_requests(latency_s: float) -> int:
  """Byte-range requests to keep in flight.

  >>> range_requests(0.0005), range_requests(0.02), range_requests(0.05), range_requests(0.2)
  (32, 160, 400, 1024)
  """
  return _clamped(TARGET_REQUESTS_PER_S * latency_s, RANGE_REQUESTS, MAX_RANGE_REQUESTS)


def _clamped(needed: float, floor: int, cap: int) -> int:
  """ceil(needed) within [floor, cap]; the cap for a latency that is not a number (a failed timing)."""
  return cap if not math.isfinite(needed) else min(max(math.ceil(min(needed, cap)), floor), cap)


def timed(request: Callable[[], T]) -> tuple[T, float]:
  """`request()`'s result and the seconds it took."""
  started = time.perf_counter()
  result = request()
  return result, time.perf_counter() - started
