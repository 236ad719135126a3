"""The sections of a pipeline config (the datasets, the mixture; packing: packing_config.py), and the
choices every section checks against: frozen dataclasses that validate themselves.

Each `__post_init__` raises `ConfigError` (a `ValueError`) naming the field,
for example ``packing.seq_len: expected an int >= 2, got 0``. The whole
config, `PipelineConfig`, is in `jaxdata.config.pipeline_config`; every key
is described in docs/configuration.md.

>>> MixtureConfig(weights={"web": 3, "code": 1}).phases()[0].weights
{'web': 3, 'code': 1}
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Literal, get_args

from jaxdata.config.batch import BatchConfig, BatchPhase, BatchRamp
from jaxdata.config.validate import (
  check_block_size,
  check_bool,
  check_choice,
  check_int,
  short,
)
from jaxdata.errors import ConfigError

__all__ = [
  "BlockSize",
  "DatasetFormat",
  "ExhaustedPolicy",
  "InterleaveMode",
  "LongDocs",
  "PackingMode",
  "PairLayout",
  "Sampling",
  "Unit",
  "WarmupKeep",
  "BatchConfig",
  "BatchPhase",
  "BatchRamp",
  "DatasetConfig",
  "EXHAUSTED_POLICIES",
  "INHERIT",
  "INTERLEAVES",
  "LONG_DOCS",
  "MixtureConfig",
  "PACKING_MODES",
  "Phase",
  "SAMPLINGS",
  "UNITS",
]

# Each choice is a Literal type (what the type checker holds a comparison to) and its tuple of values
# (what a config is checked against and an error lists), one derived from the other.
Unit = Literal["tokens", "documents"]
InterleaveMode = Literal["exact", "random"]
ExhaustedPolicy = Literal["stop", "repeat"]
PackingMode = Literal["concat", "first_fit", "best_fit", "none"]
LongDocs = Literal["split", "truncate", "drop"]
DatasetFormat = Literal["arrayrecord", "megatron", "flat"]
Sampling = Literal["documents", "windows"]
WarmupKeep = Literal["rows", "tokens"]
PairLayout = Literal["one_row", "parallel"]
TooLongPairs = Literal["drop", "error"]
BlockSize = int | Literal["global", "auto"] | None  # as configured ("auto": from the shards, at open)
UNITS: tuple[Unit, ...] = get_args(Unit)
INTERLEAVES: tuple[InterleaveMode, ...] = get_args(InterleaveMode)
EXHAUSTED_POLICIES: tuple[ExhaustedPolicy, ...] = get_args(ExhaustedPolicy)
PACKING_MODES: tuple[PackingMode, ...] = get_args(PackingMode)
LONG_DOCS: tuple[LongDocs, ...] = get_args(LongDocs)
DATASET_FORMATS: tuple[DatasetFormat, ...] = get_args(DatasetFormat)
SAMPLINGS: tuple[Sampling, ...] = get_args(Sampling)
PAIR_LAYOUTS: tuple[PairLayout, ...] = get_args(PairLayout)
TOO_LONG_PAIRS: tuple[TooLongPairs, ...] = get_args(TooLongPairs)


class _Inherit:
  """Marks a per-dataset setting that takes the top-level value."""

  def __repr__(self) -> str:
    return "INHERIT"

  def __reduce__(self) -> str:
    return "INHERIT"  # unpickles to the one module-level instance (it is compared by identity)


INHERIT: Any = _Inherit()


# A bound that keeps a value inside what a run can hold: a lag past a million steps is no lag a loop means.
MAX_UPDATE_LAG_STEPS = 1 << 20


@dataclasses.dataclass(frozen=True)
class DatasetConfig:
  """One dataset of the mixture; unset fields inherit the top-level value."""

  name: str
  path: str = ""
  shuffle_shards: bool | None = None
  shuffle_within_shard: bool | None = None
  shuffle_block_size: BlockSize = INHERIT
  reshuffle_on_repeat: bool | None = None
  exhausted_policy: ExhaustedPolicy | None = None
  max_repeats: int | None = None
  stop_after_passes: int | None = None
  open_shards: int | None = None
  format: DatasetFormat | None = None  # checked against the manifest's when given
  sampling: Sampling = "documents"
  window: int | None = None  # sampling windows: T (None: packing.seq_len)
  with_replacement: bool = True
  cross_documents: bool = True
  holdout: int | float | None = None  # documents kept out of training for split="eval": a count or a fraction
  documents: tuple[int, int] | None = None  # only documents [start, stop) in stored order (Megatron's --split)
  # Raw inputs instead of a path: files converted into a cache the first time (docs/convert.md)
  inputs: tuple[str, ...] = ()  # globs of JSONL / Parquet / text (.gz, .zst), local or gs:// / s3://
  tokenizer: str | None = None  # with inputs: hf:DIR, hf:FILE.json, sp:FILE.model or byte
  convert: Mapping[str, Any] | None = None  # with inputs: jaxdata convert's options, by ConvertOptions names
  # At a restore with reconfigure=True: a dataset whose content changed under this name starts at pass 0
  replaced: bool = False

  def __post_init__(self) -> None:
    where = f"datasets.{self.name}" if isinstance(self.name, str) else "datasets[].name"
    if not isinstance(self.name, str) or not self.name:
      raise ConfigError(f"{where}: every dataset needs a non-empty name, got {short(self.name)}")
    if not isinstance(self.path, str):
      raise ConfigError(f"{where}.path: expected a string, got {short(self.path)}")
    self._check_inputs(where)
    for field in ("shuffle_shards", "shuffle_within_shard", "reshuffle_on_repeat"):
      if getattr(self, field) is not None:
        check_bool(getattr(self, field), f"{where}.{field}")
    check_bool(self.replaced, f"{where}.replaced")
    if self.shuffle_block_size is not INHERIT:
      check_block_size(self.shuffle_block_size, f"{where}.shuffle_block_size")
    if self.exhausted_policy is not None:
      check_choice(self.exhausted_policy, EXHAUSTED_POLICIES, f"{where}.exhausted_policy")
    if self.max_repeats is not None:
      check_int(self.max_repeats, f"{where}.max_repeats", 0)
    if self.stop_after_passes is not None:
      check_int(self.stop_after_passes, f"{where}.stop_after_passes", 1)
    if self.open_shards is not None:
      check_int(self.open_shards, f"{where}.open_shards", 1)
    if self.format is not None:
      check_choice(self.format, DATASET_FORMATS, f"{where}.format")
    check_choice(self.sampling, SAMPLINGS, f"{where}.sampling")
    check_bool(self.with_replacement, f"{where}.with_replacement")
    check_bool(self.cross_documents, f"{where}.cross_documents")
    if self.window is not None:
      check_int(self.window, f"{where}.window", 1)
    if self.holdout is not None:
      if (
        isinstance(self.holdout, bool)
        or not isinstance(self.holdout, (int, float))
        or self.holdout < 0
        or (isinstance(self.holdout, float) and self.holdout >= 1)
      ):
        raise ConfigError(
          f"{where}.holdout: expected a count (int >= 0) or a fraction in [0, 1), got {short(self.holdout)}"
        )
      if self.sampling == "windows":
        raise ConfigError(f"{where}.holdout: not with sampling: windows (hold out a file instead)")
    if self.documents is not None:
      bounds = self.documents
      if (
        not isinstance(bounds, (list, tuple))
        or len(bounds) != 2
        or any(isinstance(b, bool) or not isinstance(b, int) for b in bounds)
        or not 0 <= bounds[0] < bounds[1]
      ):
        raise ConfigError(f"{where}.documents: expected [start, stop] with 0 <= start < stop, got {short(bounds)}")
      object.__setattr__(self, "documents", (int(bounds[0]), int(bounds[1])))
      if self.sampling == "windows":
        raise ConfigError(f"{where}.documents: not with sampling: windows")
    if self.sampling != "windows":
      for field, default in (("window", None), ("with_replacement", True), ("cross_documents", True)):
        if getattr(self, field) != default:
          raise ConfigError(f"{where}.{field}: applies only with sampling: windows")

  def _check_inputs(self, where: str) -> None:
    inputs = (self.inputs,) if isinstance(self.inputs, str) else self.inputs
    if not isinstance(inputs, (list, tuple)) or not all(isinstance(p, str) and p for p in inputs):
      raise ConfigError(f"{where}.inputs: expected a glob or a list of globs, got {short(self.inputs)}")
    object.__setattr__(self, "inputs", tuple(inputs))
    if self.path and self.inputs:
      raise ConfigError(
        f"{where}: give path (a converted dataset) or inputs (raw files, converted the first time), not both"
      )
    if not self.inputs:
      for field in ("tokenizer", "convert"):
        if getattr(self, field) is not None and not self.path:
          raise ConfigError(
            f"{where}.inputs: names no files (empty or missing), so {field} has nothing to convert; give globs "
            "of the raw files"
          )
        if getattr(self, field) is not None:
          raise ConfigError(f"{where}.{field}: applies to raw inputs (datasets.{self.name}.inputs), not to a path")
      return
    if not isinstance(self.tokenizer, str) or not self.tokenizer:
      raise ConfigError(f"{where}.tokenizer: raw inputs need a tokenizer (hf:DIR, hf:FILE.json, sp:FILE.model or byte)")
    if self.convert is not None and not isinstance(self.convert, Mapping):
      raise ConfigError(f"{where}.convert: expected a mapping of jaxdata convert's options, got {short(self.convert)}")
    object.__setattr__(self, "convert", dict(self.convert or {}))


@dataclasses.dataclass(frozen=True)
class Phase:
  """One phase of a schedule: weights until `until_step` (the last has None).

  `ramp_steps` > 0 moves linearly from the previous phase's weights to these
  over the phase's first `ramp_steps` steps. The weights, steps and ramps
  are checked when the `PipelineConfig` builds its `Schedule`.
  """

  weights: Mapping[str, float]
  until_step: int | None = None
  ramp_steps: int = 0


@dataclasses.dataclass(frozen=True)
class MixtureConfig:
  """How datasets are mixed: fixed `weights` or a `schedule` of phases."""

  weights: Mapping[str, float] | None = None
  schedule: tuple[Phase, ...] | None = None
  unit: Unit = "tokens"
  interleave: InterleaveMode = "exact"
  # Pipeline.update_mixture: new weights from the next step handed out + this (docs/training-loop.md: why 32)
  update_lag_steps: int = 32

  def __post_init__(self) -> None:
    if (self.weights is None) == (self.schedule is None):
      raise ConfigError("mixture: give exactly one of weights or schedule")
    check_int(self.update_lag_steps, "mixture.update_lag_steps", 0, MAX_UPDATE_LAG_STEPS)
    if self.schedule is not None and not self.schedule:
      raise ConfigError("mixture.schedule: needs at least one phase")
    check_choice(self.unit, UNITS, "mixture.unit")
    check_choice(self.interleave, INTERLEAVES, "mixture.interleave")

  def phases(self) -> tuple[Phase, ...]:
    return self.schedule if self.schedule is not None else (Phase(self.weights or {}),)
