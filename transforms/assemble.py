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

from jaxdata.config import PackingConfig
from jaxdata.transforms.pieces import Pieces

__all__ = ["FEATURES", "assemble_rows"]

FEATURES = ("tokens", "targets", "segment_ids", "positions", "loss_mask", "source_ids")


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
    doc_tokens: flat token ids of the pieces' documents (raw, no BOS/EOS).
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
  lengths = pieces.length
  total = int(lengths.sum())
  first = np.cumsum(lengths) - lengths  # each piece's first slot in the run of all its tokens
  owner = np.repeat(np.arange(count, dtype=np.int32), lengths)
  within = np.arange(total, dtype=np.int64) - first[owner]  # position inside the piece
  piece_dst = local_row * seq_len + column
  dst = piece_dst[owner] + within  # destination slot in the [rows * seq_len] output
  # Source index into doc_tokens; the BOS slot (-1 for the first document) and
  # the EOS slot read the appended 0 or a neighbour and are overwritten below.
  src = (doc_start + pieces.offset - int(packing.add_bos))[owner] + within
  padded = np.append(doc_tokens, [0, 0]).astype(np.int32)  # room for EOS slots and their targets
  tokens = out["tokens"].ravel()
  targets = out["targets"].ravel()
  tokens[dst] = padded[src]
  targets[dst] = padded[src + 1]
  out["loss_mask"].ravel()[dst] = 1
  out["positions"].ravel()[dst] = within
  out["source_ids"].ravel()[dst] = pieces.dataset.astype(np.int32)[owner]
  # Segment ids: 1 + rank of the piece among its row's pieces, by column.
  order = np.lexsort((column, local_row))
  sorted_rows = local_row[order]
  segment = np.empty(count, np.int32)
  segment[order] = np.arange(count) - np.searchsorted(sorted_rows, sorted_rows, side="left") + 1
  out["segment_ids"].ravel()[dst] = segment[owner]
  # Per-piece fix-ups, at most three slots per piece (all vectorised over pieces).
  end = pieces.offset + lengths  # effective index just past the piece
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
