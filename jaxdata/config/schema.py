"""The sections of a pipeline config: frozen dataclasses that validate themselves.

Each `__post_init__` raises `ConfigError` (a `ValueError`) naming the field,
for example ``packing.seq_len: expected an int >= 2, got 0``. The whole
config, `PipelineConfig`, is in `jaxdata.config.pipeline_config`; every key
is described in docs/configuration.md.

>>> PackingConfig(mode="first_fit", seq_len=8, warmup=({"until_step": 10, "seq_len": 4},)).seq_len_at(3)
4
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Literal, get_args

import numpy as np

from jaxdata.config.batch import BatchConfig, BatchPhase, BatchRamp
from jaxdata.config.ramp import check_ramp_steps, ramp_value
from jaxdata.config.validate import (
  MAX_ID,
  build,
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
  "LinearWarmup",
  "LONG_DOCS",
  "MixtureConfig",
  "PACKING_MODES",
  "PackingConfig",
  "PairPacking",
  "Phase",
  "SAMPLINGS",
  "UNITS",
  "WarmupPhase",
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


# Bounds that keep a value inside what a run can hold: a lag past a million steps is no lag a loop means,
# and a group is pulled whole (group x rows documents at once) before its first batch.
MAX_UPDATE_LAG_STEPS = 1 << 20
MAX_GROUP_BY_LENGTH = 1024


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


@dataclasses.dataclass(frozen=True)
class WarmupPhase:
  """Sequence-length warmup: rows of `seq_len` until `until_step`."""

  until_step: int
  seq_len: int


@dataclasses.dataclass(frozen=True)
class LinearWarmup:
  """Sequence length growing linearly from `start` to `packing.seq_len` over `steps` steps, rounded
  down to multiples of `granularity` (never below `start`), at a constant number of rows (`keep:
  rows`) or about constant tokens (`keep: tokens`: rows = size x seq_len // length, rounded down to
  a multiple of `row_multiple`).

  `steps` may be a fraction of the config's `total_steps` (a float in (0, 1]); the config resolves it.

  >>> LinearWarmup(start=512, steps=2000, granularity=64).length_at(1000, 2048)
  1280
  """

  start: int
  steps: int | float
  granularity: int = 64
  keep: WarmupKeep = "rows"  # "rows": tokens per step grow with the length; "tokens": rows shrink as it grows
  row_multiple: int = 1  # keep tokens: rows rounded down to a multiple of this (the data-parallel devices)

  def __post_init__(self) -> None:
    check_int(self.start, "packing.linear_warmup.start", 2)
    check_int(self.granularity, "packing.linear_warmup.granularity", 1)
    check_choice(self.keep, ("rows", "tokens"), "packing.linear_warmup.keep")
    check_int(self.row_multiple, "packing.linear_warmup.row_multiple", 1)
    check_ramp_steps(self.steps, "packing.linear_warmup.steps")

  def length_at(self, step: int, final: int) -> int:
    return ramp_value(step, self.start, final, self.steps, self.granularity)


@dataclasses.dataclass(frozen=True)
class PairPacking:
  """Preference pairs packed whole (docs/preference.md): each pair one unit, never split.

  `layout`: `one_row` puts both sides of a pair in one row as adjacent segments (with `pair_ids`
  and `pair_side`); `parallel` (MaxText's) gives `chosen_*` and `rejected_*` rows that hold the same
  pairs in the same segment order. `shared_prompt`: the prompt appears once and both answers attend
  to it (a mask a model builds: docs/preference.md). `too_long`: a pair that no row holds is
  dropped and counted (`drop`), or the pipeline refuses to open, naming it (`error`). `reference`:
  the model id whose stored log-probabilities (`jaxdata.reference_logprobs`) come with each side.
  """

  layout: PairLayout = "one_row"
  shared_prompt: bool = False
  too_long: TooLongPairs = "drop"
  reference: str | None = None  # a model id: each side's stored reference log-probability comes with the batch

  def __post_init__(self) -> None:
    check_choice(self.layout, PAIR_LAYOUTS, "packing.pairs.layout")
    if self.reference is not None and (not isinstance(self.reference, str) or not self.reference):
      raise ConfigError(
        f"packing.pairs.reference: a model id (jaxdata reference --model-id), got {short(self.reference)}"
      )
    check_bool(self.shared_prompt, "packing.pairs.shared_prompt")
    check_choice(self.too_long, TOO_LONG_PAIRS, "packing.pairs.too_long")


@dataclasses.dataclass(frozen=True)
class PackingConfig:
  """Packing of documents into rows of `seq_len` tokens.

  `warmup` lists shorter sequence lengths for the first steps; the global
  batch then has global_batch_size x seq_len / warmup seq_len rows, so the
  tokens per step stay constant.
  """

  mode: PackingMode = "first_fit"
  seq_len: int = 2048
  long_docs: LongDocs = "split"
  add_bos: bool = False
  bos_id: int | None = None  # None: the datasets' tokenizer's (recorded at conversion)
  add_eos: bool = False
  eos_id: int | None = None  # None: the datasets' tokenizer's
  pad_id: int | None = None  # None: the tokenizer's, else 0 (a fill value: padding is marked by position)
  warmup: tuple[WarmupPhase, ...] = ()
  linear_warmup: LinearWarmup | None = None
  group_by_length: int = 0  # mode none: rows of similar length together, within groups of this many batches
  max_segments_per_row: int | None = None  # at most this many documents (pieces) a row; None: no cap
  pairs: PairPacking | None = None  # datasets of preference pairs: how pairs are laid out (never split)

  def __post_init__(self) -> None:
    check_choice(self.mode, PACKING_MODES, "packing.mode")
    check_int(self.group_by_length, "packing.group_by_length", 0, MAX_GROUP_BY_LENGTH)
    if self.group_by_length and self.mode != "none":
      raise ConfigError(
        f"packing.group_by_length: {self.group_by_length} groups unpacked rows; it needs mode: none "
        f"(packed rows are full already), got mode: {self.mode}"
      )
    check_int(self.seq_len, "packing.seq_len", 2)
    if self.max_segments_per_row is not None:
      check_int(self.max_segments_per_row, "packing.max_segments_per_row", 1)
    check_choice(self.long_docs, LONG_DOCS, "packing.long_docs")
    for field in ("add_bos", "add_eos"):
      check_bool(getattr(self, field), f"packing.{field}")
    for field in ("bos_id", "eos_id", "pad_id"):
      if getattr(self, field) is not None:
        check_int(getattr(self, field), f"packing.{field}", 0, MAX_ID)
    if not isinstance(self.warmup, (list, tuple)):
      raise ConfigError(f"packing.warmup: expected a list of phases, got {short(self.warmup)}")
    phases = tuple(
      p if isinstance(p, WarmupPhase) else build(WarmupPhase, p, f"packing.warmup[{i}]")
      for i, p in enumerate(self.warmup)
    )
    object.__setattr__(self, "warmup", phases)
    if self.linear_warmup is not None:
      linear = self.linear_warmup
      if not isinstance(linear, LinearWarmup):
        linear = build(LinearWarmup, linear, "packing.linear_warmup")
        object.__setattr__(self, "linear_warmup", linear)
      if phases:
        raise ConfigError("packing.linear_warmup: give it or packing.warmup (the staircase), not both")
      if linear.start >= self.seq_len:
        raise ConfigError(f"packing.linear_warmup.start: {linear.start} must be below packing.seq_len {self.seq_len}")
    if self.pairs is not None:
      self._check_pairs(phases)
    previous = 0
    for i, phase in enumerate(phases):
      where = f"packing.warmup[{i}]"
      check_int(phase.until_step, f"{where}.until_step", previous + 1)
      check_int(phase.seq_len, f"{where}.seq_len", 2)
      if self.seq_len % phase.seq_len:
        raise ConfigError(f"{where}.seq_len: {phase.seq_len} must divide packing.seq_len {self.seq_len}")
      previous = phase.until_step

  def _check_pairs(self, phases: tuple[WarmupPhase, ...]) -> None:
    pairs = self.pairs
    if not isinstance(pairs, PairPacking):
      pairs = build(PairPacking, pairs, "packing.pairs")
      object.__setattr__(self, "pairs", pairs)
    if self.mode == "concat":
      raise ConfigError("packing.mode: concat cuts documents across rows; pairs pack whole (first_fit, best_fit, none)")
    if self.long_docs == "truncate":
      raise ConfigError("packing.long_docs: truncate would cut a pair's rejected side; see packing.pairs.too_long")
    # A pair is never split: split means what drop does (packing.pairs.too_long says when to refuse instead).
    object.__setattr__(self, "long_docs", "drop")
    for field in ("add_bos", "add_eos"):
      if getattr(self, field):
        raise ConfigError(f"packing.{field}: a pair's sides carry their chat template's special tokens already")
    if phases or self.linear_warmup is not None:
      raise ConfigError("packing.warmup: pairs pack at one seq_len (no warmup or linear_warmup)")

  @property
  def bos(self) -> int:
    """The BOS id packing adds (set, or resolved from the datasets' tokenizer when a pipeline opens)."""
    return _resolved(self.bos_id, "bos_id")

  @property
  def eos(self) -> int:
    """The EOS id packing adds (set, or resolved from the datasets' tokenizer when a pipeline opens)."""
    return _resolved(self.eos_id, "eos_id")

  @property
  def fill_id(self) -> int:
    """The id padding slots hold: pad_id, else 0. Padding is marked by position (segment_ids 0,
    loss_mask 0), never by this value, which may also be a real token."""
    return 0 if self.pad_id is None else self.pad_id

  @property
  def special_tokens(self) -> int:
    """Tokens added to every document: BOS and / or EOS."""
    return int(self.add_bos) + int(self.add_eos)

  def kept_tokens(self, lengths: np.ndarray, seq_len: int) -> np.ndarray:
    """Per document (its length in the stream), the tokens packing puts into rows of
    `seq_len`: with BOS / EOS, cut to `seq_len` (`long_docs: truncate` in the fit
    modes, and mode none always), 0 for a document `long_docs: drop` leaves out. The
    mixture counts these, so shares are shares of the tokens that reach the batches.

    >>> import numpy as np
    >>> PackingConfig(long_docs="truncate", add_eos=True).kept_tokens(np.array([10, 5000]), 2048).tolist()
    [11, 2048]
    >>> PackingConfig(long_docs="drop").kept_tokens(np.array([10, 5000]), 2048).tolist()
    [10, 0]
    """
    span = np.asarray(lengths, dtype=np.int64) + self.special_tokens
    if self.long_docs == "drop":
      return np.where(span <= seq_len, span, 0)
    if self.mode == "none" or (self.long_docs == "truncate" and self.mode != "concat"):
      return np.minimum(span, seq_len)
    return span

  @property
  def keeps_every_token(self) -> bool:
    """Whether `kept_tokens` is the length plus BOS / EOS for every document (no cut, no drop)."""
    return self.mode != "none" and (
      self.long_docs == "split" or (self.long_docs == "truncate" and self.mode == "concat")
    )

  def seq_len_at(self, step: int) -> int:
    if self.linear_warmup is not None:
      return self.linear_warmup.length_at(step, self.seq_len)
    for phase in self.warmup:
      if step < phase.until_step:
        return phase.seq_len
    return self.seq_len

  def seq_lens(self) -> tuple[int, ...]:
    """Every row length the run uses, ascending."""
    if self.linear_warmup is not None:
      steps = int(self.linear_warmup.steps)
      return tuple(sorted({self.seq_len, *(self.linear_warmup.length_at(s, self.seq_len) for s in range(steps))}))
    return tuple(sorted({self.seq_len, *(p.seq_len for p in self.warmup)}))


def _resolved(value: int | None, field: str) -> int:
  if value is None:
    raise ConfigError(
      f"packing.{field}: not given, and no dataset's manifest records the tokenizer's {field[:3].upper()} "
      f"(a pipeline takes it from there when it opens the datasets): give packing.{field}"
    )
  return value
