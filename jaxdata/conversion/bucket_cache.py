"""`published_dataset`: raw inputs' cache in a bucket, for hosts that share no file system.

A pod's hosts each have their own disk; a cache that every host must open
the same is kept in `gs://` / `s3://` (`inputs_cache` in the config)::

    process 0:   built_dataset(..., LOCAL)          the local cache: keyed, resumable, sealed (input_cache)
                 upload every file of it            BUCKET/NAME-KEY16/...   (threads, retried)
                 upload manifest.json, last         the seal: a dataset without it is not opened
    process i>0: wait for BUCKET/NAME-KEY16/manifest.json, then read the dataset remotely

The bucket's copy is named by the same key as the local one, so a bucket is
never reused for other inputs. An upload that stops leaves no manifest
there: the next run uploads again from its local cache (no conversion). Two
runs that publish one cache at once write the same bytes (the conversion is
deterministic), so either may finish it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from jaxdata.conversion.input_cache import built_dataset, cache_key, convert_command_line, refuse_too_large
from jaxdata.conversion.options import ConvertOptions
from jaxdata.errors import DatasetError
from jaxdata.sources.manifest import MANIFEST_NAME
from jaxdata.sources.parallelism import MAX_FETCH_THREADS
from jaxdata.sources.stores import ObjectStore, RemotePath, open_store, with_retries

__all__ = ["published_dataset"]

PUBLISH_POLL_S = 1.0  # how often a waiting host asks the bucket for the manifest


def published_dataset(
  name: str,
  inputs: list[str],
  options: ConvertOptions,
  bucket_root: str,
  local_root: str,
  log: Callable[[str], None] = lambda m: None,
  *,
  max_bytes: int | None = None,
  process: tuple[int, int] = (0, 1),
  wait_s: float = 3600.0,
  full_hash: bool = False,
) -> str:
  """The `gs://` / `s3://` URL of the dataset `inputs` convert to, under `bucket_root`: there already, or
  built by process 0 into `local_root` (`built_dataset`) and uploaded; the other processes wait for it."""
  key = cache_key(inputs, options, full_hash)
  folder = f"{name}-{key.digest[:16]}"
  target = RemotePath.parse(f"{bucket_root.rstrip('/')}/{folder}")
  store = open_store(target)
  if _sealed(store, target):
    return target.url
  refuse_too_large(key, max_bytes, convert_command_line(name, inputs, options, target.url))
  index, _ = process
  if index != 0:
    log(f"{name}: waiting for process 0 to publish the cache {target.url}")
    deadline = time.monotonic() + wait_s
    while not _sealed(store, target):
      if time.monotonic() > deadline:
        raise DatasetError(
          f"{name}: process 0 did not publish the cache {target.url} within {wait_s:.0f} s; run again "
          "(what it finished is kept)"
        )
      time.sleep(PUBLISH_POLL_S)
    return target.url
  local = built_dataset(
    name, inputs, options, local_root, log, max_bytes, process=(0, 1), wait_s=wait_s, key=key, full_hash=full_hash
  )  # named by `key`
  _upload(local, target, store, log, name)
  return target.url


def _sealed(store: ObjectStore, target: RemotePath) -> bool:
  return bool(with_retries(target.url_of(MANIFEST_NAME), lambda: store.exists(target.key(MANIFEST_NAME)), store.errors))


def _upload(local: str, target: RemotePath, store: ObjectStore, log: Callable[[str], None], name: str) -> None:
  """Every file of `local` into `target`, the manifest last (the seal)."""
  files = sorted(f for f in os.listdir(local) if f != MANIFEST_NAME)
  log(f"{name}: publishing the cache to {target.url} ({len(files) + 1} files)")

  def put(file_name: str) -> None:
    source = os.path.join(local, file_name)
    with_retries(target.url_of(file_name), lambda: store.upload(source, target.key(file_name)), store.errors)

  with ThreadPoolExecutor(min(MAX_FETCH_THREADS, max(1, len(files)))) as pool:
    list(pool.map(put, files))
  put(MANIFEST_NAME)
  log(f"{name}: published the cache {target.url}")
