"""Preference pairs in rows: each pair planned as one piece, laid out by `packing.pairs`.

A pair record is its chosen side's ids, then its rejected side's, each side
a whole rendering (prompt, then answer). The packer places a pair as one
piece of its *planning length* (`planning_lengths`), so a pair is never
split across rows, steps or hosts; `assemble_pairs` then lays the piece
out. With `shared_prompt`, the prompt's first P - 1 tokens appear once and
each answer starts from the prompt's last token (so every answer token's
log-probability is a target of its own side)::

    record            p p p p a a a | p p p p b b             (P = 4 prompt tokens per side)

    one_row           p p p p a a a p p p p b b               one row, two segments
      pair_side       0 0 0 0 0 0 0 1 1 1 1 1 1
      positions       0 1 2 3 4 5 6 0 1 2 3 4 5
    one_row, shared   p p p|p a a a|p b b                     three segments: prompt, chosen, rejected
      pair_side       2 2 2 0 0 0 0 1 1 1
      positions       0 1 2 3 4 5 6 3 4 5
    parallel          chosen row:   p p p p a a a             the same pairs, in the same segment
                      rejected row: p p p p b b               order, in both rows (compact)
    parallel, shared  rejected row: p b b  (positions 3 4 5)  attends the chosen row's prompt

Targets are the next token of the same side (the last token of a side
trains nothing); `loss_mask` is the target's trained flag (bit 0 of the
record's byte per id), as the fine-tuning path sets it for the side's
conversation alone.

>>> from jaxdata.config.packing_config import PairPacking
>>> planning_lengths(np.array([7]), np.array([4]), np.array([2]), PairPacking("one_row", shared_prompt=True)).tolist()
[6]
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import numpy as np

from jaxdata.config.layout import FEATURES, PAIR_SIDES, pair_features
from jaxdata.config.packing_config import PairPacking
from jaxdata.errors import DatasetError
from jaxdata.transforms.pieces import Pieces

__all__ = ["PROMPT_SIDE", "PairRecords", "assemble_pairs", "planning_lengths"]

PROMPT_SIDE = 2  # pair_side of a shared prompt's tokens (one_row)
_TRAINED, _REJECTED = 1, 2  # the bits of a pair record's byte per id


def _shared(chosen: np.ndarray, rejected: np.ndarray, prompt: np.ndarray, pairs: PairPacking) -> np.ndarray:
  """Prompt tokens laid out once: P - 1 for a pair with both sides (a KTO example shares nothing)."""
  if not pairs.shared_prompt:
    return np.zeros_like(chosen)
  return np.where((chosen > 0) & (rejected > 0), np.maximum(prompt - 1, 0), 0)


def planning_lengths(
  record_length: np.ndarray, chosen_length: np.ndarray, prompt_length: np.ndarray, pairs: PairPacking
) -> np.ndarray:
  """Per pair, the columns it takes in a row: both sides (less the shared prompt) with `one_row`,
  the longer side with `parallel` (a rejected side without the shared prompt)."""
  record, chosen, prompt = (np.asarray(a, np.int64) for a in (record_length, chosen_length, prompt_length))
  rejected = record - chosen
  shared = _shared(chosen, rejected, prompt, pairs)
  if pairs.layout == "one_row":
    return record - shared
  return np.maximum(chosen, rejected - shared)


@dataclasses.dataclass(frozen=True)
class PairRecords:
  """A step's pair records as read: `buffer` and `marks` laid out by `padded_buffer` (a lead slot,
  then the records, then padding), `doc_start[i]` where piece i's record starts (before the lead
  slot) and `doc_length[i]` its ids."""

  buffer: np.ndarray
  marks: np.ndarray
  doc_start: np.ndarray
  doc_length: np.ndarray
  values: Mapping[str, np.ndarray] = dataclasses.field(default_factory=dict)  # per piece: its record's columns


def _ranges(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
  """Every index of [starts[i], starts[i] + counts[i]), in order (no Python loop)."""
  firsts = np.cumsum(counts) - counts
  return np.repeat(starts - firsts, counts) + np.arange(int(counts.sum()), dtype=np.int64)


def _within_row_starts(host_row: np.ndarray, column: np.ndarray, width: np.ndarray) -> np.ndarray:
  """Pieces laid left to right in each row in planned column order, `width[i]` apart: piece i's column."""
  order = np.lexsort((column, host_row))
  row, width = host_row[order], width[order]
  ends = np.cumsum(width)
  first_in_row = np.r_[True, row[1:] != row[:-1]] if row.size else np.zeros(0, bool)
  row_base = np.maximum.accumulate(np.where(first_in_row, ends - width, 0)) if row.size else ends
  out = np.empty_like(width)
  out[order] = ends - width - row_base
  return out


def _segment_rank(host_row: np.ndarray, column: np.ndarray) -> np.ndarray:
  """1 + each piece's rank among its row's pieces by column (the pair's id in its row)."""
  order = np.lexsort((column, host_row))
  row = host_row[order]
  first = np.searchsorted(row, row, side="left")
  rank = np.empty(row.size, np.int64)
  rank[order] = np.arange(row.size) - first + 1
  return rank


@dataclasses.dataclass(frozen=True)
class _PairSides:
  """Per pair, from its own bytes: where its record starts in the buffer, its ids, its sides' lengths,
  its prompt and the prompt ids laid out once (`_shared`)."""

  start: np.ndarray
  length: np.ndarray
  chosen: np.ndarray
  rejected: np.ndarray
  shared: np.ndarray


@dataclasses.dataclass(frozen=True)
class _WriteFrom:
  """What every run of a step writes from: the records as read, the pieces, each pair's id in its row."""

  records: PairRecords
  pieces: Pieces
  pair_id: np.ndarray
  fill_id: int
  seq_len: int


def _pair_sides(pieces: Pieces, records: PairRecords, pairs: PairPacking, where: str) -> _PairSides:
  """Each pair's sides read from its own bytes (the buffer holds a whole read span), checked against
  the plan: a `DatasetError` naming `where` for a record out of order or planned at another length."""
  marks = records.marks
  start = records.doc_start + 1  # the buffer's lead slot
  length = records.doc_length.astype(np.int64)
  own = marks[_ranges(start, length)]
  first = np.cumsum(length) - length
  nonempty = length > 0  # reduceat needs a start inside the array; a record has at least one id
  rejected = np.zeros_like(length)
  position = np.arange(own.size) - np.repeat(first, length)
  first_trained = np.zeros_like(length)
  if nonempty.any():
    rejected[nonempty] = np.add.reduceat((own & _REJECTED) != 0, first[nonempty])
    first_trained[nonempty] = np.minimum.reduceat(np.where(own & _TRAINED, position, 1 << 62), first[nonempty])
  chosen = length - rejected
  prompt = np.minimum(first_trained, np.where(chosen > 0, chosen, length))
  # a pair record's layout (conversion and DatasetWriter write no other): chosen ids, then rejected ids
  misplaced = ((own & _REJECTED) != 0) != (position >= np.repeat(chosen, length))
  if misplaced.any():
    _damaged(where, pieces, int(np.searchsorted(first, np.argmax(misplaced), side="right")) - 1, "sides out of order")
  wrong = np.flatnonzero((pieces.offset != 0) | (planning_lengths(length, chosen, prompt, pairs) != pieces.length))
  if wrong.size:
    bad = int(wrong[0])
    raise DatasetError(
      f"{where}: record {int(pieces.record[bad])} of dataset {int(pieces.dataset[bad])} does not give the "
      f"{int(pieces.length[bad])} columns it was planned at (its column files are stale or damaged; convert again)"
    )
  return _PairSides(start, length, chosen, rejected, _shared(chosen, rejected, prompt, pairs))


def _check_shared_prompt(sides: _PairSides, records: PairRecords, pieces: Pieces, where: str) -> None:
  """A prompt laid out once must be the same ids on both sides, or a `DatasetError` naming `where`."""
  if not sides.shared.any():
    return
  once = _ranges(sides.start, sides.shared)
  differ = records.buffer[once] != records.buffer[once + np.repeat(sides.chosen, sides.shared)]
  if differ.any():
    owner = np.repeat(np.arange(sides.length.size), sides.shared)
    _damaged(where, pieces, int(owner[np.argmax(differ)]), "its sides' prompts differ")


def _pair_runs(sides: _PairSides, records: PairRecords) -> dict[str, np.ndarray]:
  """Three runs per pair: the shared prompt (one_row only), the chosen side, the rejected side."""
  start, chosen, rejected, shared = sides.start, sides.chosen, sides.rejected, sides.shared
  runs = {
    "src": np.stack([start, start + shared, start + chosen + shared], 1),
    "len": np.stack([shared, chosen - shared, rejected - shared], 1),
    "pos": np.stack([np.zeros_like(shared), shared, shared], 1),
    "side": np.broadcast_to(np.array([PROMPT_SIDE, 0, 1]), (start.size, 3)),
    "ends": np.broadcast_to(np.array([False, True, True]), (start.size, 3)),
  }
  if records.values:  # each side's tokens carry its reference log-probability (a shared prompt's: none)
    chosen_ref, rejected_ref = (
      np.asarray(records.values[n], np.float32) for n in ("ref_chosen_logp", "ref_rejected_logp")
    )
    runs["ref"] = np.stack([np.zeros_like(chosen_ref), chosen_ref, rejected_ref], 1)
  return runs


def _write_one_row(
  out: dict[str, np.ndarray],
  runs: dict[str, np.ndarray],
  sides: _PairSides,
  host_row: np.ndarray,
  column: np.ndarray,
  source: _WriteFrom,
) -> None:
  """One row per pair's place: its runs side by side, segment ids in row order (empty runs skipped)."""
  shared, chosen = sides.shared, sides.chosen
  runs["dst"] = (host_row * source.seq_len + column)[:, None] + np.stack([0 * shared, shared, chosen], 1)
  present = runs["len"] > 0  # no shared prompt, or a KTO example's missing side
  runs["segment"] = _within_row_starts(host_row, column, present.sum(1))[:, None] + np.cumsum(present, 1)
  _write(out, "", _selected(runs, np.ones_like(present)), source)


def _write_parallel(
  out: dict[str, np.ndarray],
  runs: dict[str, np.ndarray],
  sides: _PairSides,
  host_row: np.ndarray,
  column: np.ndarray,
  source: _WriteFrom,
) -> None:
  """The chosen side whole in the chosen row; the rejected side (less a shared prompt) in the rejected
  row; each row's pairs compact, in planned column order."""
  start, chosen, rejected, shared = sides.start, sides.chosen, sides.rejected, sides.shared
  widths = {"chosen": chosen, "rejected": rejected - shared}
  runs["segment"] = np.repeat(source.pair_id[:, None], 3, 1)
  runs["src"] = runs["src"].copy()
  runs["src"][:, 1] = start  # the chosen row holds its prompt
  runs["len"] = np.stack([0 * shared, chosen, rejected - shared], 1)
  runs["pos"] = np.stack([0 * shared, 0 * shared, shared], 1)
  for k, side in enumerate(PAIR_SIDES):
    side_column = _within_row_starts(host_row, column, widths[side])
    runs["dst"] = np.stack([host_row * source.seq_len + side_column] * 3, 1)
    keep = np.zeros((start.size, 3), bool)
    keep[:, 1 + k] = True
    _write(out, f"{side}_", _selected(runs, keep), source)


def assemble_pairs(
  pieces: Pieces,
  host_row: np.ndarray,
  column: np.ndarray,
  records: PairRecords,
  pairs: PairPacking,
  fill_id: int,
  *,
  out: dict[str, np.ndarray],
  where: str = "a pair record",
) -> dict[str, np.ndarray]:
  """Writes the step's pairs into `out` (int32 [rows, seq_len] arrays of `pair_features(layout)`).

  Each piece is a whole pair planned at `planning_lengths`; a record whose sides do not give that
  length (a stale or damaged column file) raises a `DatasetError` naming `where`."""
  sides = _pair_sides(pieces, records, pairs, where)
  _check_shared_prompt(sides, records, pieces, where)
  seq_len = out[pair_features(pairs.layout)[0]].shape[1]
  source = _WriteFrom(records, pieces, _segment_rank(host_row, column), fill_id, seq_len)
  layout = _write_one_row if pairs.layout == "one_row" else _write_parallel
  layout(out, _pair_runs(sides, records), sides, host_row, column, source)
  return out


def _damaged(where: str, pieces: Pieces, piece: int, what: str) -> None:
  raise DatasetError(
    f"{where}: record {int(pieces.record[piece])} of dataset {int(pieces.dataset[piece])} is not a preference pair "
    f"as written ({what}): damaged, or not written by jaxdata"
  )


def _selected(runs: dict[str, np.ndarray], keep: np.ndarray) -> dict[str, np.ndarray]:
  """The runs kept (in pair order), flattened; each tagged with its pair's index."""
  keep = keep & (runs["len"] > 0)
  owner = np.broadcast_to(np.arange(keep.shape[0])[:, None], keep.shape)
  return {**{name: np.asarray(value)[keep] for name, value in runs.items()}, "pair": owner[keep]}


def _write(out: dict[str, np.ndarray], prefix: str, runs: dict[str, np.ndarray], source: _WriteFrom) -> None:
  """Fills `prefix` + FEATURES (and pair_ids / pair_side without a prefix) from the runs."""
  buffer, marks, fill_id = source.records.buffer, source.records.marks, source.fill_id
  flat = {name: out[prefix + name].reshape(-1) for name in FEATURES}
  for name, value in (("tokens", fill_id), ("targets", fill_id), ("segment_ids", 0), ("positions", 0)):
    flat[name][:] = value
  flat["loss_mask"][:] = 0
  flat["source_ids"][:] = -1
  length = runs["len"].astype(np.int64)
  src = _ranges(runs["src"].astype(np.int64), length)
  slot = _ranges(runs["dst"].astype(np.int64), length)
  if slot.size and (slot.max() >= flat["tokens"].size):
    raise ValueError("assemble_pairs: a pair lies past its row (planned beyond seq_len)")
  flat["tokens"][slot] = buffer[src]
  flat["targets"][slot] = buffer[src + 1]
  flat["loss_mask"][slot] = marks[src + 1] & _TRAINED
  flat["positions"][slot] = _ranges(runs["pos"].astype(np.int64), length)
  flat["segment_ids"][slot] = np.repeat(runs["segment"], length)
  flat["source_ids"][slot] = np.repeat(source.pieces.dataset[runs["pair"]], length)
  last = (runs["dst"] + length - 1)[runs["ends"]]
  flat["targets"][last] = fill_id
  flat["loss_mask"][last] = 0
  if not prefix:
    pair_ids, pair_side = out["pair_ids"].reshape(-1), out["pair_side"].reshape(-1)
    pair_ids[:] = 0
    pair_side[:] = -1
    pair_ids[slot] = np.repeat(source.pair_id[runs["pair"]], length)
    pair_side[slot] = np.repeat(runs["side"], length)
  if f"{prefix}ref_logp" in out:  # float32 (`StepLayout`)
    reference = out[f"{prefix}ref_logp"].reshape(-1)
    reference[:] = 0.0
    if "ref" in runs:
      reference[slot] = np.repeat(runs["ref"], length)
