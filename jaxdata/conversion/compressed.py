"""Opening an input file's bytes: local or remote, decompressed for .gz and .zst, with its compressed
bytes counted; a damaged archive is an `InputFormatError` naming the file."""

from __future__ import annotations

import contextlib
import gzip
import io
import zlib
from collections.abc import Iterator
from typing import IO, Any, cast

from jaxdata.conversion.remote_inputs import open_remote
from jaxdata.errors import InputFormatError, installed_module, optional_module
from jaxdata.sources.stores import is_remote

__all__ = ["CountingReader", "open_binary", "readable_archive"]


def _zstd_errors() -> tuple[type[BaseException], ...]:
  module = _zstd_module(required=False)
  return (module.ZstdError,) if module is not None else ()


def _zstd_module(required: bool = True) -> Any:
  if required:
    return optional_module("zstandard", "zstd", ".zst inputs")
  return installed_module("zstandard")


@contextlib.contextmanager
def readable_archive(path: str) -> Iterator[None]:
  """A truncated, damaged or foreign .gz / .zst file (its CRC, its deflate stream, its end) as an
  InputFormatError naming the file, whatever reads it (texts, JSONL, TFRecords)."""
  try:
    yield
  except (EOFError, zlib.error, gzip.BadGzipFile, *_zstd_errors()) as e:  # type: ignore[misc]  # a tuple built at run time
    kind = "zstd" if path.endswith(".zst") else "gzip" if path.endswith(".gz") else "compressed"
    raise InputFormatError(f"{path}: not a readable {kind} file ({str(e)[:200] or type(e).__name__})") from e


def open_binary(path: str, raw: IO[bytes] | None = None) -> IO[bytes]:
  """The file's bytes (local, gs:// or s3://), decompressed for .gz and .zst (read from `raw` if given)."""
  if raw is None:
    raw = open_remote(path) if is_remote(path) else open(path, "rb")
  if path.endswith(".gz"):
    return cast(IO[bytes], gzip.GzipFile(fileobj=raw, mode="rb"))
  if path.endswith(".zst"):
    return io.BufferedReader(_ZstdReader(raw), buffer_size=1 << 20)
  return raw


class _ZstdReader(io.RawIOBase):
  """The frames of a .zst file, decompressed; a file that ends inside a frame raises ZstdError
  (zstandard's stream reader would end quietly, losing the rest of the frame)."""

  def __init__(self, raw: IO[bytes]) -> None:
    self._zstd = _zstd_module()
    self._raw = raw
    self._frame = self._zstd.ZstdDecompressor().decompressobj()
    self._pending = b""
    self._fed = False  # an empty file holds no frame, and is not truncated

  def readable(self) -> bool:
    return True

  def readinto(self, buffer: Any) -> int:
    while not self._pending:
      chunk = self._raw.read(1 << 20)
      if not chunk:
        if self._fed and not self._frame.eof:
          raise self._zstd.ZstdError("the file ends inside a frame (truncated)")
        return 0
      self._pending = self._decompress(chunk)
    count = min(len(buffer), len(self._pending))
    buffer[:count] = self._pending[:count]
    self._pending = self._pending[count:]
    return count

  def _decompress(self, chunk: bytes) -> bytes:
    self._fed = True
    out = [self._frame.decompress(chunk)]
    while self._frame.eof and self._frame.unused_data:  # the next frame of a multi-frame file
      rest = self._frame.unused_data
      self._frame = self._zstd.ZstdDecompressor().decompressobj()
      out.append(self._frame.decompress(rest))
    return b"".join(out)

  def close(self) -> None:
    self._raw.close()
    super().close()


class CountingReader(io.RawIOBase):
  """A file's raw bytes, counted as they are read: a compressed file's progress is in its own bytes."""

  def __init__(self, raw: IO[bytes]) -> None:
    self._raw = raw
    self.count = 0

  def readable(self) -> bool:
    return True

  def readinto(self, buffer: Any) -> int:
    data = self._raw.read(len(buffer))
    buffer[: len(data)] = data
    self.count += len(data)
    return len(data)

  def close(self) -> None:
    self._raw.close()
    super().close()
