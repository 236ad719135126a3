"""The images a vision record names, as the bytes they came in (JPEG, PNG, WebP: never re-encoded).

An image is given as::

    "photos/cat.jpg"                    a path: absolute, or relative to `image_root` (default: the input
                                        file's directory)
    b"\\xff\\xd8..."                      its bytes (Parquet binary, `from_iterable`)
    {"bytes": b"...", "path": "..."}   the Hugging Face `Image` feature's struct: its bytes, else its path
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
  if "://" in path:
    raise InputFormatError(f"{where}: {path!r} is a URL; jaxdata reads images from files or bytes (no network)")
  full = path if os.path.isabs(path) else os.path.join(root, path)
  try:
    size = os.path.getsize(full)
    if size > MAX_IMAGE_BYTES:
      raise InputFormatError(f"{where}: {full} is {size:,} bytes, over the {MAX_IMAGE_BYTES:,}-byte limit")
    with open(full, "rb") as f:
      return f.read()
  except OSError as error:
    raise InputFormatError(f"{where}: image file {full} cannot be read ({error.strerror})") from error


def image_bytes(value: Any, root: str, where: str) -> bytes:
  """The encoded image `value` names (module docstring), or an `InputFormatError` naming `where`."""
  if isinstance(value, Mapping):
    inline = next((value[k] for k in IMAGE_PART_KEYS if k in value and value[k] is not None), None)
    if inline is not None:
      return image_bytes(inline, root, where)
    if value.get("bytes") is not None:
      if not isinstance(value["bytes"], (bytes, bytearray, memoryview)):
        raise InputFormatError(f"{where}: the image's 'bytes' is {type(value['bytes']).__name__}, not bytes")
      return image_bytes(value["bytes"], root, where)
    if value.get("path"):
      return image_bytes(str(value["path"]), root, where)
    raise InputFormatError(
      f"{where}: an image part names no image (no 'image', 'bytes' or 'path', and no 'images' left)"
    )
  if isinstance(value, (bytes, bytearray, memoryview)):
    if not len(value):
      raise InputFormatError(f"{where}: the image's bytes are empty")
    return bytes(value)
  if isinstance(value, str) and value:
    return _from_path(value, root, where)
  raise InputFormatError(
    f"{where}: an image is a path, bytes or a {{'bytes', 'path'}} struct, not {type(value).__name__}"
  )
