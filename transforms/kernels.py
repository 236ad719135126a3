"""The per-step loops, in C where it was built, in NumPy otherwise.

`write_runs` fills a step's six features from runs of grid slots (with a
fine-tuning mask, the loss mask from the targets' trained flags),
`restart_segments` starts a segment at every document start inside a
window, and `first_fit_rows` / `best_fit_rows` place pieces into rows
(first fit in C). The C versions
(`jaxdata.transforms._native`, compiled from ``transforms/_native.c`` at
install) write
every feature of a run in one pass, with no per-token index array. They
keep the GIL for calls as short as a step's (~0.07 ms for 32 x 2048: giving
it to a busy training thread would cost up to a 5 ms switch interval to get
it back) and release it for calls of more than ~1M items. Both versions give identical outputs (tests/test_kernels.py);
the install leaves the extension out where no C compiler is found, and
``JAXDATA_NATIVE=0`` chooses the NumPy versions (to compare, or to debug).

>>> import numpy as np
>>> first_fit_rows(np.array([3, 3, 2, 2]), None, rows=2, seq_len=5).tolist()
[0, 1, 0, 1]
"""

from __future__ import annotations

import functools

import numpy as np

from jaxdata._native_switch import native_wanted
from jaxdata.transforms.fit import best_fit, first_fit

try:
  import jaxdata.transforms._native as _native
except ImportError:  # built without a C compiler: the NumPy versions below
  _native = None

__all__ = [
  "BUILT",
  "NATIVE",
  "best_fit_rows",
  "first_fit_rows",
  "restart_segments",
  "write_runs",
]


BUILT: bool = _native is not None  # the extension was compiled at install
NATIVE: bool = BUILT and native_wanted()  # the C loops run
# Buffer dtypes the C loop reads (native byte order), as (kind, itemsize) -> its type code.
_BUFFER_KINDS = {("i", 1): "b", ("u", 1): "B", ("i", 2): "h", ("u", 2): "H", ("i", 4): "i", ("u", 4): "I"}


def write_runs(
  buffer: np.ndarray,
  run_src: np.ndarray,
  run_dst: np.ndarray,
  run_len: np.ndarray,
  run_segment: np.ndarray,
  run_source: np.ndarray,
  *,
  flat: dict[str, np.ndarray],
  native: bool | None = None,
  trained: np.ndarray | None = None,
) -> None:
  """For each run r (`run_len[r]` grid slots from `run_dst[r]`)::

      tokens[d + j]  = buffer[s + j]        targets[d + j] = buffer[s + j + 1]
      segment_ids    = run_segment[r]       source_ids     = run_source[r]
      positions      = j, loss_mask = 1     (0 and 0 where run_segment[r] == 0: padding)
      with `trained` (uint8, laid out as `buffer`): loss_mask = trained[s + j + 1]

  with s = `run_src[r]`, d = `run_dst[r]`. `flat` holds the six features as
  flat contiguous int32 arrays of one size; the runs must tile them in grid
  order (the NumPy version relies on it). `native` None: `NATIVE`; a
  buffer in another byte order always takes the NumPy version.
  """
  if trained is not None and (trained.dtype != np.uint8 or trained.size != buffer.size):
    raise ValueError(f"write_runs: trained must be uint8 laid out as the buffer ({buffer.size} items)")
  kind = _BUFFER_KINDS.get((buffer.dtype.kind, buffer.dtype.itemsize)) if buffer.dtype.isnative else None
  if (NATIVE if native is None else native) and kind is not None:
    _native.write_runs(
      buffer,
      kind,
      *(np.ascontiguousarray(a, np.int64) for a in (run_src, run_dst, run_len)),
      *(np.ascontiguousarray(a, np.int32) for a in (run_segment, run_source)),
      *(flat[name] for name in ("tokens", "targets", "segment_ids", "positions", "loss_mask", "source_ids")),
      None if trained is None else np.ascontiguousarray(trained),
    )
    return
  grid = flat["tokens"].size
  _check_runs(buffer.size, grid, run_src, run_dst, run_len, run_segment, run_source=run_source, flat=flat)
  # Every slot i of a run reads src = i - the run's start + the run's first source slot; the
  # gather takes intp indices in "clip" mode (the runs were checked above).
  src = np.repeat(run_src - run_dst, run_len)
  src += _grid_slots(grid, np.intp)
  if buffer.dtype == np.int32:
    buffer.take(src, out=flat["tokens"], mode="clip")
  else:  # a narrower buffer: gather in its dtype, widen while copying
    flat["tokens"][...] = buffer.take(src, mode="clip")
  # Targets: inside a run, the next slot's token; at a run's last slot, the token after it.
  flat["targets"][:-1] = flat["tokens"][1:]
  flat["targets"][run_dst + run_len - 1] = buffer[run_src + run_len]
  flat["segment_ids"][...] = np.repeat(run_segment, run_len)
  flat["source_ids"][...] = np.repeat(run_source, run_len)
  flat["loss_mask"][...] = np.repeat((run_segment != 0).astype(np.int32), run_len)
  slot_dtype = np.int32 if grid < 2**31 else np.int64
  positions = _grid_slots(grid, slot_dtype) - np.repeat(run_dst.astype(slot_dtype), run_len)
  positions *= flat["loss_mask"]
  flat["positions"][...] = positions
  if trained is not None:  # after positions: those count every slot of a piece
    flat["loss_mask"] &= trained.take(src + 1, mode="clip")


_RUN_NAMES = ("run_dst", "run_len", "run_segment", "run_source")
_FEATURE_NAMES = ("tokens", "targets", "segment_ids", "positions", "loss_mask", "source_ids")


def _check_runs(
  buffer_size: int,
  grid: int,
  run_src: np.ndarray,
  run_dst: np.ndarray,
  run_len: np.ndarray,
  run_segment: np.ndarray,
  *,
  run_source: np.ndarray,
  flat: dict[str, np.ndarray],
) -> None:
  """What the C loop refuses, refused in the same words before anything is written."""
  for name, values in zip(_RUN_NAMES, (run_dst, run_len, run_segment, run_source)):
    if np.size(values) != np.size(run_src):
      raise ValueError(f"write_runs: {name} holds {np.size(values)} items, expected {np.size(run_src)}")
  for name in _FEATURE_NAMES:
    if flat[name].size != grid:
      raise ValueError(f"write_runs: {name} holds {flat[name].size} items, expected {grid}")
  src, dst, length = (np.asarray(a, np.int64) for a in (run_src, run_dst, run_len))
  outside = (length < 0) | (dst < 0) | (src < 0) | (dst > grid - length) | (src > buffer_size - 1 - length)
  if outside.any():
    r = int(np.argmax(outside))
    raise ValueError(
      f"write_runs: run {r} (src {src[r]}, dst {dst[r]}, length {length[r]}) lies outside the "
      f"buffer ({buffer_size} tokens) or the grid ({grid} slots)"
    )


def restart_segments(
  starts: np.ndarray, seq_len: int, segment_ids: np.ndarray, positions: np.ndarray, native: bool | None = None
) -> None:
  """Documents that start inside rows (windows across documents), in place::

      from each start s (grid slots) to the next start of its row or the row's end:
      segment_ids += how many of its row's starts lie at or before the slot   (not on padding: 0)
      positions    = min(positions, slot - s)

  `starts`: int64 grid slots (sorted here); `segment_ids`, `positions`: flat contiguous int32
  of one size, a multiple of `seq_len`.

  >>> segments, positions = np.array([1, 1, 1, 1, 1, 0], np.int32), np.arange(6, dtype=np.int32)
  >>> restart_segments(np.array([2, 4]), 6, segments, positions)
  >>> segments.tolist(), positions.tolist()
  ([1, 1, 2, 2, 3, 0], [0, 1, 0, 1, 0, 1])
  """
  starts = np.sort(np.asarray(starts, np.int64))
  for name, array in (("segment_ids", segment_ids), ("positions", positions)):
    if array.dtype != np.int32 or not array.flags.c_contiguous:
      raise ValueError(f"restart_segments: {name} must be flat contiguous int32, got {array.dtype}")
  if NATIVE if native is None else native:
    _native.restart_segments(starts, seq_len, segment_ids, positions)
    return
  grid = segment_ids.size
  if positions.size != grid or seq_len < 1 or grid % seq_len:
    raise ValueError("restart_segments: segment_ids and positions must have one size, a multiple of seq_len")
  if starts.size and (starts[0] < 0 or starts[-1] >= grid):
    raise ValueError("restart_segments: a start lies outside the grid")
  bump = np.bincount(starts, minlength=grid).astype(np.int32)
  bumps = np.cumsum(bump.reshape(-1, seq_len), axis=1, dtype=np.int32).reshape(-1)
  segment_ids += np.where(segment_ids > 0, bumps, 0).astype(np.int32)
  marker = np.full(grid, -(1 << 40), np.int64)
  marker[starts] = starts
  last_start = np.maximum.accumulate(marker.reshape(-1, seq_len), axis=1).reshape(-1)  # in its own row
  since = _grid_slots(grid, np.int64) - last_start
  np.minimum(positions, since, out=positions, casting="unsafe")


def first_fit_rows(
  lengths: np.ndarray,
  documents: np.ndarray | None,
  rows: int,
  seq_len: int,
  max_segments: int = 0,
  native: bool | None = None,
) -> np.ndarray:
  """`fit.first_fit` on arrays: the row of each piece (-1: no room), int64."""
  lengths = np.ascontiguousarray(lengths, np.int64)
  if NATIVE if native is None else native:
    out = np.empty(lengths.size, np.int64)
    _native.first_fit(
      lengths,
      None if documents is None else np.ascontiguousarray(documents, np.int64),
      rows,
      seq_len,
      out,
      max_segments,
    )
    return out
  placed = first_fit(lengths.tolist(), rows, seq_len, None if documents is None else documents.tolist(), max_segments)
  return np.asarray(placed, dtype=np.int64)


def best_fit_rows(
  lengths: np.ndarray, documents: np.ndarray | None, rows: int, seq_len: int, max_segments: int = 0
) -> np.ndarray:
  """`fit.best_fit` on arrays (Python only: its sorted keys are not a hot path here)."""
  documents_list = None if documents is None else np.asarray(documents).tolist()
  placed = best_fit(np.asarray(lengths).tolist(), rows, seq_len, documents_list, max_segments)
  return np.asarray(placed, dtype=np.int64)


@functools.lru_cache(maxsize=4)
def _grid_slots(grid: int, dtype: type) -> np.ndarray:
  """0 .. grid - 1, read-only: a step's slot numbers (cached: the same few step shapes recur)."""
  slots: np.ndarray = np.arange(grid, dtype=dtype)
  slots.flags.writeable = False
  return slots
