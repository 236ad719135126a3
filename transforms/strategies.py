"""Packing strategies: how documents become pieces and pieces find rows, one class per `packing.mode`.

`packing_strategy(packing)` reads the mode string once; the `Packer`
(`packing.py`) then talks to the `PackingStrategy` it returns::

    concat      one long sequence cut into rows (a cut document continues in the next row)
    first_fit   each piece into the lowest row with room         (segment tree over free space)
    best_fit    each piece into the row with least room that fits (sorted free-space keys)
    none        one document per row, truncated (grouped by length where asked)

Documents arrive through the `DocumentSource` protocol as `DocumentColumns`:
nothing here imports the stream.
"""

from __future__ import annotations

import abc
import dataclasses
import functools
from collections.abc import Callable
from typing import Protocol

import numpy as np

from jaxdata.config.packing_config import PackingConfig
from jaxdata.transforms.balance import balanced_rows
from jaxdata.transforms.kernels import best_fit_rows, first_fit_rows
from jaxdata.transforms.pieces import Pieces

__all__ = [
  "Concat",
  "DocumentColumns",
  "DocumentSource",
  "Fit",
  "GroupedOnePerRow",
  "OnePerRow",
  "PackingStrategy",
  "Placement",
  "packing_strategy",
  "placed_by_row",
]


class DocumentColumns(Protocol):
  """Consecutive documents as parallel arrays (a `DocBatch` is one); read-only."""

  @property
  def dataset(self) -> np.ndarray: ...
  @property
  def pass_index(self) -> np.ndarray: ...
  @property
  def record(self) -> np.ndarray: ...
  @property
  def length(self) -> np.ndarray: ...


class DocumentSource(Protocol):
  """Where a packer gets documents: the mixture's `DocumentStream` is one."""

  ended: bool

  def take(self, step: int, max_docs: int | None = None, max_tokens: int | None = None) -> DocumentColumns:
    """The next documents for `step` (empty once the source has ended); with
    `max_tokens`, until the tokens packing keeps of them (`PackingConfig.kept_tokens`)
    reach it (the crossing document included)."""

  def drawn_through(self, step: int) -> None:
    """Documents for the steps up to `step` are drawn already (a mixture update may not start there)."""

  def document_lengths(self, dataset: np.ndarray, record: np.ndarray) -> np.ndarray:
    """Token counts of the given documents; ValueError if one does not exist."""


Placement = tuple[Pieces, np.ndarray, np.ndarray, Pieces]  # placed, row, column, carry


class Placer(Protocol):
  """A fit packer's placement (`fit.first_fit`, `fit.best_fit`): the row of each piece, -1 for none."""

  def __call__(
    self, lengths: np.ndarray, documents: np.ndarray, rows: int, seq_len: int, max_segments: int = 0
  ) -> np.ndarray: ...


BoundPlacer = Callable[[np.ndarray, np.ndarray, int, int], np.ndarray]  # a Placer with its segment cap given


class PackingStrategy(abc.ABC):
  """One packing mode: how documents become pieces and pieces find rows.

  The default fills a step by tokens; `OnePerRow` fills it by documents.
  """

  # Steps past the one planned whose documents a plan may draw now (`DocumentSource.drawn_through`).
  draw_reach = 0

  def __init__(self, packing: PackingConfig, windows: tuple[bool, ...] = ()) -> None:
    self.packing = packing
    self.extra = packing.special_tokens
    # Per dataset index: 1 for a window dataset, whose document (T + 1 tokens) holds one
    # token past its pieces, the last target (windows and BOS / EOS never go together).
    self.windows = np.asarray(windows, dtype=np.int64)

  def tail(self, dataset: np.ndarray) -> np.ndarray:
    """1 for a piece of a window dataset (its document ends one token past its pieces), else 0."""
    return self.windows[dataset] if self.windows.any() else np.zeros(np.shape(dataset), np.int64)

  def document_lengths(self, dataset: np.ndarray, length: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(effective document length, tokens its pieces cover) of stream lengths:
    + BOS / EOS for documents; a window's T tokens cover a T + 1-token document."""
    span = length + self.extra
    return span + self.tail(dataset), span

  def shortfall(self, carry: Pieces, rows: int, seq_len: int) -> int:
    """How much more the step needs beyond the carry (tokens here)."""
    return rows * seq_len - int(carry.length.sum())

  def take(self, source: DocumentSource, step: int, need: int) -> DocumentColumns:
    return source.take(step, max_tokens=need)

  def amount(self, pieces: Pieces) -> int:
    """What `pieces` contribute towards `shortfall`."""
    return int(pieces.length.sum())

  def is_full(self, placed: Pieces, rows: int, seq_len: int) -> bool:
    return int(placed.length.sum()) >= rows * seq_len

  @abc.abstractmethod
  def to_pieces(self, docs: DocumentColumns, seq_len: int) -> tuple[Pieces, int]:
    """Documents -> pieces, and the tokens that truncation dropped."""

  @abc.abstractmethod
  def place(self, carry: Pieces, new: Pieces, rows: int, seq_len: int) -> Placement:
    """Rows and columns for the carry and the new pieces; what does not fit is the next carry."""

  def _whole(self, docs: DocumentColumns) -> tuple[tuple[np.ndarray, ...], np.ndarray, np.ndarray]:
    """(dataset, pass, record) columns, effective lengths and the tokens pieces cover."""
    dataset = docs.dataset.astype(np.int64)
    return (dataset, docs.pass_index, docs.record), *self.document_lengths(dataset, docs.length)

  def _truncated(self, docs: DocumentColumns, seq_len: int) -> tuple[Pieces, int]:
    """One piece per document, cut to seq_len."""
    columns, doc_length, span = self._whole(docs)
    kept = np.minimum(span, seq_len)
    offset = np.zeros(doc_length.size, np.int64)
    return Pieces(*columns, offset, kept, doc_length), int((span - kept).sum())


class Concat(PackingStrategy):
  """One long sequence cut every seq_len tokens; a cut document continues in the next row."""

  def to_pieces(self, docs: DocumentColumns, seq_len: int) -> tuple[Pieces, int]:
    columns, doc_length, span = self._whole(docs)
    return Pieces(*columns, np.zeros(doc_length.size, np.int64), span, doc_length), 0

  def place(self, carry: Pieces, new: Pieces, rows: int, seq_len: int) -> Placement:
    cap = self.packing.max_segments_per_row
    if cap is not None:
      return _concat_capped(carry, new, rows, seq_len, cap)
    return _concat(carry, new, rows, seq_len)


class Fit(PackingStrategy):
  """Whole documents (or seq_len pieces of long ones) into rows: first or best fit."""

  def __init__(self, packing: PackingConfig, placer: Placer, windows: tuple[bool, ...] = ()) -> None:
    super().__init__(packing, windows)
    self.placer = placer

  def to_pieces(self, docs: DocumentColumns, seq_len: int) -> tuple[Pieces, int]:
    if self.packing.long_docs == "truncate":
      return self._truncated(docs, seq_len)
    columns, doc_length, span = self._whole(docs)
    per_doc = np.maximum(1, -(-span // seq_len))  # ceil, and one piece for an empty document
    owner = np.repeat(np.arange(doc_length.size), per_doc)
    first = np.cumsum(per_doc) - per_doc
    offset = (np.arange(owner.size) - first[owner]) * seq_len
    length = np.minimum(seq_len, span[owner] - offset)
    return Pieces(*(c[owner] for c in columns), offset, length, doc_length[owner]), 0

  def place(self, carry: Pieces, new: Pieces, rows: int, seq_len: int) -> Placement:
    cap = self.packing.max_segments_per_row or 0
    placed, row, column, rest = _fit(
      carry, new, rows, seq_len, functools.partial(self.placer, max_segments=cap), self.tail
    )
    # Fit packing puts long pieces in low rows: spread rows so every host's block
    # reads a similar number of documents (the plan stays host-independent).
    return placed, balanced_rows(np.bincount(row, minlength=rows))[row], column, rest


class OnePerRow(PackingStrategy):
  """Mode none: one document per row, truncated to seq_len and padded."""

  def shortfall(self, carry: Pieces, rows: int, seq_len: int) -> int:
    return rows - len(carry)

  def take(self, source: DocumentSource, step: int, need: int) -> DocumentColumns:
    return source.take(step, max_docs=need)

  def amount(self, pieces: Pieces) -> int:
    return len(pieces)

  def is_full(self, placed: Pieces, rows: int, seq_len: int) -> bool:
    return len(placed) == rows

  def to_pieces(self, docs: DocumentColumns, seq_len: int) -> tuple[Pieces, int]:
    return self._truncated(docs, seq_len)

  def place(self, carry: Pieces, new: Pieces, rows: int, seq_len: int) -> Placement:
    pool = Pieces.concatenate([carry, new])
    count = min(rows, len(pool))
    row = np.arange(count)
    return pool.take(row), row, np.zeros(count, np.int64), pool.take(np.arange(count, len(pool)))


class GroupedOnePerRow(OnePerRow):
  """Mode none with `group_by_length: M`: documents are pulled M batches at a time, sorted by
  length (longest first) and cut into batches of similar lengths, whose order inside the group is
  then shuffled (a generator keyed by the seed and the group's first document); the rest of a group
  waits in the carry (part of the state), so resume stays exact::

      pulled (M x rows docs, stream order)   7 2 9 3 8 1 ...
      sorted by length, cut into batches     [9 8 7] [3 2 1] ...   less padding per batch
      batch order shuffled                   [3 2 1] [9 8 7] ...   randomness kept at group level
  """

  def __init__(self, packing: PackingConfig, windows: tuple[bool, ...], seed: int) -> None:
    super().__init__(packing, windows)
    self.group, self.seed = packing.group_by_length, seed
    self.draw_reach = self.group - 1

  def shortfall(self, carry: Pieces, rows: int, seq_len: int) -> int:
    return 0 if len(carry) >= rows else self.group * rows - len(carry)

  def take(self, source: DocumentSource, step: int, need: int) -> DocumentColumns:
    docs = source.take(step, max_docs=need)
    source.drawn_through(step + self.group - 1)  # the group's later batches hold documents drawn now
    return docs

  def place(self, carry: Pieces, new: Pieces, rows: int, seq_len: int) -> Placement:
    return super().place(carry, self._grouped(new, rows) if len(new) else new, rows, seq_len)

  def _grouped(self, pieces: Pieces, rows: int) -> Pieces:
    order = np.argsort(-pieces.length, kind="stable")
    batches = [order[i : i + rows] for i in range(0, order.size, rows)]
    first = [int(pieces.dataset[0]), int(pieces.pass_index[0]), int(pieces.record[0])]
    shuffled = np.random.default_rng([self.seed, *first]).permutation(len(batches))
    return pieces.take(np.concatenate([batches[i] for i in shuffled]))


def packing_strategy(packing: PackingConfig, windows: tuple[bool, ...] = (), seed: int = 0) -> PackingStrategy:
  """The strategy `packing.mode` names; `windows` marks window datasets (by index)."""
  if packing.mode == "concat":
    return Concat(packing, windows)
  if packing.mode == "none":
    return GroupedOnePerRow(packing, windows, seed) if packing.group_by_length else OnePerRow(packing, windows)
  return Fit(packing, best_fit_rows if packing.mode == "best_fit" else first_fit_rows, windows)


def _fit(
  carry: Pieces, new: Pieces, rows: int, seq_len: int, placer: BoundPlacer, tail: Callable[[np.ndarray], np.ndarray]
) -> Placement:
  """Carry first (in order), then new pieces largest first (stable, so a split
  document's pieces stay in offset order: all but its last are seq_len long)."""
  order = np.argsort(-new.length, kind="stable")
  pool = Pieces.concatenate([carry, new.take(order)])
  row_of = placer(pool.length, _split_documents(pool, tail), rows, seq_len)
  return placed_by_row(pool, row_of)


def placed_by_row(pool: Pieces, row_of: np.ndarray) -> Placement:
  """The pieces given a row (`row_of` >= 0) with their columns, each row filled in placement order; the
  rest (-1) is the carry."""
  placed = pool.take(np.flatnonzero(row_of >= 0))
  row = row_of[row_of >= 0]
  by_row = np.argsort(row, kind="stable")
  ends = np.cumsum(placed.length[by_row])
  row_sorted = row[by_row]
  row_start = np.searchsorted(row_sorted, row_sorted, side="left")
  starts_in_row = ends - placed.length[by_row] - np.concatenate([[0], ends])[row_start]
  column = np.empty_like(row)
  column[by_row] = starts_in_row
  return placed, row, column, pool.take(np.flatnonzero(row_of < 0))


def _split_documents(pool: Pieces, tail: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
  """Per piece, an id shared by the pieces of one split document; -1 for a whole document."""
  ids = np.full(len(pool), -1, dtype=np.int64)
  split = np.flatnonzero(pool.length < pool.doc_length - tail(pool.dataset))
  if split.size:
    keys = (pool.record[split], pool.pass_index[split], pool.dataset[split])
    order = np.lexsort(keys)
    new_document = np.ones(split.size, dtype=bool)
    new_document[1:] = np.any([k[order][1:] != k[order][:-1] for k in keys], axis=0)
    ids[split[order]] = np.cumsum(new_document) - 1
  return ids


def _concat_capped(carry: Pieces, new: Pieces, rows: int, seq_len: int, cap: int) -> Placement:
  """`_concat` with at most `cap` pieces a row: a row is closed (padded) once it holds `cap`.
  A loop over the step's pieces, at most rows x cap of them (a cap is small: MaxText's is 32)."""
  pool = Pieces.concatenate([carry, new])
  lengths = pool.length.tolist()
  owner, offset, length, row, column = [], [], [], [], []
  i, used = 0, 0  # the piece being placed and the tokens of it placed already
  for r in range(rows):
    filled, segments = 0, 0
    while i < len(lengths) and filled < seq_len and segments < cap:
      take = min(seq_len - filled, lengths[i] - used)
      owner.append(i)
      offset.append(used)
      length.append(take)
      row.append(r)
      column.append(filled)
      filled, segments = filled + take, segments + 1
      used += take
      if used == lengths[i]:
        i, used = i + 1, 0
  placed = pool.take(np.asarray(owner, np.int64))
  placed = dataclasses.replace(
    placed, offset=placed.offset + np.asarray(offset, np.int64), length=np.asarray(length, np.int64)
  )
  rest = pool.take(np.arange(i, len(pool)))
  if used:  # the piece cut at the step's end continues in the carry
    head = np.zeros(len(rest), np.int64)
    head[0] = used
    rest = dataclasses.replace(rest, offset=rest.offset + head, length=rest.length - head)
  return placed, np.asarray(row, np.int64), np.asarray(column, np.int64), rest


def _concat(carry: Pieces, new: Pieces, rows: int, seq_len: int) -> Placement:
  """One sequence cut every seq_len tokens; what passes the capacity is carried."""
  pool = Pieces.concatenate([carry, new])
  capacity = rows * seq_len
  start = np.cumsum(pool.length) - pool.length
  fits = start < capacity
  pool_in, rest = pool.take(np.flatnonzero(fits)), pool.take(np.flatnonzero(~fits))
  start = start[fits]
  end = np.minimum(start + pool_in.length, capacity)
  # Cut at every multiple of seq_len inside [start, end).
  first_row = start // seq_len
  last_row = (end - 1) // seq_len
  count = last_row - first_row + 1
  owner = np.repeat(np.arange(len(pool_in)), count)
  row = first_row[owner] + (np.arange(owner.size) - (np.cumsum(count) - count)[owner])
  piece_start = np.maximum(start[owner], row * seq_len)
  piece_end = np.minimum(end[owner], (row + 1) * seq_len)
  placed = pool_in.take(owner)
  placed = dataclasses.replace(
    placed, offset=placed.offset + piece_start - start[owner], length=piece_end - piece_start
  )
  # The part of the last document past the capacity goes back to the carry.
  overflow = np.flatnonzero(start + pool_in.length > capacity)
  if overflow.size:
    cut = overflow[0]
    used = capacity - start[cut]
    rest_doc = pool_in.take(np.array([cut]))
    rest_doc = dataclasses.replace(rest_doc, offset=rest_doc.offset + used, length=rest_doc.length - used)
    rest = Pieces.concatenate([rest_doc, rest])
  return placed, row, piece_start - row * seq_len, rest
