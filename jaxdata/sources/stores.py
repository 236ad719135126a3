"""Buckets: `gs://` and `s3://` paths, the providers' clients, retries.

The clients (boto3, google-cloud-storage: the `remote` extra) are imported
through importlib when a remote path is first opened, so `import jaxdata`
stays light. They honour the usual settings: credential chains,
`AWS_ENDPOINT_URL` for an S3-compatible endpoint, `STORAGE_EMULATOR_HOST`
for a GCS emulator (then without credentials). Each call is one attempt;
`with_retries` retries a store's own transfer errors with backoff, then
raises a `DatasetError` naming the object.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable
from typing import Any, Protocol

from jaxdata.errors import DatasetError, optional_module
from jaxdata.sources.parallelism import MAX_FETCH_THREADS

__all__ = ["ObjectStore", "RemotePath", "is_remote", "open_store", "with_retries"]

SCHEMES = ("gs://", "s3://")
FETCH_ATTEMPTS = 4  # a failed transfer is retried after 0.25, 0.5 and 1 s


def is_remote(path: str) -> bool:
  return path.startswith(SCHEMES)


class ObjectStore(Protocol):
  """The little a dataset needs of a bucket."""

  errors: tuple[type[BaseException], ...]  # what a failed transfer raises (retried, then named)

  def read(self, key: str, limit: int) -> bytes:
    """The object's first `limit` bytes (all of a smaller one)."""

  def download(self, key: str, destination: str) -> None:
    """Writes the object to a local file."""

  def upload(self, source: str, key: str) -> None:
    """Writes a local file as the object (replacing one there)."""

  def exists(self, key: str) -> bool:
    """Whether the object is there."""


@dataclasses.dataclass(frozen=True)
class RemotePath:
  """A dataset directory in a bucket: `s3://bucket/prefix`.

  >>> path = RemotePath.parse("s3://my-bucket/corpora/web/")
  >>> path.bucket, path.key("manifest.json"), path.url_of("web-00000.array_record")
  ('my-bucket', 'corpora/web/manifest.json', 's3://my-bucket/corpora/web/web-00000.array_record')
  """

  url: str
  scheme: str
  bucket: str
  prefix: str

  @classmethod
  def parse(cls, url: str) -> RemotePath:
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
  return [optional_module(name, "remote", f"{scheme}:// datasets") for name in names]


class _S3Store:
  def __init__(self, bucket: str) -> None:
    boto3, config, exceptions, transfers = _modules(
      "s3", "boto3", "botocore.config", "botocore.exceptions", "boto3.exceptions"
    )
    # One attempt per call: FETCH_ATTEMPTS retries above it, so a failure surfaces in seconds.
    settings = config.Config(
      connect_timeout=5,
      read_timeout=30,
      retries={"total_max_attempts": 1},
      max_pool_connections=MAX_FETCH_THREADS,  # a connection per fetch thread (parallelism.fetch_threads)
    )
    self.client = boto3.client("s3", config=settings)
    self.bucket = bucket
    self.client_error: type[BaseException] = exceptions.ClientError  # a 404 is one: `exists` tells them apart
    # boto3's own (Boto3Error: RetriesExceededError on bodies cut short every time, S3TransferFailedError) too.
    self.errors: tuple[type[BaseException], ...] = (
      exceptions.BotoCoreError,
      exceptions.ClientError,
      transfers.Boto3Error,
      OSError,
    )

  def read(self, key: str, limit: int) -> bytes:
    return self.client.get_object(Bucket=self.bucket, Key=key, Range=f"bytes=0-{limit - 1}")["Body"].read()

  def download(self, key: str, destination: str) -> None:
    self.client.download_file(self.bucket, key, destination)

  def upload(self, source: str, key: str) -> None:
    self.client.upload_file(source, self.bucket, key)

  def exists(self, key: str) -> bool:
    try:
      self.client.head_object(Bucket=self.bucket, Key=key)
    except self.client_error as error:  # a 404 is an answer, anything else a failed transfer
      if getattr(error, "response", {}).get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
        return False
      raise
    return True


class _GcsStore:
  def __init__(self, bucket: str) -> None:
    storage, credentials, api, auth, requests = _modules(
      "gs",
      "google.cloud.storage",
      "google.auth.credentials",
      "google.api_core.exceptions",
      "google.auth.exceptions",
      "requests",
    )
    if os.environ.get("STORAGE_EMULATOR_HOST"):  # an emulator takes no credentials
      client = storage.Client(project="jaxdata", credentials=credentials.AnonymousCredentials())
    else:
      client = storage.Client()
    # A connection per fetch thread (parallelism.fetch_threads); requests keeps 10 by default.
    session = client._http  # the client's session; its constructor takes it as _http
    if not getattr(session, "is_mtls", False):  # an mTLS session's adapter carries the client certificate
      adapter = requests.adapters.HTTPAdapter(pool_maxsize=MAX_FETCH_THREADS)
      for prefix in ("http://", "https://"):
        session.mount(prefix, adapter)
    self.bucket = client.bucket(bucket)
    self.errors: tuple[type[BaseException], ...] = (
      api.GoogleAPIError,
      auth.GoogleAuthError,
      requests.RequestException,
      OSError,
    )

  def read(self, key: str, limit: int) -> bytes:
    return self.bucket.blob(key).download_as_bytes(start=0, end=limit - 1, timeout=(5, 30), retry=None)

  def download(self, key: str, destination: str) -> None:
    self.bucket.blob(key).download_to_filename(destination, timeout=(5, 30), retry=None)

  def upload(self, source: str, key: str) -> None:
    self.bucket.blob(key).upload_from_filename(source, timeout=(5, 120), retry=None)

  def exists(self, key: str) -> bool:
    return bool(self.bucket.blob(key).exists(timeout=(5, 30), retry=None))


def open_store(path: RemotePath) -> ObjectStore:
  return _S3Store(path.bucket) if path.scheme == "s3" else _GcsStore(path.bucket)


def with_retries(
  what: str, transfer: Callable[[], Any], errors: tuple[type[BaseException], ...], attempts: int = FETCH_ATTEMPTS
) -> Any:
  """`transfer()`, retried with backoff on `errors`; then a DatasetError naming `what`."""
  for attempt in range(attempts):
    try:
      return transfer()
    except errors as e:
      if attempt == attempts - 1:
        raise DatasetError(
          f"{what}: fetch failed after {attempts} attempts ({type(e).__name__}: {str(e)[:300]})"
        ) from e
      time.sleep(0.25 * 2**attempt)
  raise AssertionError("unreachable")
