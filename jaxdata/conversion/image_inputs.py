"""The images a vision record names, as the bytes they came in (JPEG, PNG, WebP: never re-encoded).

An image is given as::

    "photos/cat.jpg"                    a path: absolute, or relative to `image_root` (default: the input
                                        file's directory)
    b"\\xff\\xd8..."                      its bytes (Parquet binary, `from_iterable`)
    {"bytes": b"...", "path": "..."}   the Hugging Face `Image` feature's struct: its bytes, else its path
    "data:image/png;base64,..."        a data URL (OpenAI's `{"type": "image_url", "image_url": {"url": ...}}`)
    {"type": "image", "image": X}      a chat content part with the image inline (X any of the above)

Where images are listed in the record (`images`), a chat's `{"type": "image"}` parts take them in
order; a part that holds its own image takes that one. Every refusal names the record and the image.

>>> import os, tempfile
>>> root = tempfile.mkdtemp()
>>> with open(os.path.join(root, "a.png"), "wb") as f:
...   _ = f.write(b"\\x89PNG...")
>>> image_bytes("a.png", root, "x.jsonl line 1, image 0")[:4]
b'\\x89PNG'
"""

from __future__ import annotations

import base64
import binascii
import os
from collections.abc import Mapping
from typing import Any

from jaxdata.errors import InputFormatError

__all__ = ["IMAGE_PART_KEYS", "image_bytes", "is_image_part"]

IMAGE_PART_KEYS = ("image", "image_url")  # where a content part holds its own image
MAX_IMAGE_BYTES = 1 << 28  # 256 MiB: an encoded image larger than this is refused before it is read


def is_image_part(part: Any) -> bool:
  """Whether a chat content part stands for an image (as the published templates test it)."""
  return isinstance(part, Mapping) and (part.get("type") == "image" or any(k in part for k in IMAGE_PART_KEYS))


def _from_path(path: str, root: str, where: str) -> bytes:
  if path.startswith("data:"):  # a data URL (OpenAI's image_url parts): its bytes are in it
    head, _, payload = path.partition(",")
    if not head.endswith(";base64"):
      raise InputFormatError(f"{where}: a data URL without ';base64' holds no image bytes")
    try:
      return image_bytes(base64.b64decode(payload, validate=True), root, where)
    except binascii.Error as error:
      raise InputFormatError(f"{where}: a data URL whose base64 does not decode ({error})") from error
  if "://" in path:
    raise InputFormatError(f"{where}: {path[:200]!r} is a URL; jaxdata reads images from files or bytes (no network)")
  full = path if os.path.isabs(path) else os.path.join(root, path)
  if not os.path.isfile(full):  # missing, a directory, a device, a FIFO, a NUL in the name: no file to read
    shown = "does not exist" if not os.path.lexists(full.replace("\0", "")) else "is not a regular file"
    raise InputFormatError(f"{where}: image file {full!r} cannot be read ({shown})")
  try:
    size = os.path.getsize(full)
    if size > MAX_IMAGE_BYTES:
      raise InputFormatError(f"{where}: {full} is {size:,} bytes, over the {MAX_IMAGE_BYTES:,}-byte limit")
    with open(full, "rb") as f:
      return f.read(MAX_IMAGE_BYTES + 1)  # a file grown past its size since: still bounded
  except OSError as error:
    raise InputFormatError(f"{where}: image file {full!r} cannot be read ({error.strerror})") from error


def image_bytes(value: Any, root: str, where: str) -> bytes:
  """The encoded image `value` names (module docstring), or an `InputFormatError` naming `where`."""
  if isinstance(value, Mapping):
    inline = next((value[k] for k in IMAGE_PART_KEYS if k in value and value[k] is not None), None)
    if inline is not None:
      return image_bytes(inline, root, where)
    stored, path = value.get("bytes"), value.get("path", value.get("url"))
    if stored is not None and not isinstance(stored, (bytes, bytearray, memoryview)):
      raise InputFormatError(f"{where}: the image's 'bytes' is {type(stored).__name__}, not bytes")
    if stored:  # Hugging Face's struct: its bytes, else its path
      return image_bytes(stored, root, where)
    if path is not None and not isinstance(path, str):
      raise InputFormatError(f"{where}: the image's 'path' is {type(path).__name__}, not a string")
    if path:
      return image_bytes(path, root, where)
    raise InputFormatError(
      f"{where}: an image part names no image (no 'image', 'bytes' or 'path', and no 'images' left)"
    )
  if isinstance(value, (bytes, bytearray, memoryview)):
    if not len(value):
      raise InputFormatError(f"{where}: the image's bytes are empty")
    return bytes(value)
  if isinstance(value, str):
    if not value:
      raise InputFormatError(f"{where}: the image's path is empty")
    return _from_path(value, root, where)
  raise InputFormatError(
    f"{where}: an image is a path, bytes or a {{'bytes', 'path'}} struct, not {type(value).__name__}"
  )
