"""`assemble_rows` against a per-piece reference written from its docstring."""

from __future__ import annotations

import numpy as np
import pytest

from jaxdata.config.packing_config import PackingConfig
from jaxdata.transforms import kernels
from jaxdata.transforms.assemble import FEATURES, DocumentTokens, RowPlacement, assemble_rows, padded_buffer
from jaxdata.transforms.pieces import Pieces


def reference(
  pieces: Pieces,
  row: np.ndarray,
  column: np.ndarray,
  rows: int,
  seq_len: int,
  docs: list[np.ndarray],
  doc_of_piece: np.ndarray,
  packing: PackingConfig,
) -> dict[str, np.ndarray]:
  """One piece at a time, straight from the module docstring."""
  out = {
    "tokens": np.full((rows, seq_len), packing.fill_id),
    "targets": np.full((rows, seq_len), packing.fill_id),
    "segment_ids": np.zeros((rows, seq_len)),
    "positions": np.zeros((rows, seq_len)),
    "loss_mask": np.zeros((rows, seq_len)),
    "source_ids": np.full((rows, seq_len), -1),
  }
  for i in np.lexsort((column, row)):
    doc = docs[doc_of_piece[i]].tolist()
    effective = ([packing.bos] if packing.add_bos else []) + doc + ([packing.eos] if packing.add_eos else [])
    assert len(effective) == pieces.doc_length[i]
    r, c, o, k = row[i], column[i], pieces.offset[i], pieces.length[i]
    segment = 1 + int(((row == r) & (column < c)).sum())
    for j in range(k):
      out["tokens"][r, c + j] = effective[o + j]
      has_next = o + j + 1 < len(effective)
      out["targets"][r, c + j] = effective[o + j + 1] if has_next else packing.fill_id
      out["loss_mask"][r, c + j] = int(has_next)
      out["positions"][r, c + j] = j
      out["segment_ids"][r, c + j] = segment
      out["source_ids"][r, c + j] = pieces.dataset[i]
  return out


def random_case(rng: np.random.Generator, packing: PackingConfig, rows: int, seq_len: int):
  """Random documents cut into pieces that fill each row from column 0 (some rows short)."""
  extra = int(packing.add_bos) + int(packing.add_eos)
  docs, fields, places = [], [], []
  for r in range(rows):
    column = 0
    room = seq_len - int(rng.integers(0, seq_len // 2)) if rng.random() < 0.5 else seq_len
    while column < room:
      raw = rng.integers(0 if extra else 1, 3 * seq_len // 2)
      docs.append(rng.integers(2, 50_000, raw).astype(np.uint16))
      doc_length = raw + extra
      offset = int(rng.integers(0, doc_length))
      length = min(doc_length - offset, room - column)
      fields.append((int(rng.integers(0, 4)), 0, len(docs) - 1, offset, length, doc_length))
      places.append((r, column))
      column += length
  table = np.array(fields, dtype=np.int64)
  pieces = Pieces(*(table[:, i] for i in range(6)))
  place = np.array(places, dtype=np.int64)
  return pieces, place[:, 0], place[:, 1], docs


@pytest.mark.parametrize("native", [True, False], ids=["C", "NumPy"])  # both loops of kernels.write_runs
@pytest.mark.parametrize("dtype", [np.uint16, np.uint32, np.int32])  # the buffer keeps the first two
@pytest.mark.parametrize("add_bos,add_eos", [(False, False), (True, False), (False, True), (True, True)])
def test_matches_reference(
  add_bos: bool, add_eos: bool, dtype: type, native: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
  assert kernels._native is not None, (
    "the C extension jaxdata.transforms._native was not built (pip install -e . compiles it)"
  )
  monkeypatch.setattr(kernels, "NATIVE", native)
  packing = PackingConfig(seq_len=16, add_bos=add_bos, add_eos=add_eos, bos_id=1, eos_id=7, pad_id=3)
  rng = np.random.default_rng(int(add_bos) * 2 + int(add_eos))
  for _ in range(40):
    rows = int(rng.integers(1, 6))
    pieces, row, column, docs = random_case(rng, packing, rows, 16)
    shuffle = rng.permutation(len(pieces))  # any piece order
    pieces, row, column = pieces.take(shuffle), row[shuffle], column[shuffle]
    doc_of_piece = pieces.record.copy()
    # Documents in the buffer in a shuffled order, as a reader returns them.
    layout = rng.permutation(len(docs))
    starts = np.zeros(len(docs), np.int64)
    starts[layout] = np.cumsum([0] + [docs[d].size for d in layout])[:-1]
    buffer = padded_buffer([docs[d].astype(dtype) for d in layout], 16, packing.fill_id)
    assert buffer.dtype == dtype
    placement, documents = RowPlacement(pieces, row, column, rows, 16), DocumentTokens(buffer, starts[doc_of_piece])
    got = assemble_rows(placement, documents, packing)
    want = reference(pieces, row, column, rows, 16, docs, doc_of_piece, packing)
    into = {name: np.full((rows, 16), 99, np.int32) for name in FEATURES}  # written in place, fully
    assert assemble_rows(placement, documents, packing, out=into) is into
    assert tuple(got) == FEATURES
    for name in FEATURES:
      assert got[name].dtype == np.int32 and got[name].shape == (rows, 16)
      np.testing.assert_array_equal(got[name], want[name], err_msg=name)
      np.testing.assert_array_equal(into[name], want[name], err_msg=name)


def test_empty_rows_are_padding() -> None:
  packing = PackingConfig(seq_len=8, pad_id=5)
  empty = RowPlacement(Pieces.empty(), np.zeros(0, np.int64), np.zeros(0, np.int64), 2, 8)
  got = assemble_rows(empty, DocumentTokens(padded_buffer([], 8, 5), np.zeros(0, np.int64)), packing)
  assert (got["tokens"] == 5).all() and (got["source_ids"] == -1).all() and not got["loss_mask"].any()


def test_gaps_are_refused() -> None:
  packing = PackingConfig(seq_len=8)
  pieces = Pieces(*(np.array([v]) for v in (0, 0, 0, 0, 3, 3)))
  with pytest.raises(ValueError, match="from column 0"):
    placement = RowPlacement(pieces, np.array([0]), np.array([2]), 1, 8)
    assemble_rows(placement, DocumentTokens(padded_buffer([np.arange(3)], 8, 0), np.array([0])), packing)


def test_out_must_be_contiguous_int32_of_the_shape() -> None:
  packing = PackingConfig(seq_len=8)
  empty = RowPlacement(Pieces.empty(), np.zeros(0, np.int64), np.zeros(0, np.int64), 2, 8)
  wide = {name: np.zeros((2, 16), np.int32)[:, ::2] for name in FEATURES}
  with pytest.raises(ValueError, match="contiguous int32"):
    assemble_rows(empty, DocumentTokens(padded_buffer([], 8, 0), np.zeros(0, np.int64)), packing, out=wide)


def test_a_pad_id_too_large_for_the_tokens_dtype_widens_the_buffer() -> None:
  buffer = padded_buffer([np.array([5, 6], np.uint16)], seq_len=2, pad_id=70_000)
  assert buffer.dtype == np.int32 and buffer.tolist() == [70_000, 5, 6, 70_000, 70_000, 70_000]


def test_a_buffer_not_made_by_padded_buffer_or_too_short_is_refused() -> None:
  packing = PackingConfig(seq_len=8)
  pieces = Pieces(*(np.array([v]) for v in (0, 0, 0, 0, 3, 3)))
  placement = RowPlacement(pieces, np.array([0]), np.array([0]), 1, 8)
  with pytest.raises(ValueError, match="buffer must be the array padded_buffer makes"):
    assemble_rows(placement, DocumentTokens(np.arange(20, dtype=np.float32), np.array([0])), packing)
  with pytest.raises(ValueError, match="a piece's tokens lie outside the buffer"):
    documents = DocumentTokens(padded_buffer([np.arange(3)], 8, 0), np.array([100]))  # doc_start past the end
    assemble_rows(placement, documents, packing)
