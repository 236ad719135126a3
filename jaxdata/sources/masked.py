"""Records of fine-tuning datasets: the ids, then one mask byte (0 or 1) per id::

    record i   | n_i ids (n_i x itemsize bytes) | n_i mask bytes |

`records_with_masks` lays them out to write, `split_masked` takes a read's
joined records apart (in C where the extension was built, else NumPy; the
same arrays). Neither loops over records in Python.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from jaxdata._native_switch import native_wanted

try:
  import jaxdata.sources._masked as _masked
except ImportError:  # built without a C compiler: the NumPy version below
  _masked = None

__all__ = ["NATIVE", "records_with_masks", "split_masked"]

NATIVE: bool = _masked is not None and native_wanted()


def _is_id(lengths: np.ndarray, itemsize: int) -> np.ndarray:
  """Per byte of the joined records: whether it belongs to an id (else to a mask)."""
  parts = np.stack([lengths * itemsize, lengths], axis=1).ravel()
  return np.repeat(np.tile(np.array([True, False]), lengths.size), parts)


def split_masked(
  joined: np.ndarray | Sequence[bytes],
  lengths: np.ndarray,
  dtype: np.dtype,
  native: bool | None = None,
  highest: int = 1,
) -> tuple[np.ndarray, np.ndarray, int]:
  """Masked records back to back (uint8 `joined`, or one bytes object per record: the C version
  copies from each without joining them first) -> (ids, masks, index of the first mask byte above
  `highest`, or -1). (A mask byte is 0 or 1; a preference pair's is up to 3.)

  >>> ids, mask, bad = split_masked(np.frombuffer(bytes([5, 0, 6, 0, 1, 0, 7, 0, 1]), np.uint8),
  ...                               np.array([2, 1]), np.dtype("<u2"))
  >>> ids.tolist(), mask.tolist(), bad
  ([5, 6, 7], [1, 0, 1], -1)
  """
  lengths = np.ascontiguousarray(lengths, np.int64)
  total, itemsize = int(lengths.sum()), np.dtype(dtype).itemsize
  separate = isinstance(joined, (tuple, list))
  if NATIVE if native is None else native:
    tokens, mask = np.empty(total, dtype), np.empty(total, np.uint8)
    source = joined if separate else np.ascontiguousarray(joined)
    bad = int(_masked.split_masked(source, lengths, itemsize, tokens.view(np.uint8), mask))
    return tokens, mask, bad if bad < 0 or highest == 1 else _first_above(mask, highest, bad)
  flat = np.frombuffer(b"".join(joined), np.uint8) if separate else np.asarray(joined)
  is_id = _is_id(lengths, itemsize)
  tokens, mask = flat[is_id].view(dtype), flat[~is_id]
  return tokens, mask, _first_above(mask, highest, 0)


def _first_above(mask: np.ndarray, highest: int, start: int) -> int:
  above = np.flatnonzero(mask[start:] > highest)
  return start + int(above[0]) if above.size else -1


def records_with_masks(ids: np.ndarray, lengths: np.ndarray, mask: np.ndarray) -> bytes:
  """Records of ids then their mask bytes, back to back (one vectorised interleave, no loop)."""
  is_id = _is_id(lengths, ids.dtype.itemsize)
  out = np.empty(is_id.size, np.uint8)
  out[is_id] = ids.view(np.uint8)
  out[~is_id] = mask
  return out.tobytes()
