"""What the block checks of byte-range reads from a store cost: window reads from moto S3, checked and not.

    python -m benchmarks.block_checks [--tokens 32M] [--repetitions 5]

A flat uint16 file of random ids is indexed (`jaxdata index`: lengths,
starts and block checksums) and uploaded to a local moto S3 server on
127.0.0.1 (the same two cores). The same 4,096 uniform windows of 2,049
tokens are read per call through `KvTokenFiles.gather`, with the block
checks (reads widened to whole 8 KiB blocks, each block summed and
compared) and with the checks off (the exact ranges, no sums), interleaved;
printed: medians of tokens/s, and the bytes the requests cover per token wanted.
Both sides read byte-identical tokens (checked).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

import numpy as np

from benchmarks import TEST_SUPPORT

sys.path.insert(0, TEST_SUPPORT)
import object_store  # the tests' local object stores
from jaxdata.sources.block_sums import BLOCK_BYTES
from jaxdata.sources.boundaries import DocumentBoundaries
from jaxdata.sources.flat_index import build_flat_index
from jaxdata.sources.opening import open_dataset
from jaxdata.tools.exposure import parse_tokens

WINDOW = 2049
DRAWS = 4096


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--tokens", default="32M", help="tokens in the flat file")
  parser.add_argument("--repetitions", type=int, default=5)
  args = parser.parse_args()
  count = parse_tokens(args.tokens)
  root = tempfile.mkdtemp(prefix="jaxdata-block-checks-")
  files = os.path.join(root, "files")
  os.makedirs(files)
  ids = np.random.default_rng(0).integers(1, 60000, count).astype("<u2")
  ids[np.arange(999, count, 1000)] = 0  # documents of 1,000 tokens
  ids.tofile(os.path.join(files, "a.bin"))
  for running in object_store.servers():
    url = running["s3"].upload(files, "jaxdata-bench", "flat")
    build_flat_index(
      "flat",
      [os.path.join(files, "a.bin")],
      out_dir=os.path.join(root, "meta"),
      dtype="uint16",
      boundaries=DocumentBoundaries.eos(0),
      data_root=url,
    )
    dataset = open_dataset(os.path.join(root, "meta"))
    store_files = dataset.files
    sums = list(store_files.sums)
    rng = np.random.default_rng(1)
    rates: dict[str, list[float]] = {"checked": [], "unchecked": []}
    requested: dict[str, float] = {}
    for _ in range(args.repetitions):
      starts = np.sort(rng.integers(0, count - WINDOW, DRAWS))
      counts = np.full(DRAWS, WINDOW, np.int64)
      offsets = np.concatenate([[0], np.cumsum(counts)])
      shards = np.zeros(DRAWS, np.int64)
      got = {}
      for side in ("checked", "unchecked"):
        store_files.sums = sums if side == "checked" else [None] * len(sums)
        started = time.perf_counter()
        got[side] = store_files.gather(shards, starts, counts, offsets)
        rates[side].append(DRAWS * WINDOW / (time.perf_counter() - started))
        requested[side] = _requested_bytes(starts, side == "checked") / (DRAWS * WINDOW)
      assert np.array_equal(got["checked"], got["unchecked"]), "the two sides read different tokens"
    dataset.close()
  for side in ("checked", "unchecked"):
    print(
      f"{side:10s} {statistics.median(rates[side]) / 1e6:6.2f}M tokens/s   "
      f"{requested[side]:.2f} bytes covered per token wanted"
    )
  print(
    f"checked / unchecked: {statistics.median(rates['checked']) / statistics.median(rates['unchecked']):.2f}x "
    f"({args.repetitions} interleaved repetitions of {DRAWS:,} windows of {WINDOW:,} tokens, "
    f"blocks of {BLOCK_BYTES:,} bytes)"
  )


def _requested_bytes(starts: np.ndarray, blocks: bool) -> int:
  """Bytes the ranges cover once widened to whole blocks (checked) or not; gaps that requests merge
  across (MERGE_GAP) are not counted on either side."""
  begin, end = starts * 2, (starts + WINDOW) * 2
  if blocks:
    begin, end = begin // BLOCK_BYTES * BLOCK_BYTES, -(-end // BLOCK_BYTES) * BLOCK_BYTES
  total, reach = 0, -1
  for lo, hi in sorted(zip(begin.tolist(), end.tolist())):  # a few thousand ranges: a loop is fine here
    total += max(0, hi - max(lo, reach))
    reach = max(reach, hi)
  return total


if __name__ == "__main__":
  main()
