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

Rows fill from column 0, so the pieces sorted by (row, column), with one
padding run at the end of each row that is not full, tile the flat
[rows * seq_len] grid exactly. Every feature is then a run-length fill or a
shifted contiguous copy over the grid, which `kernels.write_runs` writes run
by run (in C where the extension was built; it keeps the GIL for a step's grid)::

    grid   | piece a       | piece b | pad  | piece c          | piece d   |
    src    s_a s_a+1 ...    s_b ...   P P+1  s_c ...            (P: the pad run in the buffer)
    tokens = buffer[src]   targets = buffer[src + 1]   (the pad run holds pad_id)

plus at most three single-slot fix-ups per piece (a document's last token,
BOS, EOS). No Python loop over documents or pieces.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from jaxdata.config.layout import FEATURES
from jaxdata.config.packing_config import PackingConfig
from jaxdata.transforms.kernels import restart_segments, write_runs
from jaxdata.transforms.pieces import Pieces

__all__ = ["FEATURES", "DocumentTokens", "RowPlacement", "assemble_rows", "follow_boundaries", "padded_buffer"]


def padded_buffer(parts: list[np.ndarray], seq_len: int, pad_id: int) -> np.ndarray:
  """The token buffer `assemble_rows` reads: one slot that a BOS read
  before the first document touches, `parts` concatenated (one copy, in
  their own dtype when it can hold `pad_id`: uint16 ids stay 2 bytes, else
  int32), then a run of seq_len + 1 `pad_id`s that padding reads from and EOS
  reads past the last document touch. Document starts passed to
  `assemble_rows` count from the first part, not the buffer.

  >>> buffer = padded_buffer([np.array([5, 6], np.uint16)], seq_len=2, pad_id=0)
  >>> buffer.tolist(), buffer.dtype.name
  ([0, 5, 6, 0, 0, 0], 'uint16')
  """
  dtype = np.result_type(*parts) if parts else np.dtype(np.int32)
  if dtype.kind not in "iu" or dtype.itemsize > 4 or pad_id > np.iinfo(dtype).max:
    dtype = np.dtype(np.int32)
  tail = np.full(seq_len + 1, pad_id, dtype)
  return np.concatenate([tail[:1], *parts, tail], dtype=dtype, casting="same_kind")


def _check_layout(dst: np.ndarray, lengths: np.ndarray, fill: np.ndarray, seq_len: int) -> None:
  """Sorted pieces must tile each row from column 0 without gaps or overlaps."""
  if fill.max(initial=0) > seq_len:
    raise ValueError(f"assemble: a row holds {fill.max()} tokens, more than seq_len {seq_len}")
  row = dst // seq_len
  new_row = np.r_[True, row[1:] != row[:-1]] if dst.size else np.zeros(0, bool)
  expected = np.where(new_row, row * seq_len, np.r_[0, dst[:-1] + lengths[:-1]])
  if not (dst == expected).all() or (dst % seq_len + lengths > seq_len).any():
    raise ValueError("assemble: pieces must fill each row from column 0 without gaps or overlaps")


@dataclasses.dataclass(frozen=True)
class RowPlacement:
  """Where a step's pieces go in this host's rows: piece i at `host_row[i]` (in [0, num_rows)),
  from `column[i]`."""

  pieces: Pieces
  host_row: np.ndarray
  column: np.ndarray
  num_rows: int
  seq_len: int


@dataclasses.dataclass(frozen=True)
class DocumentTokens:
  """The pieces' documents' raw tokens (no BOS / EOS): `buffer`, made by `padded_buffer` (it ends
  with seq_len + 1 pad ids); `doc_start[i]`, where piece i's document starts in the concatenated
  parts `buffer` was made from; `trained`, the documents' trained-token masks laid out as `buffer`
  (uint8 0 / 1, by `padded_buffer`), where the datasets have them."""

  buffer: np.ndarray
  doc_start: np.ndarray
  trained: np.ndarray | None = None


@dataclasses.dataclass(frozen=True)
class _GridRuns:
  """The step's runs in grid order, the pieces and each row's padding after its pieces: where each is
  read from in the buffer, written to in the flat grid, its length, segment id and source id."""

  src: np.ndarray
  dst: np.ndarray
  length: np.ndarray
  segment: np.ndarray
  source: np.ndarray


def _grid_runs(placement: RowPlacement, documents: DocumentTokens, packing: PackingConfig) -> _GridRuns:
  """The runs `write_runs` writes, checked against the buffer and the rows' capacity."""
  pieces, host_row, seq_len = placement.pieces, placement.host_row, placement.seq_len
  buffer = documents.buffer
  pad_run = buffer.size - (seq_len + 1)  # where the pad ids start
  dst = host_row * seq_len + placement.column
  order = np.argsort(dst, kind="stable")
  dst, lengths = dst[order], pieces.length[order]
  fill = np.bincount(host_row, weights=pieces.length, minlength=placement.num_rows).astype(np.int64)
  _check_layout(dst, lengths, fill, seq_len)
  short = np.flatnonzero(fill < seq_len)
  run_dst = np.concatenate([dst, short * seq_len + fill[short]])
  run_order = np.argsort(run_dst, kind="stable")
  run_len = np.concatenate([lengths, seq_len - fill[short]])[run_order]
  run_dst = run_dst[run_order]
  piece_src = (documents.doc_start + 1 + pieces.offset - int(packing.add_bos))[order]  # + 1: the lead slot
  run_src = np.concatenate([piece_src, np.full(short.size, pad_run)])[run_order]
  if run_src.size and (run_src.min() < 0 or (run_src + run_len).max() >= buffer.size):
    raise ValueError("assemble: a piece's tokens lie outside the buffer (doc_start or offset out of range)")
  run_row = run_dst // seq_len
  # Segment ids: 1 + the rank of a piece among its row's runs (padding comes last, gets 0).
  rank = np.arange(run_dst.size) - np.searchsorted(run_row, run_row, side="left") + 1
  run_segment = np.where(run_order < len(pieces), rank, 0).astype(np.int32)
  run_source = np.concatenate([pieces.dataset[order], np.full(short.size, -1)]).astype(np.int32)[run_order]
  return _GridRuns(run_src, run_dst, run_len, run_segment, run_source)


def _output_arrays(out: dict[str, np.ndarray] | None, shape: tuple[int, int]) -> dict[str, np.ndarray]:
  """`out`, checked to hold a contiguous int32 array of `shape` per feature, or new such arrays."""
  if out is None:
    return {name: np.empty(shape, np.int32) for name in FEATURES}
  if any(
    out[name].shape != shape or out[name].dtype != np.int32 or not out[name].flags.c_contiguous for name in FEATURES
  ):
    raise ValueError(f"assemble: out must hold a contiguous int32 {shape} array for each of {FEATURES}")
  return out


def _document_ends(
  flat: dict[str, np.ndarray], placement: RowPlacement, documents: DocumentTokens, packing: PackingConfig
) -> None:
  """Per-piece fix-ups, at most three slots a piece (vectorised over pieces): nothing follows a
  document's last token; BOS and EOS where jaxdata adds them."""
  pieces, trained = placement.pieces, documents.trained
  tokens, targets, loss_mask = flat["tokens"], flat["targets"], flat["loss_mask"]
  piece_dst = placement.host_row * placement.seq_len + placement.column
  end = pieces.offset + pieces.length  # effective index just past the piece
  last = pieces.doc_length - 1  # effective index of the document's last token
  has_last = end > last
  last_slot = piece_dst[has_last] + last[has_last] - pieces.offset[has_last]
  targets[last_slot] = packing.fill_id
  loss_mask[last_slot] = 0
  if packing.add_bos:
    tokens[piece_dst[pieces.offset == 0]] = packing.bos
  if packing.add_eos:
    tokens[last_slot] = packing.eos
    # The token before EOS predicts EOS.
    before = (pieces.offset <= last - 1) & (end > last - 1)
    inside = last[before] - 1 - pieces.offset[before]  # the slot's index inside its piece
    targets[piece_dst[before] + inside] = packing.eos
    if trained is not None:
      # An EOS that jaxdata appends trains as its document's last token does (the model learns to
      # stop where it learns to answer): the slot before it takes that token's own flag.
      piece_src = documents.doc_start + 1 + pieces.offset - int(packing.add_bos)  # as the runs read the buffer
      loss_mask[piece_dst[before] + inside] = trained[piece_src[before] + inside]


def assemble_rows(
  placement: RowPlacement,
  documents: DocumentTokens,
  packing: PackingConfig,
  out: dict[str, np.ndarray] | None = None,
) -> dict[str, np.ndarray]:
  """int32 [num_rows, seq_len] arrays for the placed pieces (written into `out`, contiguous arrays
  of that shape, when given). With trained-token masks, `loss_mask` is 1 only where the target is a
  trained token."""
  buffer, trained, seq_len = documents.buffer, documents.trained, placement.seq_len
  if buffer.dtype.kind not in "iu" or buffer.dtype.itemsize > 4 or buffer.size < seq_len + 2:
    raise ValueError("assemble: buffer must be the array padded_buffer makes")
  if trained is not None and trained.shape != buffer.shape:
    raise ValueError("assemble: trained must be laid out as the token buffer (padded_buffer of the masks)")
  runs = _grid_runs(placement, documents, packing)
  out = _output_arrays(out, (placement.num_rows, seq_len))
  flat = {name: out[name].reshape(-1) for name in FEATURES}  # views (the arrays are contiguous)
  # With masks the loss mask takes each target's trained flag in the same pass.
  write_runs(buffer, runs.src, runs.dst, runs.length, runs.segment, runs.source, flat=flat, trained=trained)
  if len(placement.pieces):
    _document_ends(flat, placement, documents, packing)
  return out


def follow_boundaries(
  out: dict[str, np.ndarray],
  pieces: Pieces,
  host_row: np.ndarray,
  column: np.ndarray,
  piece: np.ndarray,
  offset: np.ndarray,
  *,
  pad_id: int,
) -> None:
  """Document starts inside pieces (a window that crosses documents): from
  each start on, a new segment with positions from 0; the token before it
  ends its document (target pad_id, loss_mask 0). In place, vectorised.

  `piece[i]` indexes `pieces`; `offset[i]` is the document start's index in
  that piece's document (a start at the piece's end only ends the last
  token's document)::

      window tokens   a a a E b b b E c c      (E: an EOS inside the window)
      segment_ids     1 1 1 1 2 2 2 2 3 3
      positions       0 1 2 3 0 1 2 3 0 1
      loss_mask       1 1 1 0 1 1 1 0 1 1      (E's target is the next document's first token)
  """
  begin, end = pieces.offset[piece], pieces.offset[piece] + pieces.length[piece]
  keep = (offset > begin) & (offset <= end)
  piece, offset, begin, end = piece[keep], offset[keep], begin[keep], end[keep]
  if not piece.size:
    return
  num_rows, seq_len = out["tokens"].shape
  first_slot = host_row[piece] * seq_len + column[piece] - begin  # grid slot of document index 0
  ending = first_slot + offset - 1  # the last token before each start
  flat = {name: out[name].reshape(-1) for name in FEATURES}
  flat["targets"][ending] = pad_id
  flat["loss_mask"][ending] = 0
  inside = offset < end
  starts = (first_slot + offset)[inside]
  if starts.size:
    restart_segments(starts, seq_len, flat["segment_ids"], flat["positions"])
