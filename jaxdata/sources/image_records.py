"""Records of image-text datasets: a masked record (ids, then a mask byte per id), then the example's images
as they were stored (JPEG, PNG, WebP bytes: never re-encoded)::

    record i   | n_i ids | n_i mask bytes | k | k x (bytes, height, width) | image 0 | image 1 | ...
                                           u32  u32 each                     as stored

Beside each shard, two per-record columns say what planning needs without reading a record:
`num_images` (k) and `num_patches` (the patches the dataset's image policy makes of them).

>>> trailer = image_trailer([b"\\x89PNG-a", b"jpg"], np.array([[4, 5], [6, 7]]))
>>> [(blob, h, w) for blob, h, w in split_image_trailer(trailer, "x")]
[(b'\\x89PNG-a', 4, 5), (b'jpg', 6, 7)]
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from jaxdata.errors import DatasetError

__all__ = ["IMAGE_COLUMNS", "image_trailer", "split_image_trailer"]

IMAGE_COLUMNS = ("num_images", "num_patches")
_HEADER = np.dtype("<u4")


def image_trailer(images: Sequence[bytes], sizes: np.ndarray) -> bytes:
  """The bytes after a record's mask: the count, each image's (byte length, height, width), the images."""
  sizes = np.asarray(sizes, np.int64).reshape(-1, 2)
  if sizes.shape[0] != len(images):
    raise ValueError(f"sizes: {sizes.shape[0]} sizes for {len(images)} images")
  header = np.empty(1 + 3 * len(images), _HEADER)
  header[0] = len(images)
  header[1:] = np.column_stack([[len(b) for b in images], sizes]).reshape(-1) if images else []
  return header.tobytes() + b"".join(images)


def split_image_trailer(trailer: bytes, where: str) -> list[tuple[bytes, int, int]]:
  """(image bytes, height, width) of each image in a record's trailer; a `DatasetError` naming `where` for
  a trailer whose header and bytes disagree (a damaged record)."""
  if len(trailer) < _HEADER.itemsize:
    raise DatasetError(f"{where}: its image header is missing (damaged, or not an image-text record)")
  count = int(np.frombuffer(trailer, _HEADER, 1)[0])
  start = _HEADER.itemsize * (1 + 3 * count)
  if len(trailer) < start:
    raise DatasetError(f"{where}: its image header promises {count} images but the record ends first (damaged)")
  table = np.frombuffer(trailer, _HEADER, 3 * count, _HEADER.itemsize).reshape(count, 3).astype(np.int64)
  ends = start + np.cumsum(table[:, 0])
  if (ends[-1] if count else start) != len(trailer):
    raise DatasetError(f"{where}: its images take {len(trailer) - start} bytes, its header says otherwise (damaged)")
  starts = ends - table[:, 0]
  return [(trailer[a:b], int(h), int(w)) for a, b, (_, h, w) in zip(starts.tolist(), ends.tolist(), table.tolist())]
