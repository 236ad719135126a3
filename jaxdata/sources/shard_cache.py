"""The local shard cache of remote datasets: `ShardCache`, bounded, shared by every dataset of a process.

A read span's shards are pinned while it is read (they never leave the cache
then); the others leave least recently used first to make room. A shard is
fetched into a partial file, checked against the manifest (size and content
hash), then renamed into place, so a shard in the cache is always whole.
Fetches run FETCH_THREADS (8) at a time until a store's latency is measured,
then as many as `jaxdata.sources.parallelism.fetch_threads` finds it needs
(up to MAX_FETCH_THREADS). `RemoteShards` (jaxdata.sources.remote) is one
dataset's view of it.
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import errno
import os
import shutil
import threading
import warnings
from collections.abc import Callable

from jaxdata.errors import DatasetError
from jaxdata.sources.fileutil import file_sha256
from jaxdata.sources.parallelism import FETCH_THREADS, MAX_FETCH_THREADS
from jaxdata.sources.stores import ObjectStore, with_retries

__all__ = ["CacheOptions", "CachedShard", "ShardCache", "default_cache_options", "release_cache", "shared_cache"]

DEFAULT_CACHE_BYTES = 32 << 30


@dataclasses.dataclass(frozen=True)
class CacheOptions:
  """Where remote shards are kept and how many bytes of them at most."""

  cache_dir: str
  cache_bytes: int = DEFAULT_CACHE_BYTES

  def __post_init__(self) -> None:
    if not isinstance(self.cache_dir, str) or not self.cache_dir:
      raise ValueError(f"cache_dir: expected a directory path, got {self.cache_dir!r}")
    if not isinstance(self.cache_bytes, int) or self.cache_bytes < 1:
      raise ValueError(f"cache_bytes: expected an int >= 1, got {self.cache_bytes!r}")


@dataclasses.dataclass(frozen=True)
class CachedShard:
  """What the cache must know of a shard to fetch, check and release it."""

  name: str  # its file in the cache: unique across datasets
  url: str
  key: str
  num_bytes: int
  sha256: str
  store: ObjectStore = dataclasses.field(compare=False)
  on_evict: Callable[[], None] = dataclasses.field(compare=False)  # its reader must close


@dataclasses.dataclass
class CacheCounts:
  """What a cache did, counted as it happens (read by the stats and the tests)."""

  hits: int = 0  # gets of shards found present
  prefetched: int = 0  # gets of shards on their way (asked for by `want`)
  misses: int = 0  # gets that had to fetch
  ahead_gets: int = 0  # gets of shards a read span asked for ahead
  peak_bytes: int = 0  # the most bytes of shards held at once
  fetched_bytes: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)  # per dataset
  # Per shard: read spans that asked for it ahead (`RemoteShards.want` with ahead=True) and have not read it yet.
  asked_ahead: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)


class ShardCache:
  """Remote shards kept as local files, at most `cache_bytes` of them in all
  datasets (more only while one read needs more). Thread-safe; one per
  process and cache directory (`shared_cache`), so the datasets of a
  pipeline share its budget, least recently used shard first out.
  """

  def __init__(self, directory: str, cache_bytes: int) -> None:
    self.directory, self.cache_bytes = directory, cache_bytes
    os.makedirs(directory, exist_ok=True)
    self.present: collections.OrderedDict[str, CachedShard] = collections.OrderedDict()  # LRU first
    self.users = 0  # datasets holding it (see shared_cache)
    self.pinned: collections.Counter[str] = collections.Counter()  # shards a read span needs: never evicted
    self.pending: dict[str, concurrent.futures.Future[None]] = {}
    self.pending_bytes: dict[str, int] = {}  # of the fetches under way
    self.lock = threading.Lock()
    # Fetches in flight at most: `threads` slots, raised from a store's latency (ensure_threads). The pool
    # has room for the most ever allowed (its threads start only as fetches wait for them).
    self.threads = FETCH_THREADS
    self.slots = threading.Semaphore(FETCH_THREADS)
    self.pool = concurrent.futures.ThreadPoolExecutor(MAX_FETCH_THREADS, thread_name_prefix="jaxdata-fetch")
    self.counts = CacheCounts()

  def path(self, name: str) -> str:
    return os.path.join(self.directory, name)

  def ensure_threads(self, threads: int) -> None:
    """At least `threads` fetches in flight from now on (`parallelism.fetch_threads`), at most
    MAX_FETCH_THREADS."""
    with self.lock:
      more = min(threads, MAX_FETCH_THREADS) - self.threads
      if more <= 0:
        return
      self.threads += more
    self.slots.release(more)

  def held(self) -> int:
    return sum(shard.num_bytes for shard in self.present.values())

  def want(self, shards: list[CachedShard], ahead: bool = False) -> None:
    """Starts fetching the given shards (in order); does not wait. For the
    read being made, all of them at once, least recently used shards outside
    it leaving first. `ahead` (for the read span after the one being read): only
    while they fit beside the ones present and under way (making room by
    evicting would drop shards that later read spans still read: with 10% of the
    data cached, 1.4x the bytes)."""
    with self.lock:
      if ahead:
        self.counts.asked_ahead.update(dict.fromkeys((shard.name for shard in shards), 1))
      else:
        # The read being made needs these now: least recently used shards outside it leave at once, so
        # its fetches all start together (left to `get`, each would wait for the one before: a round trip each).
        missing = {s.name: s.num_bytes for s in shards if s.name not in self.present and s.name not in self.pending}
        self._evict({s.name for s in shards}, sum(missing.values()) + sum(self.pending_bytes.values()))
      room = self.cache_bytes - self.held() - sum(self.pending_bytes.values())
      for shard in shards:
        if shard.name in self.present or shard.name in self.pending:
          continue
        if shard.num_bytes > room and ahead:  # the read being made holds its shards at once anyway
          break
        room -= shard.num_bytes
        self.pending_bytes[shard.name] = shard.num_bytes
        self.pending[shard.name] = self.pool.submit(self._fetch, shard)

  def pin(self, shards: list[CachedShard]) -> None:
    """Keeps these shards (one read span's, of every dataset) until `unpin`,
    and starts fetching them."""
    with self.lock:
      self.pinned.update(shard.name for shard in shards)
    self.want(shards)

  def unpin(self, shards: list[CachedShard]) -> None:
    with self.lock:
      self.pinned.subtract(shard.name for shard in shards)
      self.pinned = +self.pinned  # drop the zeros
      self._evict(set())

  def get(self, shard: CachedShard, keep: set[str]) -> str:
    """The shard's local file, fetched now if it is not there or on its way;
    least recently used shards outside `keep` (names) leave to make room."""
    name, first = shard.name, True
    with self.lock:
      if self.counts.asked_ahead[name] > 0:
        self.counts.asked_ahead[name] -= 1
        self.counts.ahead_gets += 1
    while True:  # again if it was evicted between its fetch and this call's turn
      with self.lock:
        if name in self.present:
          self.present.move_to_end(name)
          self.counts.hits += first
          self._evict(keep | {name})
          self.counts.peak_bytes = max(self.counts.peak_bytes, self.held())
          return self.path(name)
        future = self.pending.get(name)
        if future is None:
          self.pending_bytes[name] = shard.num_bytes
          future = self.pending[name] = self.pool.submit(self._fetch, shard)
          self.counts.misses += first
        else:
          self.counts.prefetched += first
        first = False
      future.result()

  def _evict(self, keep: set[str], room: int = 0) -> None:
    """Least recently used shards outside `keep` and the pinned ones leave
    until the cache holds at most cache_bytes (less `room` bytes to be fetched)."""
    total = self.held()
    for name in list(self.present):
      if total + room <= self.cache_bytes:
        return
      if name in keep or name in self.pinned:
        continue
      shard = self.present.pop(name)
      total -= shard.num_bytes
      shard.on_evict()
      try:
        os.unlink(self.path(name))
      except FileNotFoundError:
        pass

  def _fetch(self, shard: CachedShard) -> None:
    target = self.path(shard.name)
    if os.path.isfile(target) and _matches(target, shard):  # left by an earlier run
      with self.lock:
        self.present[shard.name] = shard
        self.pending.pop(shard.name, None)
        self.pending_bytes.pop(shard.name, None)
      return
    partial = f"{target}.partial-{os.getpid()}-{threading.get_ident()}"
    try:
      with self.slots:
        with_retries(shard.url, lambda: _download(shard, partial, self.directory), shard.store.errors)
      if not _matches(partial, shard):
        raise DatasetError(
          f"{shard.url}: differs from the shard manifest.json lists (size or content hash): "
          "changed on the server after the manifest was written?"
        )
      os.replace(partial, target)
      with self.lock:  # counted at once; only a foreground call (get, unpin) evicts
        self.counts.fetched_bytes[shard.name.rpartition("-")[0]] += shard.num_bytes
        self.present[shard.name] = shard
    finally:
      with self.lock:
        self.pending.pop(shard.name, None)
        self.pending_bytes.pop(shard.name, None)
      if os.path.exists(partial):
        os.unlink(partial)


def _download(shard: CachedShard, partial: str, directory: str) -> None:
  """One download; a full disk is a `DatasetError` at once (retrying cannot make room)."""
  try:
    shard.store.download(shard.key, partial)
  except OSError as e:
    if e.errno != errno.ENOSPC:
      raise
    raise DatasetError(
      f"{shard.url}: no space left in the cache directory {directory} "
      f"({shutil.disk_usage(directory).free:,} bytes free): lower cache_bytes or free space"
    ) from e


def _matches(path: str, shard: CachedShard) -> bool:
  """Size, then the full sha256 (the whole file is here anyway)."""
  return os.path.getsize(path) == shard.num_bytes and file_sha256(path) == shard.sha256


_SHARED: dict[str, ShardCache] = {}  # cache directory -> the process's cache there
_SHARED_LOCK = threading.Lock()


def shared_cache(options: CacheOptions) -> ShardCache:
  """This process's cache in `options.cache_dir` (made with its cache_bytes
  if it is the first); `release_cache` when done with it."""
  directory = os.path.realpath(os.path.join(options.cache_dir, "shards"))
  with _SHARED_LOCK:
    cache = _SHARED.get(directory)
    if cache is None:
      cache = _SHARED[directory] = ShardCache(directory, options.cache_bytes)
    cache.users += 1
    return cache


def release_cache(cache: ShardCache) -> None:
  """The last user's release stops its fetch threads (its files stay for a later run)."""
  with _SHARED_LOCK:
    cache.users -= 1
    if cache.users > 0:
      return
    _SHARED.pop(cache.directory, None)
  cache.pool.shutdown(wait=True, cancel_futures=True)
  if cache.counts.peak_bytes > cache.cache_bytes:  # the warning at the first such read quoted that read, not the peak
    warnings.warn(
      f"{cache.directory}: the shard cache held up to {cache.counts.peak_bytes:,} bytes at once, above "
      f"cache_bytes {cache.cache_bytes:,} (reads that needed more shards than fit); raise cache_bytes "
      "to at least that",
      stacklevel=2,
    )


def default_cache_options(cache_dir: str | None = None, cache_bytes: int = DEFAULT_CACHE_BYTES) -> CacheOptions:
  """`cache_dir`, else $JAXDATA_CACHE_DIR, else ~/.cache/jaxdata."""
  directory = (
    cache_dir or os.environ.get("JAXDATA_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "jaxdata")
  )
  return CacheOptions(directory, cache_bytes)
