"""The `packing` section of a pipeline config: `PackingConfig`, its warmups (`WarmupPhase`,
`LinearWarmup`) and preference pairs (`PairPacking`); frozen dataclasses that validate themselves.

>>> PackingConfig(mode="first_fit", seq_len=8, warmup=({"until_step": 10, "seq_len": 4},)).seq_len_at(3)
4
"""

from __future__ import annotations

import dataclasses

import numpy as np

from jaxdata.config.image_packing import ImagePacking
from jaxdata.config.ramp import check_ramp_steps, ramp_value
from jaxdata.config.schema import (
  LONG_DOCS,
  PACKING_MODES,
  PAIR_LAYOUTS,
  TOO_LONG_PAIRS,
  LongDocs,
  PackingMode,
  PairLayout,
  TooLongPairs,
  WarmupKeep,
)
from jaxdata.config.validate import (
  MAX_ID,
  build,
  check_bool,
  check_choice,
  check_int,
  short,
)
from jaxdata.errors import ConfigError

__all__ = ["LinearWarmup", "PackingConfig", "PairPacking", "WarmupPhase"]

# A group is pulled whole (group x rows documents at once) before its first batch.
MAX_GROUP_BY_LENGTH = 1024


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
  images: ImagePacking | None = None  # image-text datasets: a row's patch and image budgets (examples never split)

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
    if self.images is not None:
      self._check_images(phases)
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

  def _check_images(self, phases: tuple[WarmupPhase, ...]) -> None:
    images = self.images
    if not isinstance(images, ImagePacking):
      images = build(ImagePacking, images, "packing.images")
      object.__setattr__(self, "images", images)
    if self.pairs is not None:
      raise ConfigError(
        "packing.images: image-text examples and preference pairs are packed apart (give one of the two)"
      )
    if self.mode == "concat":
      raise ConfigError(
        "packing.mode: concat cuts examples across rows; image-text examples pack whole (first_fit, best_fit, none)"
      )
    if self.long_docs == "truncate":
      raise ConfigError(
        "packing.long_docs: truncate would cut an example's images from its text; see packing.images.too_large"
      )
    # An example is never split: split means what drop does (packing.images.too_large says when to refuse instead).
    object.__setattr__(self, "long_docs", "drop")
    for field in ("add_bos", "add_eos"):
      if getattr(self, field):
        raise ConfigError(f"packing.{field}: image-text examples carry their template's special tokens already")
    if phases or self.linear_warmup is not None:
      field = "warmup" if phases else "linear_warmup"
      raise ConfigError(f"packing.{field}: image-text rows pack at one seq_len (no warmup or linear_warmup)")

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
