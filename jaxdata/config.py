"""Pipeline configuration: frozen, validating dataclasses and `load_config`.

The YAML (DESIGN §11) maps one to one onto these classes. Top-level shuffle
and pass settings are defaults for every dataset; a dataset entry (or a
top-level ``{dataset: value}`` dict, for ``exhausted_policy``, ``max_repeats``
and ``reshuffle_on_repeat``) overrides them for that dataset.

Pass policy of a dataset, from the most specific level that sets it
(dataset entry > top-level dict entry > top-level value):

    stop_after_passes: n           repeat to hold the mixture; the stream ends once every
                                   such dataset has completed n passes (default: n = 1)
    exhausted_policy: stop         the stream ends when it cannot supply its next document
    exhausted_policy: repeat       restart on its own, forever
      + max_repeats: N             ... at most N times; the stream ends when it would exceed N

``stop_after_passes`` together with ``stop`` or ``max_repeats`` at the same
level is a `ValueError`, as is a stop_after_passes dataset whose weight is 0
in every phase (it could never complete a pass).

>>> cfg = PipelineConfig.from_dict({
...     "datasets": [{"name": "web", "path": "data/web"}, {"name": "code", "path": "data/code",
...                  "exhausted_policy": "repeat", "max_repeats": 2}],
...     "mixture": {"weights": {"web": 3, "code": 1}}, "stop_after_passes": 1})
>>> [(s.name, s.policy, s.max_passes, s.target_passes) for s in cfg.dataset_settings()]
[('web', 'passes', None, 1), ('code', 'repeat', 3, None)]
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Mapping

import yaml

from jaxdata.errors import ConfigError
from jaxdata.schedule import Schedule

__all__ = [
    "BatchConfig",
    "DatasetConfig",
    "DatasetSettings",
    "MixtureConfig",
    "PackingConfig",
    "Phase",
    "WarmupPhase",
    "PipelineConfig",
    "load_config",
]

UNITS = ("tokens", "documents")
INTERLEAVES = ("exact", "random")
EXHAUSTED_POLICIES = ("stop", "repeat")
PACKING_MODES = ("concat", "first_fit", "best_fit", "none")
LONG_DOCS = ("split", "truncate")


class _Inherit:
  """Marks a per-dataset setting that takes the top-level value."""

  def __repr__(self) -> str:
    return "INHERIT"


INHERIT: Any = _Inherit()


def _check_int(value: Any, where: str, minimum: int) -> None:
  if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
    raise ConfigError(f"{where}: expected an int >= {minimum}, got {value!r}")


def _check_bool(value: Any, where: str) -> None:
  if not isinstance(value, bool):
    raise ConfigError(f"{where}: expected true or false, got {value!r}")


def _check_choice(value: Any, choices: tuple[str, ...], where: str) -> None:
  if value not in choices:
    raise ConfigError(f"{where}: {value!r} is not one of {', '.join(choices)}")


def _check_block_size(value: Any, where: str) -> None:
  if value is None or value in ("auto", "global"):
    return
  if isinstance(value, bool) or not isinstance(value, int) or value < 1:
    raise ConfigError(f"{where}: expected null, a positive int, 'auto' or 'global', got {value!r}")


@dataclasses.dataclass(frozen=True)
class DatasetConfig:
  """One dataset of the mixture; unset fields inherit the top-level value."""

  name: str
  path: str = ""
  shuffle_shards: bool | None = None
  shuffle_within_shard: bool | None = None
  shuffle_block_size: int | str | None = INHERIT
  reshuffle_on_repeat: bool | None = None
  exhausted_policy: str | None = None
  max_repeats: int | None = None
  stop_after_passes: int | None = None

  def __post_init__(self) -> None:
    where = f"datasets.{self.name}" if isinstance(self.name, str) else "datasets[].name"
    if not isinstance(self.name, str) or not self.name:
      raise ConfigError(f"{where}: every dataset needs a non-empty name, got {self.name!r}")
    if not isinstance(self.path, str):
      raise ConfigError(f"{where}.path: expected a string, got {self.path!r}")
    for field in ("shuffle_shards", "shuffle_within_shard", "reshuffle_on_repeat"):
      if getattr(self, field) is not None:
        _check_bool(getattr(self, field), f"{where}.{field}")
    if self.shuffle_block_size is not INHERIT:
      _check_block_size(self.shuffle_block_size, f"{where}.shuffle_block_size")
    if self.exhausted_policy is not None:
      _check_choice(self.exhausted_policy, EXHAUSTED_POLICIES, f"{where}.exhausted_policy")
    if self.max_repeats is not None:
      _check_int(self.max_repeats, f"{where}.max_repeats", 0)
    if self.stop_after_passes is not None:
      _check_int(self.stop_after_passes, f"{where}.stop_after_passes", 1)


@dataclasses.dataclass(frozen=True)
class Phase:
  """One phase of a schedule: weights until `until_step` (the last has None).

  `ramp_steps` > 0 moves linearly from the previous phase's weights to these
  over the phase's first `ramp_steps` steps.
  """

  weights: Mapping[str, float]
  until_step: int | None = None
  ramp_steps: int = 0


@dataclasses.dataclass(frozen=True)
class MixtureConfig:
  """How datasets are mixed: fixed `weights` or a `schedule` of phases."""

  weights: Mapping[str, float] | None = None
  schedule: tuple[Phase, ...] | None = None
  unit: str = "tokens"
  interleave: str = "exact"

  def __post_init__(self) -> None:
    if (self.weights is None) == (self.schedule is None):
      raise ConfigError("mixture: give exactly one of weights or schedule")
    if self.schedule is not None and not self.schedule:
      raise ConfigError("mixture.schedule: needs at least one phase")
    _check_choice(self.unit, UNITS, "mixture.unit")
    _check_choice(self.interleave, INTERLEAVES, "mixture.interleave")

  def phases(self) -> tuple[Phase, ...]:
    return self.schedule if self.schedule is not None else (Phase(self.weights or {}),)


@dataclasses.dataclass(frozen=True)
class WarmupPhase:
  """Sequence-length warmup: rows of `seq_len` until `until_step`."""

  until_step: int
  seq_len: int


@dataclasses.dataclass(frozen=True)
class PackingConfig:
  """Packing of documents into rows (DESIGN §7).

  `warmup` lists shorter sequence lengths for the first steps; the global
  batch then has global_batch_size x seq_len / warmup seq_len rows, so the
  tokens per step stay constant.
  """

  mode: str = "first_fit"
  seq_len: int = 2048
  long_docs: str = "split"
  add_bos: bool = False
  bos_id: int = 1
  add_eos: bool = False
  eos_id: int = 0
  pad_id: int = 0
  warmup: tuple[WarmupPhase, ...] = ()

  def __post_init__(self) -> None:
    _check_choice(self.mode, PACKING_MODES, "packing.mode")
    _check_int(self.seq_len, "packing.seq_len", 2)
    _check_choice(self.long_docs, LONG_DOCS, "packing.long_docs")
    for field in ("add_bos", "add_eos"):
      _check_bool(getattr(self, field), f"packing.{field}")
    for field in ("bos_id", "eos_id", "pad_id"):
      _check_int(getattr(self, field), f"packing.{field}", 0)
    phases = tuple(
        p if isinstance(p, WarmupPhase) else WarmupPhase(**_mapping(p, "packing.warmup[]"))
        for p in self.warmup
    )
    object.__setattr__(self, "warmup", phases)
    previous = 0
    for i, phase in enumerate(phases):
      where = f"packing.warmup[{i}]"
      _check_int(phase.until_step, f"{where}.until_step", previous + 1)
      _check_int(phase.seq_len, f"{where}.seq_len", 2)
      if self.seq_len % phase.seq_len:
        raise ConfigError(f"{where}.seq_len: {phase.seq_len} must divide packing.seq_len {self.seq_len}")
      previous = phase.until_step

  def seq_len_at(self, step: int) -> int:
    for phase in self.warmup:
      if step < phase.until_step:
        return phase.seq_len
    return self.seq_len


@dataclasses.dataclass(frozen=True)
class BatchConfig:
  """Global batch shape and what happens to the final partial batch."""

  global_batch_size: int = 8
  drop_remainder: bool = True

  def __post_init__(self) -> None:
    _check_int(self.global_batch_size, "batch.global_batch_size", 1)
    _check_bool(self.drop_remainder, "batch.drop_remainder")


@dataclasses.dataclass(frozen=True)
class DatasetSettings:
  """A dataset's resolved settings: nothing inherited, policy decided.

  Attributes:
    policy: "passes" (stop_after_passes), "stop" or "repeat".
    max_passes: the most passes it may start (stop: 1; repeat with
      max_repeats N: N + 1); None for unlimited.
    target_passes: for "passes", the passes it must complete before the
      stream may end; None otherwise.
    block_size: None, an int, "auto" (resolved once counts are known) or "global".
  """

  name: str
  path: str
  shuffle_shards: bool
  shuffle_within_shard: bool
  block_size: int | str | None
  reshuffle_on_repeat: bool
  policy: str
  max_passes: int | None
  target_passes: int | None


def _per_dataset(value: Any, name: str) -> Any:
  return value.get(name) if isinstance(value, Mapping) else None


def _scalar(value: Any) -> Any:
  return None if isinstance(value, Mapping) else value


@dataclasses.dataclass(frozen=True)
class PipelineConfig:
  """The whole pipeline: datasets, mixture, shuffles, pass policy, packing, batch."""

  datasets: tuple[DatasetConfig, ...]
  mixture: MixtureConfig
  seed: int = 0
  shuffle_shards: bool = True
  shuffle_within_shard: bool = False
  shuffle_block_size: int | str | None = None
  reshuffle_on_repeat: bool | Mapping[str, bool] = True
  exhausted_policy: str | Mapping[str, str] | None = None
  max_repeats: int | Mapping[str, int] | None = None
  stop_after_passes: int | None = None
  packing: PackingConfig = PackingConfig()
  batch: BatchConfig = BatchConfig()
  stats_path: str | None = None  # Pipeline appends one JSON line of stats per step here

  def __post_init__(self) -> None:
    object.__setattr__(self, "datasets", tuple(self.datasets))
    if self.stats_path is not None and not isinstance(self.stats_path, str):
      raise ConfigError(f"stats_path: expected a file path, got {self.stats_path!r}")
    if not self.datasets:
      raise ConfigError("datasets: the config needs at least one dataset")
    names = [d.name for d in self.datasets]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
      raise ConfigError(f"datasets: name {duplicates[0]!r} is used more than once")
    _check_int(self.seed, "seed", 0)
    _check_bool(self.shuffle_shards, "shuffle_shards")
    _check_bool(self.shuffle_within_shard, "shuffle_within_shard")
    _check_block_size(self.shuffle_block_size, "shuffle_block_size")
    self._check_per_dataset("reshuffle_on_repeat", lambda v, w: _check_bool(v, w))
    self._check_per_dataset(
        "exhausted_policy", lambda v, w: _check_choice(v, EXHAUSTED_POLICIES, w), allow_none=True
    )
    self._check_per_dataset("max_repeats", lambda v, w: _check_int(v, w, 0), allow_none=True)
    if self.stop_after_passes is not None:
      _check_int(self.stop_after_passes, "stop_after_passes", 1)
    try:
      schedule = self.schedule()
    except ValueError as e:
      raise ConfigError(str(e)) from e
    settings = self.dataset_settings()
    for setting, positive in zip(settings, schedule.ever_positive()):
      if setting.policy == "passes" and not positive:
        raise ConfigError(
            f"datasets.{setting.name}: weight 0 in every phase under stop_after_passes; "
            "it would never complete a pass and the stream would never end"
        )

  def _check_per_dataset(self, field: str, check: Any, allow_none: bool = False) -> None:
    value = getattr(self, field)
    if isinstance(value, Mapping):
      names = {d.name for d in self.datasets}
      for key, item in value.items():
        if key not in names:
          raise ConfigError(f"{field}: {key!r} is not a dataset of this config")
        check(item, f"{field}.{key}")
    elif value is not None or not allow_none:
      check(value, field)

  @property
  def names(self) -> tuple[str, ...]:
    return tuple(d.name for d in self.datasets)

  def schedule(self) -> Schedule:
    phases = [(p.weights, p.until_step, p.ramp_steps) for p in self.mixture.phases()]
    return Schedule.from_phases(self.names, phases)

  def dataset_settings(self) -> tuple[DatasetSettings, ...]:
    """Every dataset's settings after inheritance and policy resolution."""
    return tuple(self._resolve(d) for d in self.datasets)

  def _resolve(self, d: DatasetConfig) -> DatasetSettings:
    where = f"datasets.{d.name}"
    # (scope, exhausted_policy, max_repeats, stop_after_passes), most specific first.
    levels = [
        (where, d.exhausted_policy, d.max_repeats, d.stop_after_passes),
        (f"top-level entries for {d.name}", _per_dataset(self.exhausted_policy, d.name),
         _per_dataset(self.max_repeats, d.name), None),
        ("top level", _scalar(self.exhausted_policy), _scalar(self.max_repeats),
         self.stop_after_passes),
    ]
    kind, max_passes, target = "passes", None, 1  # nothing set: one pass of everything
    for scope, policy, max_repeats, passes in levels:
      if policy == "stop" and max_repeats is not None:
        raise ConfigError(f"{scope}: max_repeats has no meaning with exhausted_policy 'stop'")
      if passes is not None and (policy == "stop" or max_repeats is not None):
        other = "exhausted_policy 'stop'" if policy == "stop" else "max_repeats"
        raise ConfigError(f"{scope}: stop_after_passes cannot be combined with {other}")
    for i, (_, policy, max_repeats, passes) in enumerate(levels):
      if passes is not None:
        kind, max_passes, target = "passes", None, passes
      elif policy == "stop":
        kind, max_passes, target = "stop", 1, None
      elif policy == "repeat" or max_repeats is not None:
        # A bare "repeat" takes max_repeats from a less specific level, if any.
        inherited = next((m for _, _, m, _ in levels[i:] if m is not None), None)
        kind, target = "repeat", None
        max_passes = None if inherited is None else inherited + 1
      else:
        continue
      break
    block = self.shuffle_block_size if d.shuffle_block_size is INHERIT else d.shuffle_block_size
    reshuffle = d.reshuffle_on_repeat
    if reshuffle is None:
      reshuffle = _per_dataset(self.reshuffle_on_repeat, d.name)
    if reshuffle is None:
      reshuffle = _scalar(self.reshuffle_on_repeat)
    return DatasetSettings(
        name=d.name,
        path=d.path,
        shuffle_shards=self.shuffle_shards if d.shuffle_shards is None else d.shuffle_shards,
        shuffle_within_shard=(
            self.shuffle_within_shard if d.shuffle_within_shard is None else d.shuffle_within_shard
        ),
        block_size=block,
        reshuffle_on_repeat=True if reshuffle is None else reshuffle,
        policy=kind,
        max_passes=max_passes,
        target_passes=target,
    )

  @classmethod
  def from_dict(cls, raw: Any, base_dir: str | None = None) -> "PipelineConfig":
    """Builds from parsed YAML / JSON; unknown keys are errors naming the key.

    Relative dataset paths are taken relative to `base_dir` when given.
    """
    top = _mapping(raw, "config")
    _no_unknown_keys(top, {f.name for f in dataclasses.fields(cls)}, "config")
    if "datasets" not in top:
      raise ConfigError("config: missing 'datasets'")
    if "mixture" not in top:
      raise ConfigError("config: missing 'mixture'")
    entries = top["datasets"]
    if not isinstance(entries, list):
      raise ConfigError(f"datasets: expected a list of datasets, got {entries!r}")
    dataset_fields = {f.name for f in dataclasses.fields(DatasetConfig)}
    datasets = []
    for i, entry in enumerate(entries):
      entry = _mapping(entry, f"datasets[{i}]")
      _no_unknown_keys(entry, dataset_fields, f"datasets[{i}]")
      entry = dict(entry)
      if base_dir is not None and isinstance(entry.get("path"), str):
        entry["path"] = os.path.join(base_dir, os.path.expanduser(entry["path"]))
      datasets.append(DatasetConfig(**entry))
    mixture = _mapping(top["mixture"], "mixture")
    _no_unknown_keys(mixture, {f.name for f in dataclasses.fields(MixtureConfig)}, "mixture")
    mixture = dict(mixture)
    if mixture.get("schedule") is not None:
      phases = mixture["schedule"]
      if not isinstance(phases, list):
        raise ConfigError(f"mixture.schedule: expected a list of phases, got {phases!r}")
      built = []
      for i, phase in enumerate(phases):
        phase = _mapping(phase, f"mixture.schedule[{i}]")
        _no_unknown_keys(phase, {f.name for f in dataclasses.fields(Phase)}, f"mixture.schedule[{i}]")
        if "weights" not in phase:
          raise ConfigError(f"mixture.schedule[{i}]: missing 'weights'")
        built.append(Phase(**phase))
      mixture["schedule"] = tuple(built)
    kwargs = {k: v for k, v in top.items() if k not in ("datasets", "mixture", "packing", "batch")}
    if base_dir is not None and isinstance(kwargs.get("stats_path"), str):
      kwargs["stats_path"] = os.path.join(base_dir, os.path.expanduser(kwargs["stats_path"]))
    for section, kind in (("packing", PackingConfig), ("batch", BatchConfig)):
      if section in top:
        body = _mapping(top[section], section)
        _no_unknown_keys(body, {f.name for f in dataclasses.fields(kind)}, section)
        try:
          kwargs[section] = kind(**body)
        except TypeError as e:
          raise ConfigError(f"{section}: {e}") from e
    return cls(datasets=tuple(datasets), mixture=MixtureConfig(**mixture), **kwargs)


def _mapping(value: Any, where: str) -> Mapping[str, Any]:
  if not isinstance(value, Mapping):
    raise ConfigError(f"{where}: expected a mapping, got {value!r}")
  return value


def _no_unknown_keys(raw: Mapping[str, Any], allowed: set[str], where: str) -> None:
  unknown = sorted(set(raw) - allowed)
  if unknown:
    raise ConfigError(
        f"{where}: unknown key {unknown[0]!r} (allowed: {', '.join(sorted(allowed))})"
    )


def load_config(path: str) -> PipelineConfig:
  """Reads a YAML config with a safe loader and validates it.

  Dataset paths are relative to the config file's directory. Errors name the
  file and the offending key or value.
  """
  try:
    with open(path) as f:
      raw = yaml.safe_load(f)
  except yaml.YAMLError as e:
    raise ConfigError(f"{path}: not valid YAML ({e})") from e
  try:
    return PipelineConfig.from_dict(raw, base_dir=os.path.dirname(os.path.abspath(path)))
  except ConfigError as e:
    raise ConfigError(f"{path}: {e}") from e
