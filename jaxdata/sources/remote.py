"""Datasets in object storage (`gs://`, `s3://`): the stores and the local shard cache.

A remote dataset's manifest and lengths indices are small and fetched when
it opens; its ArrayRecord shards are fetched into a bounded local cache when
a read needs them, several at a time, and checked against the manifest
(size and content hash) before they are used::

    read of window w:  shards it needs -> ShardCache.want(all of them)    downloads start, in parallel
                       for each shard:  ShardCache.get(shard)             waits for it; least recently
                                                                          used shards leave to make room

Stores are the providers' own clients (boto3, google-cloud-storage; the
`remote` extra), imported when a remote path is first opened. They honour
the usual settings: credentials from the environment, `AWS_ENDPOINT_URL`
for an S3-compatible endpoint, `STORAGE_EMULATOR_HOST` for a GCS emulator.
A failed transfer is retried (FETCH_ATTEMPTS, with backoff), then raised
as a `DatasetError` naming the object; a shard whose bytes differ from the
manifest is refused at once.
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import functools
import hashlib
import importlib
import os
import threading
import time
import warnings
from typing import Any, Callable, Protocol

import numpy as np

from jaxdata.errors import DatasetError
from jaxdata.sources.fileutil import file_sha256
from jaxdata.sources.manifest import MANIFEST_NAME, MAX_MANIFEST_BYTES, Manifest

__all__ = [
    "DEFAULT_CACHE_BYTES", "FETCH_ATTEMPTS", "CacheOptions", "ObjectStore", "RemotePath", "RemoteShards",
    "ShardCache", "default_cache_options", "is_remote", "open_store", "with_retries",
]

SCHEMES = ("gs://", "s3://")
FETCH_ATTEMPTS = 4  # a failed transfer is retried after 0.25, 0.5 and 1 s
DEFAULT_CACHE_BYTES = 32 << 30
FETCH_THREADS = 8


def is_remote(path: str) -> bool:
  return path.startswith(SCHEMES)


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


class ObjectStore(Protocol):
  """The little a dataset needs of a bucket."""

  errors: tuple[type[BaseException], ...]  # what a failed transfer raises (retried, then named)

  def read(self, key: str, limit: int) -> bytes:
    """The object's first `limit` bytes (all of a smaller one)."""

  def download(self, key: str, destination: str) -> None:
    """Writes the object to a local file."""


@dataclasses.dataclass(frozen=True)
class RemotePath:
  """A dataset directory in a bucket: `s3://bucket/prefix`."""

  url: str
  scheme: str
  bucket: str
  prefix: str

  @classmethod
  def parse(cls, url: str) -> "RemotePath":
    scheme, _, rest = url.partition("://")
    bucket, _, prefix = rest.partition("/")
    if scheme not in ("gs", "s3") or not bucket:
      raise DatasetError(f"{url}: a remote dataset path is gs://BUCKET/PREFIX or s3://BUCKET/PREFIX")
    return cls(url.rstrip("/"), scheme, bucket, prefix.strip("/"))

  def key(self, name: str) -> str:
    return f"{self.prefix}/{name}" if self.prefix else name

  def url_of(self, name: str) -> str:
    return f"{self.url}/{name}"


def _modules(scheme: str, *names: str) -> list[Any]:
  """The provider's client modules (the `remote` extra), imported on first use: `import jaxdata` stays light."""
  try:
    return [importlib.import_module(name) for name in names]
  except ImportError as e:
    raise ImportError(f"{scheme}:// datasets need {names[0]}: pip install 'jaxdata[remote]' ({e})") from e


class _S3Store:
  def __init__(self, bucket: str) -> None:
    boto3, config, exceptions = _modules("s3", "boto3", "botocore.config", "botocore.exceptions")
    # One attempt per call: FETCH_ATTEMPTS retries above it, so a failure surfaces in seconds.
    settings = config.Config(connect_timeout=5, read_timeout=30, retries={"total_max_attempts": 1})
    self.client = boto3.client("s3", config=settings)
    self.bucket = bucket
    self.errors = (exceptions.BotoCoreError, exceptions.ClientError, OSError)

  def read(self, key: str, limit: int) -> bytes:
    return self.client.get_object(Bucket=self.bucket, Key=key, Range=f"bytes=0-{limit - 1}")["Body"].read()

  def download(self, key: str, destination: str) -> None:
    self.client.download_file(self.bucket, key, destination)


class _GcsStore:
  def __init__(self, bucket: str) -> None:
    storage, credentials, api, auth, requests = _modules(
        "gs", "google.cloud.storage", "google.auth.credentials", "google.api_core.exceptions",
        "google.auth.exceptions", "requests")
    if os.environ.get("STORAGE_EMULATOR_HOST"):  # an emulator takes no credentials
      client = storage.Client(project="jaxdata", credentials=credentials.AnonymousCredentials())
    else:
      client = storage.Client()
    self.bucket = client.bucket(bucket)
    self.errors = (api.GoogleAPIError, auth.GoogleAuthError, requests.RequestException, OSError)

  def read(self, key: str, limit: int) -> bytes:
    return self.bucket.blob(key).download_as_bytes(start=0, end=limit - 1, timeout=(5, 30), retry=None)

  def download(self, key: str, destination: str) -> None:
    self.bucket.blob(key).download_to_filename(destination, timeout=(5, 30), retry=None)


def open_store(path: RemotePath) -> ObjectStore:
  return _S3Store(path.bucket) if path.scheme == "s3" else _GcsStore(path.bucket)


def with_retries(what: str, transfer: Callable[[], Any], errors: tuple[type[BaseException], ...],
                 attempts: int = FETCH_ATTEMPTS) -> Any:
  """`transfer()`, retried with backoff on `errors`; then a DatasetError naming `what`."""
  for attempt in range(attempts):
    try:
      return transfer()
    except errors as e:
      if attempt == attempts - 1:
        raise DatasetError(f"{what}: fetch failed after {attempts} attempts ({type(e).__name__}: "
                           f"{str(e)[:300]})") from e
      time.sleep(0.25 * 2**attempt)
  raise AssertionError("unreachable")


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
    self.pinned: collections.Counter[str] = collections.Counter()  # shards a read window needs: never evicted
    self.pending: dict[str, concurrent.futures.Future[None]] = {}
    self.lock = threading.Lock()
    self.pool = concurrent.futures.ThreadPoolExecutor(FETCH_THREADS, thread_name_prefix="jaxdata-fetch")
    self.fetched_bytes: collections.Counter[str] = collections.Counter()  # downloaded, per dataset (RemoteShards.key)
    self.peak_bytes = 0  # the most bytes of shards held at once
    self.hits = self.prefetched = self.misses = 0  # gets found present, on their way (want), or not

  def path(self, name: str) -> str:
    return os.path.join(self.directory, name)

  def held(self) -> int:
    return sum(shard.num_bytes for shard in self.present.values())

  def want(self, shards: list[CachedShard]) -> None:
    """Starts fetching the given shards (in order) while they fit beside the
    ones present; does not wait."""
    with self.lock:
      room = self.cache_bytes - self.held()
      for shard in shards:
        if shard.name in self.present or shard.name in self.pending:
          continue
        if shard.num_bytes > room:
          break
        room -= shard.num_bytes
        self.pending[shard.name] = self.pool.submit(self._fetch, shard)

  def pin(self, shards: list[CachedShard]) -> None:
    """Keeps these shards (one read window's, of every dataset) until `unpin`,
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
    while True:  # again if it was evicted between its fetch and this call's turn
      with self.lock:
        if name in self.present:
          self.present.move_to_end(name)
          self.hits += first
          self._evict(keep | {name})
          self.peak_bytes = max(self.peak_bytes, self.held())
          return self.path(name)
        future = self.pending.get(name)
        if future is None:
          future = self.pending[name] = self.pool.submit(self._fetch, shard)
          self.misses += first
        else:
          self.prefetched += first
        first = False
      future.result()

  def _evict(self, keep: set[str]) -> None:
    total = self.held()
    for name in list(self.present):
      if total <= self.cache_bytes:
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
      return
    partial = f"{target}.partial-{os.getpid()}-{threading.get_ident()}"
    try:
      with_retries(shard.url, lambda: shard.store.download(shard.key, partial), shard.store.errors)
      if not _matches(partial, shard):
        raise DatasetError(f"{shard.url}: differs from the shard manifest.json lists (size or content hash): "
                           "changed on the server after the manifest was written?")
      os.replace(partial, target)
      with self.lock:  # counted at once; only a foreground call (get, unpin) evicts
        self.fetched_bytes[shard.name.rpartition("-")[0]] += shard.num_bytes
        self.present[shard.name] = shard
    finally:
      with self.lock:
        self.pending.pop(shard.name, None)
      if os.path.exists(partial):
        os.unlink(partial)


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


def default_cache_options(cache_dir: str | None = None, cache_bytes: int = DEFAULT_CACHE_BYTES) -> CacheOptions:
  """`cache_dir`, else $JAXDATA_CACHE_DIR, else ~/.cache/jaxdata."""
  directory = cache_dir or os.environ.get("JAXDATA_CACHE_DIR") or os.path.join(
      os.path.expanduser("~"), ".cache", "jaxdata")
  return CacheOptions(directory, cache_bytes)


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
    blob = with_retries(manifest_url, lambda: self.store.read(self.location.key(MANIFEST_NAME), MAX_MANIFEST_BYTES + 1),
                        self.store.errors)
    self.manifest = Manifest.parse(blob, manifest_url)
    digest = self.key = hashlib.sha256(f"{url}\n{self.manifest.fingerprint}".encode()).hexdigest()[:16]
    directory = os.path.join(options.cache_dir, digest)
    self.cache = shared_cache(options)
    self.warned = False  # about a read larger than the cache
    self.lengths_dir = os.path.join(directory, "lengths")
    os.makedirs(self.lengths_dir, exist_ok=True)
    self.shards = [
        CachedShard(f"{digest}-{i}", self.location.url_of(s.path), self.location.key(s.path), s.num_bytes, s.sha256,
                    self.store, functools.partial(on_evict, i))
        for i, s in enumerate(self.manifest.shards)
    ]
    list(self.cache.pool.map(self._fetch_lengths, range(len(self.shards))))

  @property
  def fetched_bytes(self) -> int:
    """Bytes of this dataset's shards downloaded so far (by this process)."""
    return self.cache.fetched_bytes[self.key]

  def lengths_file(self, shard: int) -> str:
    return os.path.join(self.lengths_dir, f"{shard}.npy")

  def want(self, shards: list[int]) -> None:
    """Starts fetching these shards (a read's, in order), as many as fit;
    warns once if they cannot all be held at once."""
    need = sum(self.shards[s].num_bytes for s in shards)
    if need > self.cache.cache_bytes and not self.warned:
      self.warned = True
      warnings.warn(f"{self.location.url}: one read needs {len(shards)} shards ({need:,} bytes), more than the "
                    f"{self.cache.cache_bytes:,} bytes of cache_bytes: they are held until the read ends; "
                    "raise cache_bytes (`jaxdata plan` prints what each read window needs)", stacklevel=2)
    self.cache.want([self.shards[s] for s in shards])

  def pin(self, shards: np.ndarray) -> list[CachedShard]:
    """Pins these shards (a read window's) in the cache; give the result to `unpin`."""
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
    target = self.lengths_file(shard)
    if os.path.isfile(target):
      return
    info = self.manifest.shards[shard]
    partial = f"{target}.partial-{os.getpid()}-{threading.get_ident()}"
    with_retries(self.location.url_of(info.lengths_path),
                 lambda: self.store.download(self.location.key(info.lengths_path), partial), self.store.errors)
    os.replace(partial, target)
