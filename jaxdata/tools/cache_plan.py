"""How much of each dataset one host reads per read span: the cache a remote run needs.

A host reads its rows' documents a span at a time (`read_ahead_tokens` of
its rows). Every shard a span touches must be in the cache at once, so the
most bytes of remote shards any span touches is the least `cache_bytes`
can be. Whether a shard is still there when a later span needs it again
depends on the order: the spans are replayed through the pipeline's
least-recently-used cache, and the smallest cache that fetches at most 5%
more than the distinct shards touched is the size below which reads thrash
(with a global shuffle: nearly the whole dataset; with `open_shards: k`:
about k shards per dataset and the next ones)::

    plan steps (metadata only)  ->  host h's pieces, grouped into spans of read_ahead_tokens
      -> per span and dataset: distinct shards, their bytes (manifest)  ->  mean / max over spans
      -> every host's spans through an LRU cache of C bytes              ->  smallest C within 5%

>>> # jaxdata plan pipeline.yaml --hosts 16 prints this table (see docs/remote.md)
"""

from __future__ import annotations

import collections
import dataclasses

import numpy as np

from jaxdata.config.pipeline_config import PipelineConfig
from jaxdata.mixture.metadata import open_split
from jaxdata.mixture.stream import DatasetMeta
from jaxdata.pipeline.planner import StepPlanner, check_host_count, host_row_blocks
from jaxdata.pipeline.read_spans import MAX_SPAN_STEPS
from jaxdata.sources.dataset import ReadOptions
from jaxdata.sources.shard_cache import default_cache_options
from jaxdata.sources.stores import is_remote

__all__ = ["CacheNeeds", "DatasetCacheNeed", "cache_needs", "cache_warnings", "lru_fetched", "thrash_threshold"]


@dataclasses.dataclass(frozen=True)
class DatasetCacheNeed:
  """One dataset, over the spans planned, for the busiest host."""

  name: str
  remote: bool
  shards: int  # in the dataset
  mean_shards: float  # touched per span
  max_shards: int
  max_bytes: int  # the most bytes of shards one span touches: below this, reads thrash
  dataset_bytes: int


@dataclasses.dataclass(frozen=True)
class CacheNeeds:
  datasets: list[DatasetCacheNeed]
  max_remote_bytes: int  # the remote shards one span of one host touches, at most
  thrash_bytes: int  # the smallest cache that fetches <= REFETCH_LIMIT x the distinct remote shards touched
  # (both over every dataset when none is remote: what they would need in object storage)


REFETCH_LIMIT = 1.05
Span = dict[tuple[int, int], int]  # (dataset, shard) -> bytes, for the remote datasets


def lru_fetched(spans: list[Span], capacity: int) -> int:
  """Bytes an LRU cache of `capacity` fetches for these spans in turn (a
  span's shards all stay until it is read, as in `ShardCache`)."""
  present: collections.OrderedDict[tuple[int, int], int] = collections.OrderedDict()
  fetched = held = 0
  for span in spans:
    for key, size in span.items():
      if key in present:
        present.move_to_end(key)
      else:
        present[key] = size
        fetched += size
        held += size
    for key in list(present):
      if held <= capacity:
        break
      if key not in span:
        held -= present.pop(key)
  return fetched


def thrash_threshold(spans: list[Span]) -> int:
  """The smallest capacity (to a shard's size) within REFETCH_LIMIT of the distinct bytes."""
  distinct: Span = {}
  for span in spans:
    distinct.update(span)
  floor = sum(distinct.values())
  low, high = max((sum(w.values()) for w in spans), default=0), floor
  step = max(1, min(distinct.values(), default=1))
  while high - low > step:  # fetched bytes only fall as the capacity grows
    middle = (low + high) // 2
    if lru_fetched(spans, middle) <= REFETCH_LIMIT * floor:
      high = middle
    else:
      low = middle
  return high


def cache_needs(cfg: PipelineConfig, hosts: int, spans: int, read_ahead_tokens: int) -> CacheNeeds:
  """Plans `spans` read spans of every host and measures what each dataset's spans touch."""
  check_host_count(cfg, hosts)
  cache = default_cache_options(cfg.cache_dir, cfg.cache_bytes)
  # What training reads: spans, and without the held-out documents (`holdout`).
  datasets = [open_split(s, ReadOptions(), cache, cfg.seed, "train") for s in cfg.dataset_settings()]
  try:
    planner = StepPlanner(cfg, {d.name: DatasetMeta.from_dataset(ds) for d, ds in zip(cfg.datasets, datasets)})
    shard_bytes = [np.array([s.num_bytes for s in ds.manifest.shards], np.int64) for ds in datasets]
    starts = [ds.record_starts for ds in datasets]
    touched: list[list[np.ndarray]] = [[] for _ in datasets]  # per dataset: shard sets of every (host, span)
    open_spans: list[list[tuple[set[int], ...]]] = [[] for _ in range(hosts)]
    filled, steps = [0] * hosts, [0] * hosts
    for plan in planner.plans():
      for host, rows in enumerate(host_row_blocks(plan.rows, hosts)):
        pieces = plan.pieces.take(plan.in_rows(rows))
        if not open_spans[host] or filled[host] >= read_ahead_tokens or steps[host] == MAX_SPAN_STEPS:
          open_spans[host].append(tuple(set() for _ in datasets))
          filled[host] = steps[host] = 0
        for d in range(len(datasets)):
          records = pieces.record[pieces.dataset == d]
          open_spans[host][-1][d].update((np.searchsorted(starts[d], records, side="right") - 1).tolist())
        filled[host] += rows.size * plan.seq_len
        steps[host] += 1
      if min(len(w) for w in open_spans) > spans:
        break
  finally:
    for ds in datasets:
      ds.close()
  # The remote datasets that go through the shard cache (megatron / flat files are read by range,
  # uncached); for a config with none, all of them (what they would need once uploaded).
  remote = [ds.remote is not None for ds in datasets]
  remote = remote if any(remote) else [True] * len(remote)
  span_bytes, thresholds = [], []
  for host_spans in open_spans:
    replay: list[Span] = []
    for span in host_spans[:spans]:
      replay.append({})
      for d, shards in enumerate(span):
        touched[d].append(np.fromiter(shards, np.int64, len(shards)))
        if remote[d]:
          replay[-1].update({(d, s): int(shard_bytes[d][s]) for s in shards})
      span_bytes.append(sum(replay[-1].values()))
    thresholds.append(thrash_threshold(replay))
  return CacheNeeds(
    [
      DatasetCacheNeed(
        d.name,
        is_remote(d.path),
        shard_bytes[i].size,
        float(np.mean([t.size for t in touched[i]])) if touched[i] else 0.0,
        max((t.size for t in touched[i]), default=0),
        max((int(shard_bytes[i][t].sum()) for t in touched[i]), default=0),
        int(shard_bytes[i].sum()),
      )
      for i, d in enumerate(cfg.datasets)
    ],
    max(span_bytes, default=0),
    max(thresholds, default=0),
  )


def cache_warnings(needs: CacheNeeds, cache_bytes: int) -> list[str]:
  """A warning if cache_bytes is below the size where reads thrash."""
  if needs.thrash_bytes <= cache_bytes:
    return []
  return [
    f"cache_bytes {cache_bytes:,} is below the {needs.thrash_bytes:,} bytes under which the planned spans "
    f"would fetch remote shards more than {REFETCH_LIMIT - 1:.0%} beyond once (one span alone touches up to "
    f"{needs.max_remote_bytes:,}); raise cache_bytes, or read fewer shards at a time (open_shards with an "
    "int shuffle_block_size)"
  ]
