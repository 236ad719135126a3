"""Per-record columns: one value per record of a shard, in a `.npy` file beside it.

A column is what planning or a batch needs of a record without reading it.
A dataset of preference pairs has two, written at conversion from each
record's marks (`pair_columns`)::

    record (chosen ids ++ rejected ids)   p p p a a a | p p p b b      (p: prompt, untrained)
    chosen_length                          6
    prompt_length                          3                           (tokens before the first trained one)

They are listed per shard in the manifest (`ShardInfo.columns`, name ->
file) and loaded whole when the dataset opens: 4 bytes a record.

>>> marks = np.array([0, 0, 1, 2, 2, 3, 0, 1], np.uint8)  # a pair (prompt 2 + answer 1, each side), a KTO side
>>> columns = pair_columns(np.array([6, 2]), marks)
>>> columns["chosen_length"].tolist(), columns["prompt_length"].tolist()
([3, 2], [2, 1])
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from jaxdata.errors import DatasetError

__all__ = [
  "PAIR_COLUMNS",
  "REFERENCE_COLUMNS",
  "REFERENCE_STATS",
  "check_pair_columns",
  "check_reference_values",
  "column_file_name",
  "load_column",
  "pair_columns",
  "pair_layout_problem",
  "reference_digest",
  "write_columns",
]

PAIR_COLUMNS = ("chosen_length", "prompt_length")
# A reference model's summed log-probability of each side (`jaxdata.tools.reference`): float32
REFERENCE_COLUMNS = ("ref_chosen_logp", "ref_rejected_logp")
REFERENCE_STATS = "reference_logprobs"  # the manifest stats key of their {"model_id", "sha256"}
COLUMN_DTYPE = np.dtype("<u4")
_TRAINED, _REJECTED = 1, 2  # the bits of a pair record's byte per id (conversion.preference)


def pair_columns(lengths: np.ndarray, marks: np.ndarray) -> dict[str, np.ndarray]:
  """Per pair record: its chosen side's length (ids before the first rejected one) and its prompt's
  (ids before the first trained one of the record's first side). Vectorised over records."""
  lengths = np.asarray(lengths, np.int64)
  starts = np.cumsum(lengths) - lengths
  marks = np.asarray(marks, np.uint8)
  rejected = (marks & _REJECTED) != 0
  count = np.add.reduceat(rejected, starts) if lengths.size else np.zeros(0, np.int64)
  chosen = lengths - np.where(lengths > 0, count, 0)
  first_side = np.where(chosen > 0, chosen, lengths)  # a KTO record holds one side only
  position = np.arange(marks.size) - np.repeat(starts, lengths)
  untrained_before = np.where((marks & _TRAINED) != 0, position, np.iinfo(np.int64).max)
  first_trained = np.minimum.reduceat(untrained_before, starts) if lengths.size else np.zeros(0, np.int64)
  prompt = np.minimum(first_trained, first_side)
  return {"chosen_length": chosen.astype(COLUMN_DTYPE), "prompt_length": prompt.astype(COLUMN_DTYPE)}


def pair_layout_problem(ids: np.ndarray, lengths: np.ndarray, marks: np.ndarray) -> tuple[int, str] | None:
  """(the first record, what is wrong) where pair records are not `pair_record`'s layout: the chosen
  side, then the rejected side (bit 1 a suffix), both sides of a pair opening with the same untrained
  prompt; None where every record is. Vectorised over records."""
  lengths = np.asarray(lengths, np.int64)
  if not lengths.size:
    return None
  starts = np.cumsum(lengths) - lengths
  owner = np.repeat(np.arange(lengths.size), lengths)
  position = np.arange(marks.size) - starts[owner]
  columns = pair_columns(lengths, marks)
  chosen, prompt = columns["chosen_length"].astype(np.int64), columns["prompt_length"].astype(np.int64)
  rejected_side = (marks & _REJECTED) != 0
  misplaced = np.flatnonzero(rejected_side != (position >= chosen[owner]))
  if misplaced.size:
    return int(
      owner[misplaced[0]]
    ), "its bytes' rejected bit is not set on the record's last ids only (chosen, then rejected)"
  both = (chosen > 0) & (chosen < lengths)
  short = np.flatnonzero(both & (prompt > lengths - chosen))
  if short.size:
    return int(short[0]), "its rejected side is shorter than the prompt"
  in_prompt = both[owner] & (position < prompt[owner])  # chosen prompt ids, by record
  other = np.flatnonzero(in_prompt) + chosen[owner[in_prompt]]  # the same position on the rejected side
  differ = (ids[in_prompt] != ids[other]) | ((marks[other] & _TRAINED) != 0)
  if differ.any():
    return int(
      owner[np.flatnonzero(in_prompt)[np.argmax(differ)]]
    ), "its two sides do not open with the same untrained prompt"
  return None


def check_pair_columns(lengths: np.ndarray, chosen: np.ndarray, prompt: np.ndarray, named: str) -> None:
  """A pair dataset's columns against its lengths: integers, a chosen side within its record, a prompt
  within both sides; DatasetError naming `named` and the first record that is not."""
  for array, name in ((chosen, "chosen_length"), (prompt, "prompt_length")):
    if array.dtype.kind not in "iu":
      raise DatasetError(f"{named}: column {name} holds {array.dtype} values; lengths are integers")
  lengths, chosen, prompt = (np.asarray(a, np.int64) for a in (lengths, chosen, prompt))
  rejected = lengths - chosen
  first_side = np.where(chosen > 0, chosen, lengths)
  both = (chosen > 0) & (rejected > 0)
  bad = (chosen < 0) | (rejected < 0) | (prompt < 0) | (prompt > first_side) | (both & (prompt > rejected))
  if bad.any():
    i = int(np.argmax(bad))
    raise DatasetError(
      f"{named}: record {i} ({int(lengths[i])} ids) has chosen_length {int(chosen[i])} and prompt_length "
      f"{int(prompt[i])}, which its sides cannot hold (stale or damaged columns: convert it again)"
    )


def reference_digest(columns: Mapping[str, np.ndarray]) -> str:
  """sha256 of the reference columns over all records (float32, little-endian), one column after the other."""
  digest = hashlib.sha256()
  for name in REFERENCE_COLUMNS:
    digest.update(np.ascontiguousarray(columns[name], "<f4").tobytes())
  return digest.hexdigest()


def check_reference_values(columns: Mapping[str, np.ndarray], stats: Mapping[str, Any], path: str) -> None:
  """The reference columns are the values written with the model id (their sha256): DatasetError if not."""
  found = reference_digest(columns)
  if found != stats.get("sha256"):
    raise DatasetError(
      f"{path}: its reference log-probability columns differ from the ones written for model "
      f"{stats.get('model_id')!r} (sha256 {found[:12]}..., manifest.json {str(stats.get('sha256'))[:12]}...): "
      "run jaxdata reference again"
    )


def column_file_name(stem: str, column: str) -> str:
  return f"{stem}.{column}.npy"


def write_columns(out_dir: str, stem: str, columns: Mapping[str, np.ndarray]) -> dict[str, str]:
  """Writes each column beside the shard `stem`; name -> file name (relative to `out_dir`)."""
  written = {}
  for name, values in columns.items():
    file_name = column_file_name(stem, name)
    np.save(os.path.join(out_dir, file_name), np.asarray(values))
    written[name] = file_name
  return written


def load_column(local_file: str, named: str, num_records: int) -> np.ndarray:
  """A column file, checked: one number per record (errors name `named`, its place in the dataset)."""
  if not os.path.isfile(local_file):
    raise DatasetError(f"{named}: column file is missing (listed in manifest.json)")
  try:
    values = np.load(local_file, allow_pickle=False)
  except (ValueError, OSError) as error:
    raise DatasetError(f"{named}: not a readable .npy column ({error})") from error
  if values.ndim != 1 or values.size != num_records or values.dtype.kind not in "iuf":
    raise DatasetError(
      f"{named}: expected {num_records} numbers (one per record), got {values.dtype} of shape {values.shape}"
    )
  return values
