"""The global batch and its schedule: `BatchConfig`, with phases (`BatchPhase`) or a linear `BatchRamp`.

The batch size is a pure function of step, so a restore onto any host count
continues it; `describe` / `from_description` are what the checkpoint
fingerprint records, and `agrees_before` lets a restore accept a schedule
that changes only from the restored step on.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from jaxdata.config.layout import FEATURES, FeatureSpec
from jaxdata.config.ramp import check_ramp_steps, ramp_value
from jaxdata.config.validate import build, check_bool, check_int, short
from jaxdata.errors import ConfigError

__all__ = ["BatchConfig", "BatchPhase", "BatchRamp"]


@dataclasses.dataclass(frozen=True)
class BatchPhase:
  """A batch-size schedule phase: `global_batch_size` rows until `until_step` (exclusive)."""

  until_step: int | float
  global_batch_size: int


@dataclasses.dataclass(frozen=True)
class BatchRamp:
  """Global batch size rising linearly from `start` to `batch.global_batch_size` over `steps` steps,
  rounded down to multiples of `granularity` (never below `start`).

  >>> BatchRamp(start=64, steps=1000, granularity=32).size_at(500, 256)
  160
  """

  start: int
  steps: int | float
  granularity: int = 1

  def __post_init__(self) -> None:
    check_int(self.start, "batch.ramp.start", 1)
    check_int(self.granularity, "batch.ramp.granularity", 1)
    check_ramp_steps(self.steps, "batch.ramp.steps")

  def size_at(self, step: int, final: int) -> int:
    return ramp_value(step, self.start, final, self.steps, self.granularity)


@dataclasses.dataclass(frozen=True)
class BatchConfig:
  """Global batch shape, its schedule, and what happens to the final partial batch.

  `schedule` (phases of sizes until steps) or `ramp` (linear) change the
  global batch size with the step; `global_batch_size` is the size after them.
  `features`: the arrays each batch holds, a subset of `FEATURES` (kept in that
  order); a loop that reads no `source_ids` or `positions` leaves them out:
  they are dropped on the host, before the transfer to the devices. It changes no batch's other arrays and no
  state: a checkpoint restores under any choice.

  >>> BatchConfig(global_batch_size=256, schedule=({"until_step": 100, "global_batch_size": 64},)).size_at(99)
  64
  """

  global_batch_size: int = 8
  drop_remainder: bool = True
  schedule: tuple[BatchPhase, ...] = ()
  ramp: BatchRamp | None = None
  features: tuple[str, ...] = FEATURES
  extra_features: tuple[FeatureSpec, ...] = ()  # arrays of their own dtype and extent, made by a function each

  def __post_init__(self) -> None:
    check_int(self.global_batch_size, "batch.global_batch_size", 1)
    object.__setattr__(self, "features", _checked_features(self.features))
    if not isinstance(self.extra_features, (list, tuple)):
      raise ConfigError(f"batch.extra_features: expected a list of features, got {short(self.extra_features)}")
    extras = tuple(f if isinstance(f, FeatureSpec) else FeatureSpec.from_json(f) for f in self.extra_features)
    names = [f.name for f in extras]
    clash = sorted({n for n in names if names.count(n) > 1 or n in FEATURES})
    if clash:
      raise ConfigError(f"batch.extra_features: {clash[0]!r} names another feature of the step")
    object.__setattr__(self, "extra_features", extras)
    check_bool(self.drop_remainder, "batch.drop_remainder")
    if not isinstance(self.schedule, (list, tuple)):
      raise ConfigError(f"batch.schedule: expected a list of phases, got {short(self.schedule)}")
    phases = tuple(
      p if isinstance(p, BatchPhase) else build(BatchPhase, p, f"batch.schedule[{i}]")
      for i, p in enumerate(self.schedule)
    )
    object.__setattr__(self, "schedule", phases)
    previous = 0
    for i, phase in enumerate(phases):
      if not isinstance(phase.until_step, float):
        check_int(phase.until_step, f"batch.schedule[{i}].until_step", previous + 1)
        previous = phase.until_step
      check_int(phase.global_batch_size, f"batch.schedule[{i}].global_batch_size", 1)
    if self.ramp is not None and not isinstance(self.ramp, BatchRamp):
      object.__setattr__(self, "ramp", build(BatchRamp, self.ramp, "batch.ramp"))
    if self.ramp is not None and phases:
      raise ConfigError("batch.ramp: give it or batch.schedule, not both")

  def size_at(self, step: int) -> int:
    """The global batch size (rows, before any sequence-length warmup) at `step`."""
    if self.ramp is not None:
      return self.ramp.size_at(step, self.global_batch_size)
    for phase in self.schedule:
      if step < phase.until_step:
        return phase.global_batch_size
    return self.global_batch_size

  @property
  def changes_until(self) -> int:
    """The step from which the size stays `global_batch_size`."""
    if self.ramp is not None:
      return int(self.ramp.steps)
    return int(max((p.until_step for p in self.schedule), default=0))

  @classmethod
  def from_description(cls, value: Any) -> BatchConfig:
    """The schedule a fingerprint recorded (an int, or `describe()`'s string); ValueError if not one.

    >>> BatchConfig.from_description("64<100,128<200,256").size_at(150)
    128
    """
    if isinstance(value, int) and not isinstance(value, bool):
      return cls(global_batch_size=value)
    if not isinstance(value, str):
      raise ValueError(f"not a batch schedule: {value!r}")
    if value.startswith("ramp:"):
      start, _, rest = value[5:].partition("->")
      final, _, rest = rest.partition("/")
      steps, _, granularity = rest.partition("x")
      return cls(global_batch_size=int(final), ramp=BatchRamp(int(start), int(steps), int(granularity)))
    *phases, final = value.split(",")
    return cls(
      global_batch_size=int(final),
      schedule=tuple(BatchPhase(int(p.split("<")[1]), int(p.split("<")[0])) for p in phases),
    )

  def agrees_before(self, other: BatchConfig, step: int) -> bool:
    """Whether both give the same size at every step before `step`."""
    last = min(step, max(self.changes_until, other.changes_until) + 1)
    return all(self.size_at(s) == other.size_at(s) for s in range(last)) and (
      step <= last or self.global_batch_size == other.global_batch_size
    )

  def require_features(self, needed: tuple[str, ...], reader: str, where: str = "the config") -> None:
    """`ConfigError` naming `batch.features` and what `reader` needs that `where` leaves out.

    >>> BatchConfig(features=("tokens",)).require_features(("tokens", "targets"), "the model")
    Traceback (most recent call last):
    jaxdata.errors.ConfigError: batch.features: the model reads targets, which the config leaves out (list it there, or leave batch.features out)
    """
    missing = [name for name in needed if name not in self.features]
    if missing:
      raise ConfigError(
        f"batch.features: {reader} reads {', '.join(missing)}, which {where} leaves out "
        "(list it there, or leave batch.features out)"
      )

  def describe(self) -> str:
    """The schedule as the checkpoint fingerprint records it."""
    if self.ramp is not None:
      return f"ramp:{self.ramp.start}->{self.global_batch_size}/{self.ramp.steps}x{self.ramp.granularity}"
    return ",".join([*(f"{p.global_batch_size}<{p.until_step}" for p in self.schedule), str(self.global_batch_size)])


def _checked_features(features: Any) -> tuple[str, ...]:
  """The named features in `FEATURES` order; `ConfigError` naming an unknown, repeated or missing one.

  >>> _checked_features(["loss_mask", "tokens"])
  ('tokens', 'loss_mask')
  """
  if isinstance(features, str) or not isinstance(features, (list, tuple)) or not features:
    raise ConfigError(f"batch.features: expected a non-empty list of {', '.join(FEATURES)}; got {short(features)}")
  for name in features:
    if name not in FEATURES:
      raise ConfigError(f"batch.features: unknown feature {short(name)} (the features: {', '.join(FEATURES)})")
  if len(set(features)) != len(features):
    raise ConfigError(f"batch.features: a feature is named twice in {short(features)}")
  return tuple(name for name in FEATURES if name in features)
