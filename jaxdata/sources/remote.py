"""`RemoteShards`: one ArrayRecord dataset in object storage (`gs://`, `s3://`), read through the shard cache.

A remote dataset's manifest and lengths indices are small and fetched when
it opens; its ArrayRecord shards are fetched into the bounded local cache
(`jaxdata.sources.shard_cache`) when a read needs them, several at a time,
and checked against the manifest (size and content hash) before they are
used::

    read of span w:  every dataset's shards -> ShardCache.pin     fetches start, as many as fit;
                                                                  pinned shards stay until the span is read
                     for each shard:  ShardCache.get              waits for it; least recently used shards
                                                                  outside the span leave to make room
                     span read        -> ShardCache.unpin

Buckets are reached through `jaxdata.sources.stores`. A failed transfer is
retried, then raised as a `DatasetError` naming the object; a shard whose
bytes differ from the manifest is refused at once.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import threading
import warnings
from collections.abc import Callable

import numpy as np

from jaxdata.errors import ConfigError
from jaxdata.sources.manifest import MANIFEST_NAME, MAX_MANIFEST_BYTES, Manifest
from jaxdata.sources.parallelism import fetch_threads, timed
from jaxdata.sources.shard_cache import (
  CachedShard,
  CacheOptions,
  release_cache,
  shared_cache,
)
from jaxdata.sources.stores import RemotePath, open_store, with_retries

__all__ = ["RemoteShards"]


class RemoteShards:
  """A remote dataset's files: the manifest (read at once), the lengths
  indices (fetched at once, kept), the shards (through a `ShardCache`).

  Args:
    on_evict: called with a shard's index when its file leaves the cache.
  """

  def __init__(self, url: str, options: CacheOptions, on_evict: Callable[[int], None]) -> None:
    self.location = RemotePath.parse(url)
    self.store = open_store(self.location)
    manifest_url = self.location.url_of(MANIFEST_NAME)
    # One byte past the limit: a larger object is refused by Manifest.parse without being read whole.
    blob, self.latency_s = timed(  # the store's round trip, or more (a first connection, a retry): an upper bound
      lambda: with_retries(
        manifest_url,
        lambda: self.store.read(self.location.key(MANIFEST_NAME), MAX_MANIFEST_BYTES + 1),
        self.store.errors,
      )
    )
    self.manifest = Manifest.parse(blob, manifest_url)
    digest = self.key = hashlib.sha256(f"{url}\n{self.manifest.fingerprint}".encode()).hexdigest()[:16]
    directory = os.path.join(options.cache_dir, digest)
    self.cache = shared_cache(options)
    self.warned = False  # about a read larger than the cache
    self.lengths_dir = os.path.join(directory, "lengths")
    os.makedirs(self.lengths_dir, exist_ok=True)
    self.shards = [
      CachedShard(
        f"{digest}-{i}",
        self.location.url_of(s.path),
        self.location.key(s.path),
        s.num_bytes,
        s.sha256,
        self.store,
        functools.partial(on_evict, i),
      )
      for i, s in enumerate(self.manifest.shards)
    ]
    typical_shard = float(np.median([s.num_bytes for s in self.shards])) if self.shards else 1.0
    self.cache.ensure_threads(fetch_threads(self.latency_s, typical_shard))
    list(self.cache.pool.map(self._fetch_lengths, range(len(self.shards))))
    self._check_room(options)

  def _check_room(self, options: CacheOptions) -> None:
    """The cache directory must have room for what the cache may hold of this dataset (all of it, or
    cache_bytes): a disk that fills up mid-run would fail a step (ENOSPC), so it is said now."""
    need = min(self.cache.cache_bytes, sum(s.num_bytes for s in self.shards))
    room = shutil.disk_usage(self.cache.directory).free + self.cache.held()
    if room < need:
      raise ConfigError(
        f"cache_dir: {self.cache.directory} has {room:,} bytes free (with the cached shards), and "
        f"the cache may hold {need:,} bytes of {self.location.url} (cache_bytes "
        f"{self.cache.cache_bytes:,}, the dataset {sum(s.num_bytes for s in self.shards):,}): lower "
        "cache_bytes or free space"
      )

  def transfer_stats(self) -> dict[str, float]:
    """Bytes fetched so far, the measured round trip, the fetches kept in flight."""
    return {"fetched_bytes": self.fetched_bytes, "latency_s": self.latency_s, "parallelism": self.cache.threads}

  @property
  def fetched_bytes(self) -> int:
    """Bytes of this dataset's shards downloaded so far (by this process)."""
    return self.cache.counts.fetched_bytes[self.key]

  def lengths_file(self, shard: int) -> str:
    return os.path.join(self.lengths_dir, f"{shard}.npy")

  def column_file(self, shard: int, column: str) -> str:
    """Where a shard's per-record column lies once fetched (with its lengths, when opened)."""
    return os.path.join(self.lengths_dir, f"{shard}.{column}.npy")

  def want(self, shards: list[int], ahead: bool = False) -> None:
    """Starts fetching these shards (a read's, in order), as many as fit;
    warns once if they cannot all be held at once. `ahead`: for the next read span."""
    shards = list(dict.fromkeys(int(s) for s in shards))  # once each, in order
    need = sum(self.shards[s].num_bytes for s in shards)
    if need > self.cache.cache_bytes and not self.warned:
      self.warned = True
      warnings.warn(
        f"{self.location.url}: one read needs {len(shards)} shards ({need:,} bytes), more than the "
        f"{self.cache.cache_bytes:,} bytes of cache_bytes: they are held until the read ends; "
        "raise cache_bytes (`jaxdata plan` prints what each read span needs)",
        stacklevel=2,
      )
    self.cache.want([self.shards[s] for s in shards], ahead)

  def pin(self, shards: np.ndarray) -> list[CachedShard]:
    """Pins these shards (a read span's) in the cache; give the result to `unpin`."""
    pinned = [self.shards[s] for s in np.unique(shards).tolist()]
    self.cache.pin(pinned)
    return pinned

  def unpin(self, pinned: list[CachedShard]) -> None:
    self.cache.unpin(pinned)

  def shard_file(self, shard: int, keep: set[int]) -> str:
    """The shard's local file (fetched and checked); shards in `keep` stay."""
    return self.cache.get(self.shards[shard], {self.shards[s].name for s in keep})

  def close(self) -> None:
    release_cache(self.cache)

  def _fetch_lengths(self, shard: int) -> None:
    """Fetches a shard's lengths index and its columns (each once: the cache directory keeps them)."""
    info = self.manifest.shards[shard]
    wanted = [(self.lengths_file(shard), info.lengths_path)]
    wanted += [(self.column_file(shard, name), path) for name, path in info.columns.items()]
    for target, path in wanted:
      if os.path.isfile(target):
        continue
      partial = f"{target}.partial-{os.getpid()}-{threading.get_ident()}"
      with self.cache.slots:
        with_retries(
          self.location.url_of(path),
          functools.partial(self.store.download, self.location.key(path), partial),
          self.store.errors,
        )
      os.replace(partial, target)
