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

import os
from collections.abc import Mapping

import numpy as np

from jaxdata.errors import DatasetError

__all__ = [
  "PAIR_COLUMNS",
  "REFERENCE_COLUMNS",
  "REFERENCE_STATS",
  "column_file_name",
  "load_column",
  "pair_columns",
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
