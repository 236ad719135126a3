"""Records of image-text datasets: a masked record (ids, then a mask byte per id), then the example's images
as they were stored (JPEG, PNG, WebP bytes: never re-encoded)::

    record i   | n_i ids | n_i mask bytes | k | k x (bytes, height, width, offset) | image 0 | image 1 | ...
                                           u32  u32 each                             as stored

`offset` is where the image's run of image tokens starts among the record's ids (what the batch's
`image_token_offsets` are made from; found at conversion, where the text was tokenized).

Beside each shard, two per-record columns say what planning needs without reading a record:
`num_images` (k) and `num_patches` (the patches the dataset's image policy makes of them).

>>> trailer = image_trailer([b"\\x89PNG-a", b"jpg"], np.array([[4, 5, 1], [6, 7, 30]]))
>>> split_image_trailer(trailer, "x")
[(b'\\x89PNG-a', 4, 5, 1), (b'jpg', 6, 7, 30)]
>>> int(trailer_sizes(np.array([2]), np.array([9]))[0]) == len(trailer)
True
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from jaxdata.errors import DatasetError

__all__ = ["IMAGE_COLUMNS", "ImageEntry", "image_trailer", "split_image_trailer", "trailer_sizes"]

IMAGE_COLUMNS = ("num_images", "num_patches")
ImageEntry = tuple[bytes, int, int, int]  # an image as stored, its height and width, where its tokens start
_HEADER = np.dtype("<u4")
_PER_IMAGE = 4  # byte length, height, width, token offset


def trailer_sizes(counts: np.ndarray, image_bytes: np.ndarray) -> np.ndarray:
  """Per record, its trailer's bytes: the header for `counts` images and `image_bytes` of them in all."""
  counts = np.asarray(counts, np.int64)
  return _HEADER.itemsize * (1 + _PER_IMAGE * counts) + np.asarray(image_bytes, np.int64)


def image_trailer(images: Sequence[bytes], table: np.ndarray) -> bytes:
  """The bytes after a record's mask: the count, each image's (byte length, height, width, token offset) from
  `table` [k, 3] (height, width, offset), then the images."""
  table = np.asarray(table, np.int64).reshape(-1, _PER_IMAGE - 1)
  if table.shape[0] != len(images):
    raise ValueError(f"table: {table.shape[0]} rows for {len(images)} images")
  header = np.empty(1 + _PER_IMAGE * len(images), _HEADER)
  header[0] = len(images)
  header[1:] = np.column_stack([[len(b) for b in images], table]).reshape(-1) if images else []
  return header.tobytes() + b"".join(images)


def split_image_trailer(trailer: bytes, where: str) -> list[ImageEntry]:
  """(image bytes, height, width, token offset) of each image in a record's trailer; a `DatasetError` naming
  `where` for a trailer whose header and bytes disagree (a damaged record)."""
  if len(trailer) < _HEADER.itemsize:
    raise DatasetError(f"{where}: its image header is missing (damaged, or not an image-text record)")
  count = int(np.frombuffer(trailer, _HEADER, 1)[0])
  start = _HEADER.itemsize * (1 + _PER_IMAGE * count)
  if len(trailer) < start:
    raise DatasetError(f"{where}: its image header promises {count} images but the record ends first (damaged)")
  table = np.frombuffer(trailer, _HEADER, _PER_IMAGE * count, _HEADER.itemsize).reshape(count, _PER_IMAGE)
  table = table.astype(np.int64)
  ends = start + np.cumsum(table[:, 0])
  if (ends[-1] if count else start) != len(trailer):
    raise DatasetError(f"{where}: its images take {len(trailer) - start} bytes, its header says otherwise (damaged)")
  starts = ends - table[:, 0]
  return [
    (trailer[a:b], int(h), int(w), int(at))
    for a, b, (_, h, w, at) in zip(starts.tolist(), ends.tolist(), table.tolist())
  ]
