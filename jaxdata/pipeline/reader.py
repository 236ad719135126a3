"""`DocumentReader`: the tokens of a set of document pieces, in one batched read per dataset.

Every distinct document is read once, however many pieces of it there are::

    pieces (dataset, record, ...)  ->  per dataset: unique records -> TokenDataset.read (one call)
                                   ->  tokens per dataset + start of each piece's document in their concatenation
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence

import numpy as np

from jaxdata.pipeline.vocabulary import TokenBound
from jaxdata.sources.image_records import ImageEntry
from jaxdata.sources.opening import SplitDataset, record_columns
from jaxdata.sources.ragged import RaggedTokens
from jaxdata.sources.sampling_windows import WindowView
from jaxdata.sources.token_files import ranges_index
from jaxdata.transforms.pieces import Pieces

__all__ = ["Boundaries", "DocumentReader", "DocumentsRead", "READ_ATTEMPTS", "ReadLog"]

READ_ATTEMPTS = 3  # an OSError (storage hiccup) is retried after 0.05 s, then 0.1 s

ReadLog = list[tuple[range, str, np.ndarray]]  # (steps, dataset, records) of every read
Boundaries = tuple[np.ndarray, np.ndarray]  # (piece, offset in its document) of document starts inside windows


@dataclasses.dataclass(frozen=True)
class DocumentsRead:
  """What `DocumentReader.read_with_masks` read: the token arrays (one per dataset read), their masks (None
  where no dataset has them), per piece its document's start in their concatenation and its length, the
  document starts inside window pieces, and per piece its images (None where no dataset holds images)."""

  parts: list[np.ndarray]
  masks: list[np.ndarray] | None
  doc_start: np.ndarray
  doc_length: np.ndarray
  boundaries: Boundaries
  images: list[list[ImageEntry]] | None = None


class DocumentReader:
  """Reads pieces' documents from `datasets` (in config order).

  Every token read is held to `bound` (see `jaxdata.pipeline.vocabulary`).
  `read_log`, if a list, gets (steps, dataset name, records) of every read.
  """

  def __init__(
    self,
    datasets: Sequence[SplitDataset],
    names: Sequence[str],
    bound: TokenBound,
    read_log: ReadLog | None = None,
    columns: Sequence[str] = (),
  ) -> None:
    self.datasets = list(datasets)
    self.names = tuple(names)
    self.bound = bound
    self.read_log = read_log
    self.columns = tuple(columns)  # per-record columns every read also gives (a reference model's log-probs)
    # Where any dataset carries trained-token masks, every read gives masks (ones for the others).
    self.masked = any(ds.manifest.has_mask for ds in self.datasets)
    self.holds_images = any(ds.manifest.holds_images for ds in self.datasets)

  def read(self, steps: range, pieces: Pieces) -> tuple[list[np.ndarray], np.ndarray, Boundaries]:
    """(token arrays, start of each piece's document in their concatenation,
    document starts inside window pieces) for `pieces` of `steps`."""
    read = self.read_with_masks(steps, pieces)
    return read.parts, read.doc_start, read.boundaries

  def read_with_masks(self, steps: range, pieces: Pieces) -> DocumentsRead:
    """`read`, the trained-token masks aligned with the token arrays (None where no dataset has them;
    all ones for a dataset without them: every token of it trains), each piece's document's length, and
    each piece's images (image-text datasets; from the same read)."""
    parts, doc_start, base = [], np.zeros(len(pieces), np.int64), 0
    images: list[list[ImageEntry]] | None = [[] for _ in range(len(pieces))] if self.holds_images else None
    doc_length = np.zeros(len(pieces), np.int64)
    masks: list[np.ndarray] | None = [] if self.masked else None
    inner_piece, inner_offset = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)]
    wanted = []
    for d, dataset in enumerate(self.datasets):
      mine = np.flatnonzero(pieces.dataset == d)
      if mine.size:
        records, inverse = np.unique(pieces.record[mine], return_inverse=True)
        wanted.append((d, dataset, mine, records, inverse))
    # A remote read span's shards, of every dataset, are fetched together and stay cached until it is read.
    pinned = [
      (dataset.remote, dataset.remote.pin(dataset.locate(records)[0]))
      for _, dataset, _, records, _ in wanted
      if dataset.remote is not None
    ]
    try:
      for d, dataset, mine, records, inverse in wanted:
        if self.read_log is not None:
          self.read_log.append((steps, self.names[d], records))
        ragged, found = _read_with_retries(dataset, records, images is not None)
        self.bound.check(dataset, records, ragged.tokens, ragged.offsets)
        if images is not None and found:
          for at, record in zip(mine.tolist(), inverse.tolist()):  # per piece: a reference to its record's list
            images[at] = found[record]
        parts.append(ragged.tokens)
        if masks is not None:
          masks.append(ragged.mask if ragged.mask is not None else np.ones(ragged.tokens.size, np.uint8))
        doc_start[mine] = base + ragged.offsets[:-1][inverse]
        doc_length[mine] = np.diff(ragged.offsets)[inverse]
        base += ragged.tokens.size
        if isinstance(dataset, WindowView):
          piece, offset = _piece_boundaries(dataset, records, mine, inverse)
          inner_piece.append(piece)
          inner_offset.append(offset)
    finally:
      for remote, shards in pinned:
        remote.unpin(shards)
    boundaries = (np.concatenate(inner_piece), np.concatenate(inner_offset))
    return DocumentsRead(parts, masks, doc_start, doc_length, boundaries, images)

  def column_values(self, pieces: Pieces) -> dict[str, np.ndarray]:
    """Per piece, its record's value in each of `columns` (held in memory since the datasets opened; 0 for a
    dataset without the column, such as a text set's images)."""
    out = {name: np.zeros(len(pieces), np.float32) for name in self.columns}
    for d, dataset in enumerate(self.datasets):
      mine = np.flatnonzero(pieces.dataset == d)
      if not mine.size or not self.columns:
        continue
      base, in_base = record_columns(dataset, pieces.record[mine])
      for name in self.columns:
        if name in base.columns:
          out[name][mine] = base.columns[name][in_base]
    return out

  @property
  def reads_ranges_from_store(self) -> bool:
    """Whether a read waits on object storage for byte ranges (flat files in a store)."""
    return any(dataset.reads_ranges_from_store for dataset in self.datasets)

  @property
  def remote(self) -> bool:
    """Whether any dataset is in object storage (then reads fetch shards)."""
    return any(dataset.remote is not None for dataset in self.datasets)

  def fetch_ahead(self, pieces: Pieces) -> None:
    """Starts fetching the remote shards these pieces will read (does not wait)."""
    for d, dataset in enumerate(self.datasets):
      records = pieces.record[pieces.dataset == d]
      if dataset.remote is not None and records.size:
        dataset.remote.want(dataset.locate(np.unique(records))[0].tolist(), ahead=True)

  def close(self) -> None:
    for dataset in self.datasets:
      dataset.close()


def _piece_boundaries(view: WindowView, records: np.ndarray, mine: np.ndarray, inverse: np.ndarray) -> Boundaries:
  """Every document start inside the windows `records`, for each piece that reads one
  (piece `mine[j]` reads record `inverse[j]`)."""
  owner, offset = view.boundaries(records)  # sorted by owner
  per_record = np.bincount(owner, minlength=records.size)
  first = np.cumsum(per_record) - per_record
  count = per_record[inverse]
  return np.repeat(mine, count), offset[ranges_index(first[inverse], count)]


def _read_with_retries(
  dataset: SplitDataset, records: np.ndarray, images: bool
) -> tuple[RaggedTokens, list[list[ImageEntry]]]:
  """`dataset.read` of `records` (with `images`, an image-text dataset's images too, from the same read); an
  OSError is retried with backoff, then raised."""
  failures = 0
  while True:
    try:
      if images and dataset.manifest.holds_images:
        base, in_base = record_columns(dataset, records)
        return base.read_with_images(*base.locate(in_base))
      return dataset.read(*dataset.locate(records)), []
    except OSError:
      failures += 1
      if failures == READ_ATTEMPTS:
        raise
      time.sleep(0.05 * 2 ** (failures - 1))
