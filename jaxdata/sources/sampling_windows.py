"""`WindowView`: a flat token dataset seen as `T + 1`-token windows.

A window is one sample that fills a row: T inputs and the T targets
shifted by one. Its records are the windows a pass may use::

    shard of L tokens     |----------------------------- L -----------------------------|
    with_replacement      every start 0 .. L-T-1 is a record (L - T of them): a uniform
                          record = a shard in proportion to its L - T, then a uniform start
    without replacement   records = the non-overlapping windows [k (T+1), (k+1)(T+1)),
                          floor(L / (T+1)) per shard, permuted by the order layer per pass
    cross_documents false the same inside each document of at least T + 1 tokens
                          (n - T starts, or floor(n / (T+1)) windows, per document)

Each record's length, as the mixture counts it, is T (the tokens it
trains); a read returns its T + 1 tokens. `boundaries` gives the document
starts that fall inside windows, from the metadata alone, so segment ids
and positions can follow them.

>>> import tempfile, os
>>> from jaxdata.sources.boundaries import DocumentBoundaries
>>> from jaxdata.sources.flat_index import build_flat_index
>>> root = tempfile.mkdtemp()
>>> np.arange(1, 11, dtype=np.uint16).tofile(os.path.join(root, "a.bin"))
>>> _ = build_flat_index("flat", [os.path.join(root, "a.bin")], dtype="uint16", boundaries=DocumentBoundaries.eos(5))
>>> view = WindowView(FlatTokenDataset(root), WindowOptions(window=3, with_replacement=False))
>>> view.num_records, view.read(np.array([0, 0]), np.array([1, 0])).to_list()[0].tolist()
(2, [5, 6, 7, 8])
>>> view.boundaries(np.array([0, 1]))  # the second document starts 1 token into window 1 (token 6)
(array([1]), array([1]))
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from jaxdata.errors import DatasetError
from jaxdata.sources.flat import FlatTokenDataset
from jaxdata.sources.lengths import ConstantLengths
from jaxdata.sources.ragged import RaggedTokens
from jaxdata.sources.records import ShardedRecords

__all__ = ["WindowOptions", "WindowView"]

_SCAN = 1 << 22  # documents scanned at a time for cross_documents: false


@dataclasses.dataclass(frozen=True)
class WindowOptions:
  """A window dataset's sampling (config: `sampling: windows`)."""

  window: int  # T: a sample is T + 1 tokens
  with_replacement: bool = True
  cross_documents: bool = True

  def __post_init__(self) -> None:
    if not isinstance(self.window, int) or isinstance(self.window, bool) or self.window < 1:
      raise ValueError(f"window: expected an int >= 1, got {self.window!r}")

  def describe(self) -> str:
    return f"windows={self.window} replacement={int(self.with_replacement)} cross_documents={int(self.cross_documents)}"


class WindowView(ShardedRecords):
  """The windows of a `FlatTokenDataset`; the reading interface of a dataset."""

  what = "window"

  def __init__(self, dataset: FlatTokenDataset, options: WindowOptions) -> None:
    self.dataset, self.options = dataset, options
    self.path, self.manifest, self.remote, self.dtype = dataset.path, dataset.manifest, None, dataset.dtype
    self.reads_ranges_from_store = dataset.reads_ranges_from_store
    span = options.window + 1
    # Per shard: cumulative records of its eligible documents (cross_documents: false), or None.
    self._documents: list[tuple[np.ndarray, np.ndarray] | None] = []
    counts = []
    for shard in range(dataset.num_shards):
      if options.cross_documents:
        tokens = int(dataset.shard_tokens[shard])
        counts.append(tokens - options.window if options.with_replacement else tokens // span)
        self._documents.append(None)
      else:
        eligible, cumulative = self._eligible_documents(shard)
        counts.append(int(cumulative[-1]))
        self._documents.append((eligible, cumulative))
      if counts[-1] <= 0:
        where = "a document" if not options.cross_documents else "the file"
        raise DatasetError(
          f"{dataset.shard_path(shard)}: {where} must hold at least {span} tokens for windows "
          f"of {options.window} + 1 (window: {options.window})"
        )
    self._number_records(counts)
    self.lengths = ConstantLengths(options.window, self.num_records)
    # Passes of a with-replacement dataset count draws: one pass trains as many tokens as the dataset
    # holds (U // T draws), so its passes are w D / U.
    self.pass_records = max(1, dataset.num_tokens // options.window) if options.with_replacement else None

  @property
  def pass_tokens(self) -> int:
    """What exposure counts a pass as: U, the file tokens, for draws (a pass is U // T draws of T
    tokens); every non-overlapping window's T tokens without replacement."""
    return self.num_tokens if self.pass_records is not None else self.num_records * self.options.window

  def segment_lengths(self) -> np.ndarray:
    """Lengths of the token runs windows are drawn from: each file, or each document of at least T + 1
    tokens (cross_documents: false)."""
    if self.options.cross_documents:
      return self.dataset.shard_tokens.copy()
    parts = [
      self.dataset.lengths[self.dataset.record_starts[shard] + documents[0]].astype(np.int64)
      for shard, documents in enumerate(self._documents)
      if documents is not None  # (cross_documents: false keeps every shard's)
    ]
    return np.concatenate(parts)

  def shard_path(self, shard: int) -> str:
    return self.dataset.shard_path(shard)

  def reopen_arguments(self) -> tuple[Any, ...]:
    return (self.dataset, self.options)

  def __repr__(self) -> str:
    return f"WindowView({self.dataset!r}, window={self.options.window}, windows={self.num_records})"

  def window_starts(self, shard_ids: np.ndarray, record_ids: np.ndarray) -> np.ndarray:
    """The first token (within its shard) of each window."""
    span = self.options.window + 1
    step = 1 if self.options.with_replacement else span
    if self.options.cross_documents:
      return np.asarray(record_ids, np.int64) * step
    starts = np.empty(np.size(record_ids), np.int64)
    for shard in np.unique(shard_ids).tolist():
      mine = np.flatnonzero(shard_ids == shard)
      eligible, cumulative = self._documents[shard]
      slot = np.searchsorted(cumulative, record_ids[mine], side="right") - 1
      document = eligible[slot]
      starts[mine] = self.dataset.doc_starts[shard][document] + (record_ids[mine] - cumulative[slot]) * step
    return starts

  def read(self, shard_ids: Sequence[int] | np.ndarray, record_ids: Sequence[int] | np.ndarray) -> RaggedTokens:
    """The T + 1 tokens of each window, in request order."""
    shard_ids = np.asarray(shard_ids, np.int64).ravel()
    record_ids = np.asarray(record_ids, np.int64).ravel()
    if shard_ids.size and (record_ids >= self.shard_num_records[shard_ids]).any():
      raise IndexError(f"{self.dataset.path}: a window id past its shard's {self.shard_num_records.max()} windows")
    starts = self.window_starts(shard_ids, record_ids)
    return self.dataset.read_ranges(shard_ids, starts, np.full(shard_ids.size, self.options.window + 1))

  def boundaries(self, records: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Document starts strictly inside windows: (index into `records`, offset
    1..T from the window's first token). Empty for cross_documents: false."""
    records = np.asarray(records, np.int64)
    if not self.options.cross_documents or not records.size:
      return np.zeros(0, np.int64), np.zeros(0, np.int64)
    shard_ids, record_ids = self.locate(records)
    starts = self.window_starts(shard_ids, record_ids)
    which, offsets = [], []
    for shard in np.unique(shard_ids).tolist():
      mine = np.flatnonzero(shard_ids == shard)
      doc_starts = self.dataset.doc_starts[shard]
      first = np.searchsorted(doc_starts, starts[mine], side="right")
      last = np.searchsorted(doc_starts, starts[mine] + self.options.window, side="right")
      count = last - first
      owner = np.repeat(mine, count)
      index = np.repeat(first - (np.cumsum(count) - count), count) + np.arange(int(count.sum()))
      which.append(owner)
      offsets.append(np.asarray(doc_starts[index], np.int64) - starts[owner])
    order = np.argsort(np.concatenate(which), kind="stable")
    return np.concatenate(which)[order], np.concatenate(offsets)[order]

  def verify(self) -> None:
    self.dataset.verify()

  def transfer_stats(self) -> dict[str, float] | None:
    return self.dataset.transfer_stats()

  def close(self) -> None:
    self.dataset.close()

  def _eligible_documents(self, shard: int) -> tuple[np.ndarray, np.ndarray]:
    """Documents of at least T + 1 tokens and the cumulative count of their records."""
    span = self.options.window + 1
    lengths = self.dataset.lengths
    first, end = int(self.dataset.record_starts[shard]), int(self.dataset.record_starts[shard + 1])
    eligible, per_document = [], []
    for begin in range(first, end, _SCAN):
      chunk = lengths[np.arange(begin, min(begin + _SCAN, end))].astype(np.int64)
      keep = np.flatnonzero(chunk >= span)
      eligible.append(keep + begin - first)
      per_document.append(chunk[keep] - self.options.window if self.options.with_replacement else chunk[keep] // span)
    counts = np.concatenate(per_document + [np.zeros(0, np.int64)])
    return np.concatenate(eligible + [np.zeros(0, np.int64)]), np.concatenate([[0], np.cumsum(counts)])
