"""`reference_logprobs`: a frozen model's log-probability of each side of every pair, stored beside the records.

DPO compares the policy's log-probabilities with a reference model's. They
do not change during training, so they are computed once, here, and read
with the batch (`packing.pairs.reference`)::

    dataset of pairs, in record order -> rows packed as one_row (pairs whole) -> the user's JAX function
      -> log p(target) per slot -> per pair and side: the sum over its trained targets (`sequence_logprobs`)
      -> columns ref_chosen_logp / ref_rejected_logp (float32, one .npy per shard, listed in the manifest)
    manifest stats["reference_logprobs"] = {model_id, sha256 of the columns}

The model id the user gives is the fingerprint: a pipeline asking for
another id's values (or a dataset without them) is refused, naming both. A
pair longer than the rows given here is refused (raise `seq_len`): every
pair gets its values.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from jaxdata.config.layout import pair_features
from jaxdata.config.packing_config import PairPacking
from jaxdata.errors import ConfigError
from jaxdata.pipeline.pair_logprobs import sequence_logprobs
from jaxdata.sources.columns import REFERENCE_COLUMNS, REFERENCE_STATS, column_file_name, reference_digest
from jaxdata.sources.dataset import TokenDataset
from jaxdata.sources.manifest import Manifest
from jaxdata.transforms.assemble import padded_buffer
from jaxdata.transforms.pairs import PairRecords, assemble_pairs, planning_lengths
from jaxdata.transforms.pieces import Pieces

__all__ = ["reference_logprobs"]
_ONE_ROW = PairPacking(layout="one_row")


def _rows_of(lengths: np.ndarray, seq_len: int, rows: int) -> list[tuple[int, int]]:
  """Consecutive pairs into batches of `rows` rows, each row filled in record order (next fit):
  (first, stop) pair index ranges, one per batch. (A loop over pairs' lengths, once, in a one-off
  tool: next fit is sequential; no tokens are touched here.)"""
  batches, first, row, used = [], 0, 0, 0
  for i, n in enumerate(lengths.tolist()):
    if used + n > seq_len:
      row, used = row + 1, 0
      if row == rows:
        batches.append((first, i))
        first, row = i, 0
    used += n
  if first < lengths.size:
    batches.append((first, int(lengths.size)))
  return batches


def _placement(lengths: np.ndarray, seq_len: int) -> tuple[np.ndarray, np.ndarray]:
  """(row, column) of consecutive pairs laid left to right, a new row when one does not fit."""
  row, column, used, current = np.zeros(lengths.size, np.int64), np.zeros(lengths.size, np.int64), 0, 0
  for i, n in enumerate(lengths.tolist()):
    if used + n > seq_len:
      current, used = current + 1, 0
    row[i], column[i] = current, used
    used += n
  return row, column


def reference_logprobs(
  path: str,
  logprob_fn: Callable[[Mapping[str, Any]], Any],
  model_id: str,
  seq_len: int = 2048,
  rows: int = 8,
  log: Callable[[str], None] = lambda message: None,
) -> Manifest:
  """Runs `logprob_fn` over every pair of the dataset at `path` and stores each side's summed log-probability.

  `logprob_fn(batch)`: a batch in the `one_row` layout (NumPy int32 [rows, seq_len] arrays: tokens,
  targets, segment_ids, positions, loss_mask, source_ids, pair_ids, pair_side) -> log p(targets) per
  slot, [rows, seq_len]. Its attention must keep to segments (each side is one). `model_id` names the
  model; it is recorded with the values and checked by every pipeline that reads them.
  """
  _check_arguments(model_id, seq_len, rows)
  with TokenDataset(path) as dataset:
    if not dataset.manifest.holds_pairs:
      raise ConfigError(f"{path}: holds documents, not preference pairs (jaxdata convert --format preference)")
    if dataset.remote is not None:
      raise ConfigError(f"{path}: reference log-probabilities are written beside local records; copy it locally")
    count = dataset.num_records
    lengths = planning_lengths(
      np.asarray(dataset.lengths[np.arange(count)], np.int64),
      dataset.columns["chosen_length"],
      dataset.columns["prompt_length"],
      _ONE_ROW,
    )
    too_long = np.flatnonzero(lengths > seq_len)
    if too_long.size:
      raise ConfigError(
        f"seq_len: {seq_len}; {too_long.size} pairs of {path} are longer (record {int(too_long[0])}: "
        f"{int(lengths[too_long[0]])} tokens): give a seq_len that holds every pair"
      )
    values = {name: np.zeros(count, np.float32) for name in REFERENCE_COLUMNS}
    for first, stop in _rows_of(lengths, seq_len, rows):
      records = np.arange(first, stop)
      ragged = dataset.read_global(records)
      row, column = _placement(lengths[first:stop], seq_len)
      pieces = Pieces(
        np.zeros(records.size, np.int64), np.zeros(records.size, np.int64), records,
        np.zeros(records.size, np.int64), lengths[first:stop], lengths[first:stop],
      )  # fmt: skip
      batch = {name: np.empty((rows, seq_len), np.int32) for name in pair_features("one_row")}
      doc_start = ragged.offsets[:-1]
      assert ragged.mask is not None  # a dataset of pairs carries its marks
      pair_records = PairRecords(
        padded_buffer([ragged.tokens], seq_len, 0), padded_buffer([ragged.mask], seq_len, 0), doc_start, ragged.lengths
      )
      assemble_pairs(pieces, row, column, pair_records, _ONE_ROW, 0, out=batch, where=path)
      chosen, rejected, _ = sequence_logprobs(batch, _checked(logprob_fn(batch), rows, seq_len), max_pairs=seq_len)
      rank = np.arange(records.size) - np.searchsorted(row, row)  # the pair's id in its row, less one
      values["ref_chosen_logp"][records] = np.asarray(chosen)[row, rank]
      values["ref_rejected_logp"][records] = np.asarray(rejected)[row, rank]
      log(f"{stop:,} of {count:,} pairs")
    manifest = dataset.manifest
  return _store(path, manifest, values, model_id)


def _check_arguments(model_id: str, seq_len: int, rows: int) -> None:
  if not isinstance(model_id, str) or not model_id:
    raise ConfigError(f"model_id: a non-empty name of the reference model, got {model_id!r}")
  for name, value, low in (("seq_len", seq_len, 2), ("rows", rows, 1)):
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
      raise ConfigError(f"{name}: an int >= {low}, got {value!r}")


def _checked(logprobs: Any, rows: int, seq_len: int) -> np.ndarray:
  """The function's output: [rows, seq_len] log-probabilities (-inf allowed: a target of probability 0)."""
  try:
    out = np.asarray(logprobs, np.float32)
  except (TypeError, ValueError) as error:
    raise ConfigError(
      f"logprob_fn: returned {type(logprobs).__name__}, not [rows, seq_len] numbers ({error})"
    ) from error
  if out.shape != (rows, seq_len):
    raise ConfigError(
      f"logprob_fn: returned shape {out.shape}; a batch of {rows} rows of {seq_len} needs ({rows}, {seq_len})"
    )
  if np.isnan(out).any() or (out > 0).any():
    raise ConfigError("logprob_fn: returned nan or a positive value; log-probabilities lie in [-inf, 0]")
  return out


def _store(path: str, manifest: Manifest, values: Mapping[str, np.ndarray], model_id: str) -> Manifest:
  """Each shard's slice of the values as its column files; the manifest lists them with the model id."""
  shards, first = [], 0
  for shard in manifest.shards:
    stem = shard.path.removesuffix(".array_record")
    columns = dict(shard.columns)
    for name, array in values.items():
      part = np.ascontiguousarray(array[first : first + shard.num_records], "<f4")
      columns[name] = column_file_name(stem, name)
      np.save(os.path.join(path, columns[name]), part)
    shards.append(dataclasses.replace(shard, columns=columns))
    first += shard.num_records
  stats = {**manifest.stats, REFERENCE_STATS: {"model_id": model_id, "sha256": reference_digest(values)}}
  updated = dataclasses.replace(manifest, shards=tuple(shards), stats=stats)
  updated.save(path)
  return updated
