"""Assemble a step's rows from its plan and the documents' tokens.

For the rows a host holds, every piece becomes a run of columns::

    effective document  [BOS] t0 t1 t2 ... tn [EOS]        (BOS / EOS when configured)
    piece (offset o, length k) -> row r, columns c .. c+k-1
      tokens      E[o .. o+k-1]
      targets     E[o+1 .. o+k]       the next token of the same document
      loss_mask   1 where that next token exists (0 after the document's last token)
      positions   0 .. k-1            restart for every piece
      segment_ids 1, 2, ... per row   in column order; 0 on padding
      source_ids  dataset index       -1 on padding

All of it is NumPy index arithmetic over the flat token buffer; no Python
loop over documents or pieces.
"""

from __future__ import annotations

import numpy as np

from jaxdata.config.schema import PackingConfig
from jaxdata.transforms.pieces import Pieces

__all__ = ["FEATURES", "assemble_rows", "pad_tokens"]

FEATURES = ("tokens", "targets", "segment_ids", "positions", "loss_mask", "source_ids")


def _rows_are_prefixes(starts: np.ndarray, lengths: np.ndarray, seq_len: int) -> bool:
  """Sorted pieces tile each row from column 0: every piece starts where the
  previous one in its row ended."""
  row = starts // seq_len
  expected = np.where(np.r_[True, row[1:] != row[:-1]], row * seq_len, np.r_[0, starts[:-1] + lengths[:-1]])
  return bool((starts == expected).all())


def pad_tokens(doc_tokens: np.ndarray) -> np.ndarray:
  """int32 copy of `doc_tokens` plus two slots that BOS / EOS reads may touch
  (they are overwritten); do this once for all the steps sharing a read."""
  return np.append(doc_tokens, [0, 0]).astype(np.int32)


def assemble_rows(
    pieces: Pieces,
    local_row: np.ndarray,
    column: np.ndarray,
    num_rows: int,
    seq_len: int,
    doc_tokens: np.ndarray,
    doc_start: np.ndarray,
    packing: PackingConfig,
) -> dict[str, np.ndarray]:
  """int32 [num_rows, seq_len] arrays for the given pieces.

  Args:
    pieces: the pieces in these rows.
    local_row, column: where each piece goes (local_row in [0, num_rows)).
    doc_tokens: flat int32 token ids of the pieces' documents (raw, no
      BOS/EOS), followed by two padding slots (see `pad_tokens`).
    doc_start: for each piece, where its document starts in `doc_tokens`.
  """
  shape = (num_rows, seq_len)
  out = {
      "tokens": np.full(shape, packing.pad_id, np.int32),
      "targets": np.full(shape, packing.pad_id, np.int32),
      "segment_ids": np.zeros(shape, np.int32),
      "positions": np.zeros(shape, np.int32),
      "loss_mask": np.zeros(shape, np.int32),
      "source_ids": np.full(shape, -1, np.int32),
  }
  count = len(pieces)
  if not count:
    return out
  # Rows fill from column 0 without gaps (every packing mode places pieces so),
  # so the real slots in row-major order are exactly the pieces' tokens sorted
  # by (row, column): values are gathered in that order and written through
  # one boolean mask per feature, no scatter.
  piece_dst = local_row * seq_len + column
  order = np.argsort(piece_dst, kind="stable")
  lengths = pieces.length[order]
  fill = np.bincount(local_row, weights=pieces.length, minlength=num_rows).astype(np.int64)
  if fill.max(initial=0) > seq_len:
    raise ValueError(f"assemble: a row holds {fill.max()} tokens, more than seq_len {seq_len}")
  real = np.arange(seq_len)[None, :] < fill[:, None]
  if int(real.sum()) != int(lengths.sum()) or not _rows_are_prefixes(piece_dst[order], lengths, seq_len):
    raise ValueError("assemble: pieces must fill each row from column 0 without gaps or overlaps")
  total = int(lengths.sum())
  first = np.cumsum(lengths) - lengths
  owner = np.repeat(order.astype(np.int32), lengths)  # piece of every real slot, row-major
  within = np.arange(total, dtype=np.int64) - np.repeat(first, lengths)  # position inside its piece
  src = (doc_start + pieces.offset - int(packing.add_bos))[owner] + within
  padded = doc_tokens
  mask = real.ravel()
  out["tokens"].ravel()[mask] = padded[src]  # the BOS / EOS slots are overwritten below
  out["targets"].ravel()[mask] = padded[src + 1]
  out["loss_mask"].ravel()[mask] = 1
  out["positions"].ravel()[mask] = within
  out["source_ids"].ravel()[mask] = pieces.dataset.astype(np.int32)[owner]
  # Segment ids: 1 + rank of the piece among its row's pieces (pieces sorted by row, column).
  sorted_rows = local_row[order]
  segment = np.empty(count, np.int32)
  segment[order] = np.arange(count) - np.searchsorted(sorted_rows, sorted_rows, side="left") + 1
  out["segment_ids"].ravel()[mask] = segment[owner]
  tokens = out["tokens"].ravel()
  targets = out["targets"].ravel()
  # Per-piece fix-ups, at most three slots per piece (all vectorised over pieces).
  end = pieces.offset + pieces.length  # effective index just past the piece
  last = pieces.doc_length - 1  # effective index of the document's last token
  has_last = end > last
  last_slot = piece_dst[has_last] + last[has_last] - pieces.offset[has_last]
  targets[last_slot] = packing.pad_id  # nothing follows a document's last token
  out["loss_mask"].ravel()[last_slot] = 0
  if packing.add_bos:
    starts_doc = pieces.offset == 0
    tokens[piece_dst[starts_doc]] = packing.bos_id
  if packing.add_eos:
    tokens[last_slot] = packing.eos_id
    # The token before EOS predicts EOS.
    before = (pieces.offset <= last - 1) & (end > last - 1)
    targets[piece_dst[before] + last[before] - 1 - pieces.offset[before]] = packing.eos_id
  return out
