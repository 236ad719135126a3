"""`DocumentReader`: the tokens of a set of document pieces, in one batched read per dataset.

Every distinct document is read once, however many pieces of it there are::

    pieces (dataset, record, ...)  ->  per dataset: unique records -> TokenDataset.read (one call)
                                   ->  tokens per dataset + start of each piece's document in their concatenation
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from jaxdata.errors import DatasetError
from jaxdata.pipeline.vocabulary import TokenBound
from jaxdata.sources.dataset import TokenDataset
from jaxdata.sources.opening import SplitDataset
from jaxdata.sources.ragged import RaggedTokens
from jaxdata.sources.sampling_windows import WindowView
from jaxdata.sources.subset import RangeView, SubsetView
from jaxdata.sources.token_files import ranges_index
from jaxdata.transforms.pieces import Pieces

__all__ = ["Boundaries", "DocumentReader", "READ_ATTEMPTS", "ReadLog"]

READ_ATTEMPTS = 3  # an OSError (storage hiccup) is retried after 0.05 s, then 0.1 s

ReadLog = list[tuple[range, str, np.ndarray]]  # (steps, dataset, records) of every read
Boundaries = tuple[np.ndarray, np.ndarray]  # (piece, offset in its document) of document starts inside windows


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

  def read(self, steps: range, pieces: Pieces) -> tuple[list[np.ndarray], np.ndarray, Boundaries]:
    """(token arrays, start of each piece's document in their concatenation,
    document starts inside window pieces) for `pieces` of `steps`."""
    parts, _, doc_start, _, boundaries = self.read_with_masks(steps, pieces)
    return parts, doc_start, boundaries

  def read_with_masks(
    self, steps: range, pieces: Pieces
  ) -> tuple[list[np.ndarray], list[np.ndarray] | None, np.ndarray, np.ndarray, Boundaries]:
    """`read`, the trained-token masks aligned with the token arrays (None where no dataset has them;
    all ones for a dataset without them: every token of it trains), and each piece's document's length."""
    parts, doc_start, base = [], np.zeros(len(pieces), np.int64), 0
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
        ragged = _read_with_retries(dataset, records)
        self.bound.check(dataset, records, ragged.tokens, ragged.offsets)
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
    return parts, masks, doc_start, doc_length, (np.concatenate(inner_piece), np.concatenate(inner_offset))

  def column_values(self, pieces: Pieces) -> dict[str, np.ndarray]:
    """Per piece, its record's value in each of `columns` (held in memory since the datasets opened)."""
    out = {name: np.zeros(len(pieces), np.float32) for name in self.columns}
    for d, dataset in enumerate(self.datasets):
      mine = np.flatnonzero(pieces.dataset == d)
      if not mine.size or not self.columns:
        continue
      base, in_base = record_columns(dataset, pieces.record[mine])
      for name in self.columns:
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


def record_columns(dataset: SplitDataset, records: np.ndarray) -> tuple[TokenDataset, np.ndarray]:
  """(the dataset whose `columns` hold these records' values, their indices there): a split's records
  are its base dataset's, mapped."""
  base = dataset.dataset if isinstance(dataset, (RangeView, SubsetView)) else dataset
  if not isinstance(base, TokenDataset):
    raise DatasetError(f"{dataset.path}: per-record columns are read from ArrayRecord datasets")
  return base, dataset.to_base(records) if isinstance(dataset, (RangeView, SubsetView)) else records


def _piece_boundaries(view: WindowView, records: np.ndarray, mine: np.ndarray, inverse: np.ndarray) -> Boundaries:
  """Every document start inside the windows `records`, for each piece that reads one
  (piece `mine[j]` reads record `inverse[j]`)."""
  owner, offset = view.boundaries(records)  # sorted by owner
  per_record = np.bincount(owner, minlength=records.size)
  first = np.cumsum(per_record) - per_record
  count = per_record[inverse]
  return np.repeat(mine, count), offset[ranges_index(first[inverse], count)]


def _read_with_retries(dataset: SplitDataset, records: np.ndarray) -> RaggedTokens:
  """`dataset.read` of `records`; an OSError is retried with backoff, then raised."""
  failures = 0
  while True:
    try:
      return dataset.read(*dataset.locate(records))
    except OSError:
      failures += 1
      if failures == READ_ATTEMPTS:
        raise
      time.sleep(0.05 * 2 ** (failures - 1))
