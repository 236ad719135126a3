"""Token ranges out of flat token files: memory maps locally, tensorstore kvstores anywhere.

Both gather many ranges into one array in request order::

    MappedTokenFiles   per shard touched: one fancy-index gather from its np.memmap
    KvTokenFiles       ranges sorted per shard, neighbours closer than MERGE_GAP bytes merged,
                       widened to whole 8 KiB blocks, one kvstore read per merged range, all
                       issued at once in a tensorstore Batch (retried by tensorstore, then a
                       DatasetError naming the file); every response from the object version
                       the first read saw (generation / ETag) and every block matching the
                       index's checksum (block_sums); then one gather out of the fetched bytes

tensorstore is imported when a kvstore is first opened: `import jaxdata` stays light.
"""

from __future__ import annotations

import abc
import hashlib
import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from jaxdata._lazy import lazy_module
from jaxdata.errors import DatasetError
from jaxdata.sources.block_sums import BLOCK_BYTES, bad_block
from jaxdata.sources.parallelism import MAX_RANGE_REQUESTS, RANGE_REQUESTS, range_requests, timed
from jaxdata.sources.stores import RemotePath, is_remote

__all__ = [
  "KvTokenFiles",
  "MERGE_GAP",
  "MappedTokenFiles",
  "TokenFiles",
  "kv_root",
  "ranges_index",
  "read_object",
  "read_objects",
]

MERGE_GAP = 64 << 10  # ranges of one file closer than this are fetched as one request
_HASH_CHUNK = 16 << 20
_RETRIES = {"max_retries": 4, "initial_delay": "0.25s", "max_delay": "2s"}


tensorstore = lazy_module("tensorstore")  # a core dependency, imported when a token file is first opened


def kv_root(root: str) -> dict[str, Any]:
  """The tensorstore kvstore spec of a directory or gs:// / s3:// prefix.

  S3 endpoints and regions come from AWS_ENDPOINT_URL and AWS_DEFAULT_REGION
  (or AWS_REGION) when set, as for boto3, and keys from AWS_ACCESS_KEY_ID /
  AWS_SECRET_ACCESS_KEY when both are set (else AWS's default chain); a GCS emulator from
  TENSORSTORE_GCS_HTTP_URL (tensorstore's own variable), which defaults to
  STORAGE_EMULATOR_HOST (google-cloud-storage's).
  """
  if not is_remote(root):
    return {"driver": "file", "path": os.path.abspath(root) + "/"}
  location = RemotePath.parse(root)
  path = location.prefix + "/" if location.prefix else ""
  if location.scheme == "gs":
    if os.environ.get("STORAGE_EMULATOR_HOST"):
      os.environ.setdefault("TENSORSTORE_GCS_HTTP_URL", os.environ["STORAGE_EMULATOR_HOST"])
      # An emulator takes no credentials (google-cloud-storage sends none to it); without this token
      # tensorstore looks for gcloud's default credentials and logs an error line when there are none.
      os.environ.setdefault("GOOGLE_AUTH_TOKEN_FOR_TESTING", "emulator")
    return {"driver": "gcs", "bucket": location.bucket, "path": path}
  spec: dict[str, Any] = {"driver": "s3", "bucket": location.bucket, "path": path}
  if os.environ.get("AWS_ACCESS_KEY_ID") and os.environ.get("AWS_SECRET_ACCESS_KEY"):
    # Keys in the environment are used as they are: the default chain would first look for
    # ~/.aws/config and ~/.aws/credentials and log an error line per request when they are absent.
    spec["aws_credentials"] = {"type": "environment"}
  if os.environ.get("AWS_ENDPOINT_URL"):
    spec["endpoint"] = os.environ["AWS_ENDPOINT_URL"]
  region = os.environ.get("AWS_DEFAULT_REGION") or os.environ.get("AWS_REGION")
  if region:
    spec["aws_region"] = region
  return spec


def _open_kvstore(spec: dict[str, Any], requests: int = RANGE_REQUESTS) -> Any:
  """A kvstore with tensorstore's retries and `requests` requests in flight at most (gcs, s3)."""
  ts = tensorstore
  limit = {"limit": requests}
  context = ts.Context(
    {
      "gcs_request_retries": _RETRIES,
      "s3_request_retries": _RETRIES,
      "gcs_request_concurrency": limit,
      "s3_request_concurrency": limit,
    }
  )
  return ts.KvStore.open(spec, context=context).result()


def _read(store: Any, key: str, named: str, byte_range: slice | None = None, batch: Any = None) -> Any:
  """A kvstore read's future (`batch` given) or its bytes; failures name `named`."""
  try:
    future = store.read(key, byte_range=byte_range, batch=batch)
  except ValueError as e:
    raise DatasetError(f"{named}: read failed ({str(e)[:300]})") from e
  return future if batch is not None else _value(future, named)


def _result(future: Any, named: str) -> Any:
  """A read's result (value and stamp); failures name `named`."""
  try:
    result = future.result()
  except (ValueError, OSError) as e:  # tensorstore reports store errors as ValueError (status text)
    if str(e).startswith("OUT_OF_RANGE"):
      raise DatasetError(f"{named}: shorter than manifest.json says (truncated or replaced?): {str(e)[:200]}") from e
    raise DatasetError(f"{named}: read failed after retries ({str(e)[:300]})") from e
  if result.state != "value":
    raise DatasetError(f"{named}: object is missing")
  return result


def _value(future: Any, named: str) -> bytes:
  return _result(future, named).value


def _shown(generation: bytes | None) -> str:
  return (generation or b"").lstrip(b"\0").decode("ascii", "replace")[:60] or "?"


def read_object(root: str, relative: str) -> bytes:
  """The whole object `relative` under `root` (small metadata files)."""
  return _read(_open_kvstore(kv_root(root)), relative, f"{root.rstrip('/')}/{relative}")


def read_objects(root: str, relatives: Sequence[str]) -> dict[str, bytes]:
  """Whole objects under `root`, all requested at once: one round trip, not one each.

  >>> import tempfile
  >>> root = tempfile.mkdtemp()
  >>> for name in ("a", "b"):
  ...   _ = open(os.path.join(root, name), "w").write(name * 3)
  >>> read_objects(root, ["a", "b"])
  {'a': b'aaa', 'b': b'bbb'}
  """
  store, named = _open_kvstore(kv_root(root), MAX_RANGE_REQUESTS), root.rstrip("/")
  with tensorstore.Batch() as batch:
    futures = {relative: _read(store, relative, f"{named}/{relative}", None, batch) for relative in relatives}
  return {relative: _value(future, f"{named}/{relative}") for relative, future in futures.items()}


class TokenFiles(abc.ABC):
  """Per shard, a file of little-endian token ids."""

  @abc.abstractmethod
  def gather(self, shard_ids: np.ndarray, starts: np.ndarray, counts: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Tokens of every range, concatenated in request order (`offsets`: their cumulative counts)."""

  @abc.abstractmethod
  def sha256(self, shard: int) -> str:
    """Hex sha256 of a whole file (reads it all)."""

  def transfer_stats(self) -> dict[str, float] | None:
    """Files in object storage: bytes fetched, round trip, requests in flight (None: local files)."""
    return None

  def close(self) -> None:  # noqa: B027 -- optional: files read through a store hold nothing open
    pass


def ranges_index(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
  """Every index of the ranges [starts[i], starts[i] + counts[i]), in order,
  without a Python loop.

  >>> ranges_index(np.array([10, 3]), np.array([2, 3])).tolist()
  [10, 11, 3, 4, 5]
  """
  counts = np.asarray(counts, np.int64)
  firsts = np.cumsum(counts) - counts
  index = np.repeat(np.asarray(starts, np.int64) - firsts, counts)
  index += np.arange(index.size, dtype=np.int64)
  return index


class MappedTokenFiles(TokenFiles):
  """Local files through np.memmap: a gather per shard, no copy of the file."""

  def __init__(
    self,
    paths: Sequence[str],
    dtype: np.dtype,
    sizes: Sequence[int],
    offsets: Sequence[int],
    hasher: Callable[[str], str],
  ) -> None:
    self.paths, self.sizes = list(paths), list(sizes)
    self.maps = [
      np.memmap(p, dtype, "r", offset=offset, shape=((size - offset) // dtype.itemsize,))
      for p, size, offset in zip(paths, sizes, offsets)
    ]
    # Each file's inode, to check before every read that the file mapped was not truncated (SIGBUS);
    # no descriptor is held (a dataset may have more files than a process may open).
    self.inodes = [os.stat(p).st_ino for p in self.paths]
    self.dtype = dtype
    self.hasher = hasher

  def check_sizes(self, shards: Sequence[int]) -> None:
    """A `DatasetError` naming a mapped file that shrank since it was opened: reading it would end
    the process with SIGBUS. (A file replaced by rename keeps its old content mapped: nothing to see.)"""
    for shard in shards:
      try:
        found = os.stat(self.paths[shard])
      except FileNotFoundError:  # removed: the mapped file lives on until it is unmapped
        continue
      now = found.st_size
      if found.st_ino == self.inodes[shard] and now < self.sizes[shard]:
        raise DatasetError(
          f"{self.paths[shard]}: {now} bytes now, {self.sizes[shard]} when the dataset was "
          "opened: truncated during the run (write token files elsewhere and rename them into "
          "place); restart once the file is whole"
        )

  def gather(self, shard_ids: np.ndarray, starts: np.ndarray, counts: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    shards = np.unique(shard_ids).tolist()
    self.check_sizes(shards)
    if counts.size and (counts == counts[0]).all():  # windows: one [ranges, width] gather per shard
      width = np.arange(int(counts[0]))
      if len(shards) == 1:
        return self.maps[shards[0]][starts[:, None] + width].reshape(-1)
      rows = np.empty((counts.size, width.size), self.dtype)
      for shard in shards:
        mine = shard_ids == shard
        rows[mine] = self.maps[shard][starts[mine][:, None] + width]
      return rows.reshape(-1)
    if len(shards) == 1:
      return self.maps[shards[0]][ranges_index(starts, counts)]
    out = np.empty(int(offsets[-1]), self.dtype)
    for shard in shards:
      mine = np.flatnonzero(shard_ids == shard)
      out[ranges_index(offsets[mine], counts[mine])] = self.maps[shard][ranges_index(starts[mine], counts[mine])]
    return out

  def sha256(self, shard: int) -> str:
    return self.hasher(self.paths[shard])

  def close(self) -> None:
    self.maps = []


class KvTokenFiles(TokenFiles):
  """Files under a tensorstore kvstore (file, gcs or s3 driver)."""

  def __init__(
    self,
    spec: dict[str, Any],
    keys: Sequence[str],
    named: Sequence[str],
    dtype: np.dtype,
    sizes: Sequence[int],
    offsets: Sequence[int],
    *,
    sums: Sequence[np.ndarray | None] | None = None,
  ) -> None:
    self.keys, self.named, self.dtype, self.sizes = list(keys), list(named), dtype, list(sizes)
    self.store = _open_kvstore(spec)
    self.latency_s, self.parallelism = 0.0, RANGE_REQUESTS
    if spec["driver"] != "file" and self.keys:
      # The store's round trip: the faster of two one-byte reads (the first may open the connection).
      self.latency_s = min(
        timed(lambda: _read(self.store, self.keys[0], self.named[0], slice(0, min(1, self.sizes[0]))))[1]
        for _ in range(2)
      )
      self.parallelism = range_requests(self.latency_s)
      self.store = _open_kvstore(spec, self.parallelism)
    self.remote = spec["driver"] != "file"
    self.fetched_bytes = 0  # bytes of token ranges fetched (gather)
    self.offsets = np.asarray(offsets, np.int64)  # bytes before each file's first token
    self.sums = list(sums) if sums is not None else [None] * len(self.keys)  # block_sums per file, or None
    # Each object's generation (GCS) or ETag (S3), pinned by its first read: bytes of any other are refused.
    self.generations: list[bytes | None] = [None] * len(self.keys)

  def transfer_stats(self) -> dict[str, float] | None:
    if not self.remote:
      return None
    return {"fetched_bytes": self.fetched_bytes, "latency_s": self.latency_s, "parallelism": self.parallelism}

  def _bytes(self, future: Any, shard: int) -> bytes:
    """A read's bytes, refused if they come from another version of the object than the first read's."""
    result = _result(future, self.named[shard])
    generation = result.stamp.generation
    if any(generation):  # a store that names no generation (an emulator) leaves the block checks
      if self.generations[shard] is None:
        self.generations[shard] = generation
      elif generation != self.generations[shard]:
        raise DatasetError(
          f"{self.named[shard]}: the object changed while the pipeline read it (generation / "
          f"ETag {_shown(self.generations[shard])} when opened, now {_shown(generation)}); "
          "its tokens would differ from the indexed ones: re-index it and restart"
        )
    return result.value

  def _checked(self, data: bytes, shard: int, begin: int, end: int, first_block: int) -> bytes:
    """Bytes [begin, end) of the file out of `data`, whole blocks from `first_block`, each block
    checked against the index's sums (where the file has them)."""
    sums = self.sums[shard]
    if sums is None:
      return data
    bad = bad_block(data, first_block, sums)
    if bad is not None:
      raise DatasetError(
        f"{self.named[shard]}: bytes {bad * BLOCK_BYTES}..{min((bad + 1) * BLOCK_BYTES, self.sizes[shard])}"
        " as read differ from the indexed file (block checksum): a corrupt or truncated response, or "
        "the object was replaced; its tokens are not used"
      )
    at = begin - first_block * BLOCK_BYTES
    return data[at : at + end - begin]

  def check_samples(self, shards: Sequence[tuple[int, int, str]], blocks: int, block: int) -> None:
    """Each (shard, num_bytes, expected) file's sampled hash (`fileutil.sample_sha256`, by range
    reads, all shards' at once) against the manifest's."""
    ts = tensorstore
    with ts.Batch() as batch:
      futures = []
      for shard, num_bytes, _ in shards:
        last = max(num_bytes - block, 0)
        futures.append(
          [
            _read(
              self.store,
              self.keys[shard],
              self.named[shard],
              slice(last * i // (blocks - 1), min(last * i // (blocks - 1) + block, num_bytes)),
              batch,
            )
            for i in range(blocks)
          ]
        )
    for (shard, num_bytes, expected), shard_futures in zip(shards, futures):
      digest = hashlib.sha256(str(num_bytes).encode())
      for future in shard_futures:
        digest.update(self._bytes(future, shard))
      if digest.hexdigest() != expected:
        raise DatasetError(
          f"{self.named[shard]}: content differs from the file manifest.json lists (sampled hash; "
          "replaced, truncated or resized?)"
        )

  def gather(self, shard_ids: np.ndarray, starts: np.ndarray, counts: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    item = self.dtype.itemsize
    order = np.lexsort((starts, shard_ids))
    s_shard, s_start, s_end = shard_ids[order], starts[order], starts[order] + counts[order]
    # A merged request begins where the shard changes or the gap to the furthest end so far is large.
    reach = np.maximum.accumulate(s_end)  # within a shard, since shards are sorted and ends only grow
    new = np.ones(order.size, bool)
    new[1:] = (s_shard[1:] != s_shard[:-1]) | (s_start[1:] - reach[:-1] > MERGE_GAP // item)
    first = np.flatnonzero(new)
    request_end = np.maximum.reduceat(s_end, first)
    request_shard, request_start = s_shard[first], s_start[first]
    # Byte ranges, widened to whole checksum blocks where the file has block sums.
    begin_bytes = self.offsets[request_shard] + request_start * item
    end_bytes = self.offsets[request_shard] + request_end * item
    checked = np.array([self.sums[shard] is not None for shard in request_shard.tolist()], bool)  # per request
    first_block = np.where(checked, begin_bytes // BLOCK_BYTES, 0)
    read_begin = np.where(checked, first_block * BLOCK_BYTES, begin_bytes)
    read_end = np.where(
      checked,
      np.minimum(-(-end_bytes // BLOCK_BYTES) * BLOCK_BYTES, np.asarray(self.sizes, np.int64)[request_shard]),
      end_bytes,
    )
    ts = tensorstore
    self.fetched_bytes += int((read_end - read_begin).sum())
    requests = list(zip(request_shard.tolist(), read_begin.tolist(), read_end.tolist()))
    with ts.Batch() as batch:
      futures = [
        _read(self.store, self.keys[shard], self.named[shard], slice(lo, hi), batch) for shard, lo, hi in requests
      ]
    fetched = np.frombuffer(
      b"".join(
        self._checked(self._bytes(future, shard), shard, lo, hi, block)
        for future, shard, lo, hi, block in zip(
          futures, request_shard.tolist(), begin_bytes.tolist(), end_bytes.tolist(), first_block.tolist()
        )
      ),
      self.dtype,
    )
    # Where each range starts in `fetched`: its request's base + its offset inside the request.
    request_base = np.cumsum(request_end - request_start) - (request_end - request_start)
    owner = np.cumsum(new) - 1
    source = np.empty(order.size, np.int64)
    source[order] = request_base[owner] + s_start - request_start[owner]
    return fetched[ranges_index(source, counts)]

  def sha256(self, shard: int) -> str:
    digest = hashlib.sha256()
    ts = tensorstore
    for at in range(0, self.sizes[shard], _HASH_CHUNK):
      with ts.Batch() as batch:
        future = _read(
          self.store, self.keys[shard], self.named[shard], slice(at, min(at + _HASH_CHUNK, self.sizes[shard])), batch
        )
      digest.update(self._bytes(future, shard))
    return digest.hexdigest()
