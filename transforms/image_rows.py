"""Image-text rows: each row's images decoded, cut into patches and laid out beside its tokens.

The tokens are assembled as any row's (`assemble_rows`: every example whole); this adds the images of the
examples in each row, in column order, so that a row's patches follow its text::

    row       [ example a: t t I I I I t t | example b: t I I t t | pad ]        I: image tokens
    images    a0 (4 tokens, 16 patches), b0 (2 tokens, 8 patches)
    patches   [ a0 x 16 | b0 x 8 | 0 ... ]                         uint8 [P, 3 p p]
    patch_segment_ids  1 .. 1  2 .. 2  0 ..                        the example's segment in the row
    patch_image_ids    1 .. 1  2 .. 2  0 ..                        the image's rank in the row, from 1
    patch_positions    (t, h, w) of each patch in its image's grid
    image_token_offsets  [2, 10, -1 ...]   image_grid [(1, 4, 4), (1, 2, 4), 0 ...]   num_images 2

With the native-resolution policy, `rope_positions` [3, S] are Qwen2-VL's multimodal rotary positions: a
text token's three equal its position; an image token's are its run's start plus (0, h, w) in the merged
grid; the text after an image continues from its start plus the larger merged side (Qwen2-VL's
`get_rope_index`, per segment).

Images are decoded here, in the read stage (this process, or the reader processes); never by the planner.

>>> merged_positions(np.array([[1, 4, 4]]), merge=2).tolist()[:3]
[[0, 0, 0], [0, 0, 1], [0, 1, 0]]
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from jaxdata._lazy import lazy_module
from jaxdata.config.image_packing import ImagePacking
from jaxdata.errors import DatasetError
from jaxdata.transforms.pieces import Pieces
from jaxdata.vision.policies import FixedSize, NativeResolution

__all__ = ["ImagesPlaced", "assemble_images", "merged_positions"]

decode = lazy_module("jaxdata.vision.decode")  # Pillow (the `vision` extra) loads with the first image read

# An image as a record stores it (`jaxdata.sources.image_records.ImageEntry`): its bytes, height, width and
# where its image tokens start among the record's ids.
ImageEntry = tuple[bytes, int, int, int]


def merged_positions(grids: np.ndarray, merge: int) -> np.ndarray:
  """(t, h, w) of every patch of images with `grids` [n, 3], in the processor's order (merge x merge blocks
  row by row; with merge 1, row by row), the images one after another: int64 [sum of patches, 3]."""
  grids = np.asarray(grids, np.int64).reshape(-1, 3)
  counts = grids.prod(1)
  owner = np.repeat(np.arange(grids.shape[0]), counts)
  k = np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)
  t, gh, gw = (grids[owner, i] for i in range(3))
  per_frame = gh * gw
  frame, k = k // per_frame, k % per_frame
  block, within = k // (merge * merge), k % (merge * merge)
  blocks_wide = gw // merge
  h = (block // blocks_wide) * merge + within // merge
  w = (block % blocks_wide) * merge + within % merge
  return np.stack([frame, h, w], 1)


@dataclasses.dataclass(frozen=True)
class ImagesPlaced:
  """A step's images in row order: per image its piece, its row, its rank in the row, its first token's column,
  its grid, and its stored bytes and name (for the decoder's errors)."""

  piece: np.ndarray
  row: np.ndarray
  rank: np.ndarray
  token_column: np.ndarray
  grid: np.ndarray
  blobs: list[bytes]
  names: list[str]


def _placed(
  pieces: Pieces, host_row: np.ndarray, column: np.ndarray, images: Sequence[list[ImageEntry]], policy: Policy
) -> ImagesPlaced:
  """Every image of the step's pieces, ordered by row, then column, then its place in its example."""
  order = np.lexsort((column, host_row))
  with_images = order[np.fromiter(map(len, images), np.int64, len(images))[order] > 0].tolist()
  entries = [(i, j, entry) for i in with_images for j, entry in enumerate(images[i])]  # per image
  piece = np.array([i for i, _, _ in entries], np.int64)
  sizes = np.array([[e[1], e[2], e[3]] for _, _, e in entries], np.int64).reshape(-1, 3)
  row = host_row[piece]
  first = np.r_[True, row[1:] != row[:-1]] if row.size else np.zeros(0, bool)
  starts = np.flatnonzero(first)
  rank = np.arange(row.size) - np.repeat(starts, np.diff(np.r_[starts, row.size]))
  grid = policy.grids(sizes[:, 0], sizes[:, 1]) if row.size else np.zeros((0, 3), np.int64)
  names = [f"record {int(pieces.record[i])} of dataset {int(pieces.dataset[i])}, image {j}" for i, j, _ in entries]
  return ImagesPlaced(piece, row, rank, column[piece] + sizes[:, 2], grid, [e[0] for _, _, e in entries], names)


Policy = FixedSize | NativeResolution


def assemble_images(
  batch: dict[str, np.ndarray],
  pieces: Pieces,
  host_row: np.ndarray,
  column: np.ndarray,
  images: Sequence[list[ImageEntry]],
  *,
  packing: ImagePacking,
  planned: tuple[np.ndarray | None, np.ndarray | None] = (None, None),
) -> dict[str, np.ndarray]:
  """Writes the image features (`image_features`) of the step into `batch`, whose per-token features are
  assembled already and whose image arrays are allocated (see `StepLayout`). `planned`: per piece, the images
  and patches its record's columns say (what it was planned with); a `DatasetError` names an example whose
  images differ from them or do not fit its row (its column files are stale or damaged)."""
  policy = packing.resolved
  placed = _placed(pieces, host_row, column, images, policy)
  counts = placed.grid.prod(1)
  _check_planned(pieces, images, placed, counts, planned)
  patch_start = np.cumsum(counts) - counts
  row_first = np.searchsorted(placed.row, placed.row, side="left")
  in_row = patch_start - patch_start[row_first]  # where each image's patches start in its row
  over = np.flatnonzero((placed.rank >= packing.max_images) | (in_row + counts > packing.max_patches))
  if over.size:
    raise DatasetError(
      f"{placed.names[int(over[0])]}: its images do not fit the row they were planned into (the dataset's "
      "num_patches / num_images columns are stale or damaged; convert again)"
    )
  _fill(batch)
  row, rank = placed.row, placed.rank
  batch["num_images"][:] = np.bincount(row, minlength=batch["num_images"].shape[0])
  batch["image_token_offsets"][row, rank] = placed.token_column
  batch["image_grid"][row, rank] = placed.grid
  merge = policy.merge if isinstance(policy, NativeResolution) else 1
  patch_row = np.repeat(row, counts)
  slot = np.arange(int(counts.sum())) - np.repeat(patch_start - in_row, counts)
  segment = batch["segment_ids"][row, placed.token_column]
  batch["patch_segment_ids"][patch_row, slot] = np.repeat(segment, counts)
  batch["patch_image_ids"][patch_row, slot] = np.repeat(rank + 1, counts)
  batch["patch_positions"][patch_row, slot] = merged_positions(placed.grid, merge)
  patches = batch["patches"]
  for i, (blob, name) in enumerate(zip(placed.blobs, placed.names)):  # decoding is per image by nature
    cut = decode.decoded_patches(blob, name, policy)
    patches[row[i], in_row[i] : in_row[i] + counts[i]] = cut
  if "rope_positions" in batch:
    batch["rope_positions"][:] = rope_positions(batch["positions"], batch["segment_ids"], placed, merge)
  return batch


def _check_planned(
  pieces: Pieces,
  images: Sequence[list[ImageEntry]],
  placed: ImagesPlaced,
  counts: np.ndarray,
  planned: tuple[np.ndarray | None, np.ndarray | None],
) -> None:
  """Each piece's images and patches as read against its record's columns."""
  planned_images, planned_patches = planned
  if planned_images is None or planned_patches is None:
    return
  found = np.fromiter(map(len, images), np.int64, len(pieces))
  by_piece = np.bincount(placed.piece, weights=counts, minlength=len(pieces)).astype(np.int64)
  wrong = np.flatnonzero(
    (found != np.asarray(planned_images, np.int64)) | (by_piece != np.asarray(planned_patches, np.int64))
  )
  if wrong.size:
    i = int(wrong[0])
    raise DatasetError(
      f"record {int(pieces.record[i])} of dataset {int(pieces.dataset[i])}: holds {int(found[i])} images of "
      f"{int(by_piece[i])} patches, its columns say {int(planned_images[i])} and {int(planned_patches[i])} (the "
      "num_images / num_patches column files are stale or damaged; convert again)"
    )


def _fill(batch: dict[str, np.ndarray]) -> None:
  for name in ("patches", "patch_segment_ids", "patch_image_ids", "patch_positions", "image_grid", "num_images"):
    batch[name][...] = 0
  batch["image_token_offsets"][...] = -1


def rope_positions(positions: np.ndarray, segment_ids: np.ndarray, placed: ImagesPlaced, merge: int) -> np.ndarray:
  """[rows, 3, S]: Qwen2-VL's multimodal rotary positions of rows whose 1-D `positions` restart per segment
  (module docstring)."""
  rows, seq_len = positions.shape
  merged = placed.grid // np.array([1, merge, merge])
  tokens = merged.prod(1)
  ends = placed.token_column + tokens
  shift = np.zeros((rows, seq_len + 1), np.int64)  # after each image, its text runs on from start + larger side
  np.add.at(shift, (placed.row, ends), np.maximum(merged[:, 1], merged[:, 2]) - tokens)
  total = np.cumsum(shift[:, :seq_len], axis=1)
  first = np.maximum.accumulate(np.where(_segment_starts(segment_ids), np.arange(seq_len), 0), axis=1)
  text = positions.astype(np.int64) + total - np.take_along_axis(total, first, axis=1)
  out = np.repeat(text[:, None, :], 3, axis=1)
  owner = np.repeat(np.arange(tokens.size), tokens)
  run = np.arange(int(tokens.sum())) - np.repeat(np.cumsum(tokens) - tokens, tokens)
  row, column = placed.row[owner], placed.token_column[owner] + run
  start = text[row, placed.token_column[owner]]
  area = (merged[:, 1] * merged[:, 2])[owner]
  width = merged[owner, 2]
  for axis, value in enumerate((run // area, (run % area) // width, run % width)):
    out[row, axis, column] = start + value
  return np.where(segment_ids[:, None, :] > 0, out, 0)


def _segment_starts(segment_ids: np.ndarray) -> np.ndarray:
  starts = np.ones_like(segment_ids, bool)
  starts[:, 1:] = segment_ids[:, 1:] != segment_ids[:, :-1]
  return starts
