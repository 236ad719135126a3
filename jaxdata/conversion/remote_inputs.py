"""Converter inputs in object storage (`gs://`, `s3://`), through Apache Beam's file systems.

Used by the Beam converter, whose workers already have Beam and its
options (credentials, `--s3_endpoint_url`, ...); the launching process gets
the same options through `set_options`. Files are listed with their sizes
and read whole (a remote file is one work unit); `.gz` / `.zst` are
decompressed by the converter, not by Beam.
"""

from __future__ import annotations

import fnmatch
import hashlib
import os
import socket
import urllib.parse
from collections.abc import Sequence
from typing import IO, Any

from jaxdata.errors import optional_module

__all__ = [
  "environment_options",
  "list_remote",
  "open_remote",
  "remote_head_sha256",
  "remote_sizes",
  "remote_states",
  "set_options",
]

_GLOB = set("*?[")


def _filesystems() -> Any:
  filesystems = optional_module(
    "apache_beam.io.filesystems", "beam", "gs:// and s3:// inputs (read through Apache Beam)"
  ).FileSystems
  # Beam's S3 client reads its endpoint from options only: the environment's, unless set_options named one
  endpoint = os.environ.get("AWS_ENDPOINT_URL")
  if endpoint and not _given_s3_endpoint and _options.get("s3_endpoint_url") != endpoint:
    set_options(_s3_options_from_environment(), filesystems, given=False)
  return filesystems


def environment_options() -> None:
  """Back to the file systems' settings from the environment (a Beam run's own options were for it alone)."""
  _given_s3_endpoint.clear()
  _options.clear()
  _filesystems()  # applies the environment's endpoint, if it names one


def _s3_options_from_environment() -> Any:
  """Beam options for S3 from the variables boto3 reads (AWS_ENDPOINT_URL, the keys, the region)."""
  options = optional_module("apache_beam.options.pipeline_options", "beam", "s3:// inputs").PipelineOptions
  flags = {
    "--s3_endpoint_url": "AWS_ENDPOINT_URL",
    "--s3_access_key_id": "AWS_ACCESS_KEY_ID",
    "--s3_secret_access_key": "AWS_SECRET_ACCESS_KEY",
    "--s3_region_name": "AWS_DEFAULT_REGION",
  }
  return options([f"{flag}={os.environ[name]}" for flag, name in flags.items() if os.environ.get(name)])


_options: dict[str, Any] = {}  # the last options set_options gave (the S3 endpoint, for the reachability check)
_given_s3_endpoint: list[bool] = []  # non-empty: set_options was given an S3 endpoint (the environment's is not used)
REACH_TIMEOUT_S = 5.0  # a store that takes longer to answer a TCP connection is taken as unreachable


def set_options(options: Any, filesystems: Any = None, given: bool = True) -> None:
  """Beam pipeline options for this process's file systems (endpoints, credentials)."""
  _options.clear()
  _options.update(options.get_all_options(retain_unknown_options=True) if hasattr(options, "get_all_options") else {})
  _given_s3_endpoint.clear()
  if given and _options.get("s3_endpoint_url"):
    _given_s3_endpoint.append(True)
  (filesystems or _filesystems()).set_options(options)


def _endpoint(item: str) -> tuple[str, int]:
  """(host, port) the store of a gs:// or s3:// path is reached at (an emulator's, an endpoint's, or the cloud's)."""
  if item.startswith("gs://"):
    given = os.environ.get("STORAGE_EMULATOR_HOST") or "https://storage.googleapis.com"
  else:
    given = _options.get("s3_endpoint_url") or os.environ.get("AWS_ENDPOINT_URL") or "https://s3.amazonaws.com"
  url = urllib.parse.urlsplit(given if "://" in given else f"http://{given}")
  return url.hostname or "", url.port or (443 if url.scheme == "https" else 80)


def check_reachable(item: str) -> None:
  """Fails at once, in one line, where the store of `item` cannot be reached (no network, a wrong
  endpoint), instead of behind minutes of a cloud client's retries."""
  host, port = _endpoint(item)
  try:
    socket.create_connection((host, port), timeout=REACH_TIMEOUT_S).close()
  except OSError as e:
    raise ConnectionError(
      f"input: {item}: cannot reach its store at {host}:{port} ({e.strerror or e}); check the network, or the "
      "endpoint (STORAGE_EMULATOR_HOST, AWS_ENDPOINT_URL or --s3_endpoint_url in --beam-options)"
    ) from None


def list_remote(item: str) -> list[str]:
  """The files a remote input names: itself, every file under it (a prefix), or a glob's matches;
  hidden files (a path part starting with '.') and __pycache__ left out."""
  filesystems = _filesystems()
  check_reachable(item)
  pattern = item if _GLOB & set(item) else item.rstrip("/") + "/**"
  found = [m.path for m in filesystems.match([item])[0].metadata_list] if not _GLOB & set(item) else []
  if item.rstrip("/") in found:
    return [item.rstrip("/")]
  found = [m.path for m in filesystems.match([pattern])[0].metadata_list]
  if not found:
    raise FileNotFoundError(f"input: {item} does not exist")
  prefix = item.split("*")[0].rsplit("/", 1)[0]
  return [
    p for p in found if not any(part.startswith(".") or part == "__pycache__" for part in p[len(prefix) :].split("/"))
  ]


def remote_states(paths: Sequence[str]) -> list[tuple[int, int]]:
  """(size, last modified in ns) of each object, as its store reports them."""
  results = _filesystems().match(list(paths))
  return [
    (r.metadata_list[0].size_in_bytes, int(1e9 * (r.metadata_list[0].last_updated_in_seconds or 0))) for r in results
  ]


def remote_head_sha256(path: str, limit: int = 1 << 20) -> str:
  """sha256 of an object's first `limit` bytes (its size and time stand for the rest, as for a local file's sample)."""
  with open_remote(path) as f:
    return hashlib.sha256(f.read(limit)).hexdigest()


def remote_sizes(paths: Sequence[str]) -> list[int]:
  results = _filesystems().match(list(paths))
  return [r.metadata_list[0].size_in_bytes for r in results]


def open_remote(path: str) -> IO[bytes]:
  """The object's raw bytes (Beam's own decompression off)."""
  compression = optional_module("apache_beam.io.filesystem", "beam", "gs:// and s3:// inputs").CompressionTypes
  return _filesystems().open(path, compression_type=compression.UNCOMPRESSED)


def matches(path: str, patterns: Sequence[str]) -> bool:
  return any(fnmatch.fnmatch(path, p) or fnmatch.fnmatch(os.path.basename(path), p) for p in patterns)
