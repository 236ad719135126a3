"""How much of each dataset one host reads per read window: the cache a remote run needs.

A host reads its rows' documents a window at a time (`read_ahead_tokens` of
its rows). Every shard a window touches must be in the cache at once, so the
most bytes of remote shards any window touches is the smallest `cache_bytes`
that never fetches a shard twice within a window; below it reads thrash::

    plan steps (metadata only)  ->  host h's pieces, grouped into windows of read_ahead_tokens
      -> per window and dataset: distinct shards, their bytes (manifest)  ->  mean / max over windows
      -> per window: the remote datasets' bytes together                  ->  max: the cache needed

>>> # jaxdata plan pipeline.yaml --hosts 16 prints this table (see docs/remote.md)
"""

from __future__ import annotations

import dataclasses
import numpy as np

from jaxdata.config.pipeline_config import PipelineConfig
from jaxdata.mixture.stream import DatasetMeta
from jaxdata.pipeline.planner import StepPlanner, host_row_blocks
from jaxdata.pipeline.steps import MAX_WINDOW_STEPS
from jaxdata.sources.dataset import TokenDataset
from jaxdata.sources.remote import default_cache_options, is_remote

__all__ = ["CacheNeeds", "DatasetCacheNeed", "cache_needs", "cache_warnings"]


@dataclasses.dataclass(frozen=True)
class DatasetCacheNeed:
  """One dataset, over the windows planned, for the busiest host."""

  name: str
  remote: bool
  shards: int  # in the dataset
  mean_shards: float  # touched per window
  max_shards: int
  max_bytes: int  # the most bytes of shards one window touches: below this, reads thrash
  dataset_bytes: int


@dataclasses.dataclass(frozen=True)
class CacheNeeds:
  datasets: list[DatasetCacheNeed]
  max_remote_bytes: int  # the remote shards one window of one host touches, at most: the cache_bytes needed


def cache_needs(cfg: PipelineConfig, hosts: int, windows: int, read_ahead_tokens: int) -> CacheNeeds:
  """Plans `windows` read windows of every host and measures what each dataset's windows touch."""
  datasets = [TokenDataset(d.path, cache=default_cache_options(cfg.cache_dir, cfg.cache_bytes))
              for d in cfg.datasets]
  try:
    planner = StepPlanner(cfg, {d.name: DatasetMeta.from_dataset(ds) for d, ds in zip(cfg.datasets, datasets)})
    shard_bytes = [np.array([s.num_bytes for s in ds.manifest.shards], np.int64) for ds in datasets]
    starts = [ds.record_starts for ds in datasets]
    touched: list[list[np.ndarray]] = [[] for _ in datasets]  # per dataset: shard sets of every (host, window)
    open_windows: list[list[tuple[set[int], ...]]] = [[] for _ in range(hosts)]
    filled, steps = [0] * hosts, [0] * hosts
    for plan in planner.plans():
      for host, rows in enumerate(host_row_blocks(plan.rows, hosts)):
        pieces = plan.pieces.take(plan.in_rows(rows))
        if not open_windows[host] or filled[host] >= read_ahead_tokens or steps[host] == MAX_WINDOW_STEPS:
          open_windows[host].append(tuple(set() for _ in datasets))
          filled[host] = steps[host] = 0
        for d in range(len(datasets)):
          records = pieces.record[pieces.dataset == d]
          open_windows[host][-1][d].update((np.searchsorted(starts[d], records, side="right") - 1).tolist())
        filled[host] += rows.size * plan.seq_len
        steps[host] += 1
      if min(len(w) for w in open_windows) > windows:
        break
  finally:
    for ds in datasets:
      ds.close()
  remote = [is_remote(d.path) for d in cfg.datasets]
  window_bytes = []
  for host_windows in open_windows:
    for window in host_windows[:windows]:
      total = 0
      for d, shards in enumerate(window):
        touched[d].append(np.fromiter(shards, np.int64, len(shards)))
        total += int(shard_bytes[d][touched[d][-1]].sum()) if remote[d] else 0
      window_bytes.append(total)
  return CacheNeeds([
      DatasetCacheNeed(
          d.name, is_remote(d.path), shard_bytes[i].size,
          float(np.mean([t.size for t in touched[i]])) if touched[i] else 0.0,
          max((t.size for t in touched[i]), default=0),
          max((int(shard_bytes[i][t].sum()) for t in touched[i]), default=0),
          int(shard_bytes[i].sum()),
      )
      for i, d in enumerate(cfg.datasets)
  ], max(window_bytes, default=0))


def cache_warnings(needs: CacheNeeds, cache_bytes: int) -> list[str]:
  """A warning if one read window's remote shards do not fit in cache_bytes."""
  if needs.max_remote_bytes <= cache_bytes:
    return []
  widest = max((n for n in needs.datasets if n.remote), key=lambda n: n.max_bytes)
  return [f"cache_bytes {cache_bytes:,} is below the {needs.max_remote_bytes:,} bytes of remote shards one read "
          f"window touches ({widest.name}: up to {widest.max_shards} shards): shards would be fetched again within "
          "a window; raise cache_bytes, lower read_ahead_tokens, or read fewer shards at a time (open_shards with "
          "an int shuffle_block_size)"]
