"""`ConversionPlan`: what a conversion does, decided once before any task runs. The local runner (its
processes, or Ray's tasks through the same executor) and the Beam runner execute the same plan; they
differ only in how its tasks are mapped::

    inputs   --expand, detect formats-->  files, formats, sizes       (conversion_plan)
    options  --load the tokenizer-->      dtype, the manifest's tokenizer record
    files    --plan_units-->              units: the tokenize tasks    (local: batched; Beam: Map)
    units' lengths --plan_shard_jobs-->   shard jobs: the write tasks  (after tokenizing, from lengths alone)
    shards   --converted_manifest-->      the manifest: one final step that seals the dataset

Every output byte is a function of the plan's inputs, tokenizer and options (never of the runner, the
machine or the unit size), so each runner writes the local runner's bytes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import numpy as np

from jaxdata.conversion.formats import configured_format, format_of, plan_units
from jaxdata.conversion.input_files import expand_inputs, file_sizes
from jaxdata.conversion.options import ConvertOptions
from jaxdata.conversion.shard_jobs import ShardTarget
from jaxdata.conversion.tokenize_units import (
  UnitResult,
  cached_tokenizer,
  converted_manifest,
  tokenizer_record,
  unit_size,
)
from jaxdata.conversion.tokenizers import dtype_for_vocab_size
from jaxdata.conversion.work_units import WorkUnit
from jaxdata.sources.manifest import Manifest, ShardInfo

__all__ = ["ConversionPlan", "conversion_plan"]


@dataclasses.dataclass(frozen=True)
class ConversionPlan:
  """The files with their formats and sizes, the token dtype, and the units to tokenize."""

  files: tuple[str, ...]
  formats: tuple[str, ...]
  sizes: tuple[int, ...]
  dtype: str  # of the token ids: the smallest for the tokenizer's vocabulary
  unit_bytes: int
  units: tuple[WorkUnit, ...]
  options: ConvertOptions

  @property
  def masked(self) -> bool:
    """Fine-tuning examples: a mask byte per token beside its id."""
    return self.options.examples != "text"

  @property
  def bytes_per_token(self) -> int:
    return int(np.dtype(self.dtype).itemsize) + self.masked

  def shard_target(self, out_dir: str, name: str, scratch: str) -> ShardTarget:
    """Where and how every shard job writes (each record a pair for preference data: its sides as columns)."""
    pairs, images = self.options.examples == "preference", self.options.examples == "vision"
    return ShardTarget(out_dir, name, self.dtype, scratch, self.options.compression, self.masked, pairs, images)

  def manifest(self, name: str, shards: Sequence[ShardInfo], results: Sequence[UnitResult]) -> Manifest:
    """The manifest that seals the dataset. The tokenizer's record is made here, after tokenizing: a
    tokenizer whose files are damaged is named by the step that reads them first, as it always was."""
    record = tokenizer_record(cached_tokenizer(self.options.tokenizer), self.options)
    return converted_manifest(name, self.dtype, record, shards, self.files, results, options=self.options)


def conversion_plan(
  inputs: Sequence[str], options: ConvertOptions, workers: int, on_scan: Callable[[int, int], None] | None = None
) -> ConversionPlan:
  """The plan of converting `inputs` with `options`, its units sized for `workers`; `on_scan(bytes, total)`
  reports the scan of files that are cut into units by their lines. `FileNotFoundError` when no input is
  found, or a tokenizer model is missing."""
  files = expand_inputs(inputs, options.include, options.exclude)
  if not files:
    raise FileNotFoundError(
      f"input: no files found in {list(inputs)} (include {list(options.include)}, exclude {list(options.exclude)})"
    )
  formats = [format_of(f, options.input_format) for f in files]
  tokenizer = cached_tokenizer(options.tokenizer)  # loaded once a process: the units and the manifest share it
  sizes = file_sizes(files)
  total, scanned = sum(sizes), [0]

  def scan(count: int) -> None:
    scanned[0] += count
    if on_scan is not None:
      on_scan(scanned[0], total)

  unit_bytes = unit_size(total, workers, options)
  units = plan_units(files, [configured_format(f, options) for f in formats], unit_bytes, scan, sizes)
  dtype = dtype_for_vocab_size(tokenizer.vocab_size).name
  return ConversionPlan(tuple(files), tuple(formats), tuple(sizes), dtype, unit_bytes, tuple(units), options)
