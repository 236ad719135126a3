"""`PipelineConfig`: the whole pipeline in one frozen, validated object.

A YAML config maps one to one onto it (`jaxdata.config.load_config`); every
key, its type, default and allowed values are in docs/configuration.md.

>>> cfg = PipelineConfig.from_dict({
...     "datasets": [{"name": "web", "path": "data/web"}, {"name": "code", "path": "data/code",
...                  "exhausted_policy": "repeat", "max_repeats": 2}],
...     "mixture": {"weights": {"web": 3, "code": 1}}, "stop_after_passes": 1,
...     "packing": {"seq_len": 1024}, "batch": {"global_batch_size": 4}})
>>> [(s.name, s.policy, s.max_passes, s.target_passes) for s in cfg.dataset_settings()]
[('web', 'passes', None, 1), ('code', 'repeat', 3, None)]
>>> cfg.tokens_per_step
4096
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Callable, Mapping
from typing import Any

from jaxdata.config.image_packing import image_features
from jaxdata.config.layout import FEATURES, StepLayout, pair_features
from jaxdata.config.packing_config import PackingConfig
from jaxdata.config.resolve import DatasetDefaults, DatasetSettings, resolve_dataset
from jaxdata.config.schedule import Schedule
from jaxdata.config.schema import (
  EXHAUSTED_POLICIES,
  INHERIT,
  BatchConfig,
  BlockSize,
  DatasetConfig,
  MixtureConfig,
  Phase,
)
from jaxdata.config.validate import (
  check_block_size,
  check_bool,
  check_choice,
  check_int,
  mapping,
  no_unknown_keys,
  short,
)
from jaxdata.errors import ConfigError
from jaxdata.vision.policies import FixedSize, NativeResolution

__all__ = ["PipelineConfig"]

# 2^30 tokens per step: 4 GiB per int32 feature on one host; a larger step is
# a typo (10^6 rows x 10^6 tokens), and would hang the first next().
MAX_TOKENS_PER_STEP = 1 << 30


def _plain(value: Any) -> Any:
  """Dataclasses to dicts (INHERIT fields left out), tuples to lists; an image policy as `image_policy` reads it."""
  if isinstance(value, (FixedSize, NativeResolution)):
    return {"policy": value.name, **dataclasses.asdict(value)}
  if dataclasses.is_dataclass(value) and not isinstance(value, type):
    return {
      f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value) if getattr(value, f.name) is not INHERIT
    }
  if isinstance(value, (list, tuple)):
    return [_plain(v) for v in value]
  if isinstance(value, Mapping):
    return {k: _plain(v) for k, v in value.items()}
  return value


def _field_names(kind: type) -> set[str]:
  return {f.name for f in dataclasses.fields(kind)}


def _build(kind: type, raw: Any, where: str, **overrides: Any) -> Any:
  """`kind(**raw)` after checking `raw` is a mapping with only `kind`'s keys,
  all of them strings, and every required key."""
  body = mapping(raw, where)
  no_unknown_keys(body, _field_names(kind), where)
  for field in dataclasses.fields(kind):
    required = field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING
    if required and field.name not in body and field.name not in overrides:
      raise ConfigError(f"{where}: missing {field.name!r}")
  return kind(**{**body, **overrides})


REMOTE_SCHEMES = ("gs://", "s3://")  # dataset paths in object storage (docs/remote.md): never made relative


@dataclasses.dataclass(frozen=True)
class PipelineConfig:
  """The whole pipeline: datasets, mixture, shuffles, pass policy, packing, batch."""

  datasets: tuple[DatasetConfig, ...]
  mixture: MixtureConfig
  seed: int = 0
  shuffle_shards: bool = True
  shuffle_within_shard: bool = False
  # The default mixes every dataset of any size on every pass (a one-shard set too); null (shards only,
  # stored order inside them) is asked for by name.
  shuffle_block_size: BlockSize = "global"
  reshuffle_on_repeat: bool | Mapping[str, bool] = True
  exhausted_policy: str | Mapping[str, str] | None = None
  max_repeats: int | Mapping[str, int] | None = None
  stop_after_passes: int | None = None
  open_shards: int = 1  # shards read side by side per dataset (streaming order)
  cache_dir: str | None = None  # remote shards' local cache (None: $JAXDATA_CACHE_DIR or ~/.cache/jaxdata)
  cache_bytes: int = 32 << 30  # remote shards cached by each reading process, all remote datasets together
  packing: PackingConfig = PackingConfig()
  batch: BatchConfig = BatchConfig()
  stats_path: str | None = None  # Pipeline appends one JSON line of stats per step here
  total_steps: int | None = None  # the run's length: lets step boundaries be fractions of it
  allow_mixed_tokenizers: bool = False  # datasets with different tokenizers may be mixed
  inputs_max_bytes: int = 64 << 30  # raw inputs (datasets[].inputs) larger than this are not converted in place
  inputs_cache: str | None = None  # where raw inputs' caches are kept: a directory or gs:// / s3:// (None: cache_dir)
  inputs_hash: str = "sampled"  # what of each raw input its cache's key reads: 16 blocks, or every byte ("full")

  def __post_init__(self) -> None:
    object.__setattr__(self, "datasets", tuple(self.datasets))
    if self.stats_path is not None and not isinstance(self.stats_path, str):
      raise ConfigError(f"stats_path: expected a file path, got {short(self.stats_path)}")
    if not self.datasets:
      raise ConfigError("datasets: the config needs at least one dataset")
    names = [d.name for d in self.datasets]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
      raise ConfigError(f"datasets: name {short(duplicates[0])} is used more than once")
    check_int(self.seed, "seed", 0)
    check_bool(self.shuffle_shards, "shuffle_shards")
    check_bool(self.shuffle_within_shard, "shuffle_within_shard")
    check_bool(self.allow_mixed_tokenizers, "allow_mixed_tokenizers")
    check_block_size(self.shuffle_block_size, "shuffle_block_size")
    self._check_per_dataset("reshuffle_on_repeat", check_bool)
    self._check_per_dataset("exhausted_policy", lambda v, w: check_choice(v, EXHAUSTED_POLICIES, w), allow_none=True)
    self._check_per_dataset("max_repeats", lambda v, w: check_int(v, w, 0), allow_none=True)
    if self.stop_after_passes is not None:
      check_int(self.stop_after_passes, "stop_after_passes", 1)
    check_int(self.open_shards, "open_shards", 1)
    check_int(self.cache_bytes, "cache_bytes", 1)
    check_int(self.inputs_max_bytes, "inputs_max_bytes", 0)
    check_choice(self.inputs_hash, ("sampled", "full"), "inputs_hash")
    if self.total_steps is not None:
      check_int(self.total_steps, "total_steps", 1)
    self._resolve_fractions()
    for key in ("cache_dir", "inputs_cache"):
      value = getattr(self, key)
      if value is not None and (not isinstance(value, str) or not value):
        raise ConfigError(f"{key}: expected a directory path, got {short(value)}")
    if self.cache_dir is not None and self.cache_dir.startswith(REMOTE_SCHEMES):
      raise ConfigError(
        f"cache_dir: {self.cache_dir} is a bucket; cache_dir is a local directory (remote shards are copied there): "
        "keep raw inputs' caches in a bucket with inputs_cache"
      )
    self._check_across_sections()

  def _check_across_sections(self) -> None:
    """What one section allows only with another: a step's size, windows beside pairs or BOS / EOS, a
    dataset that must finish its passes but is never drawn."""
    if self.tokens_per_step > MAX_TOKENS_PER_STEP:
      raise ConfigError(
        f"batch.global_batch_size: {self.batch.global_batch_size} rows x packing.seq_len "
        f"{self.packing.seq_len} = {self.tokens_per_step:,} tokens per step, more than the "
        f"{MAX_TOKENS_PER_STEP:,} a step may hold"
      )
    windows = [d.name for d in self.datasets if d.sampling == "windows"]
    if windows and self.packing.pairs is not None:
      raise ConfigError(f"datasets.{windows[0]}: sampling: windows cuts documents; packing.pairs packs pairs whole")
    if self.packing.pairs is not None and self.batch.features != FEATURES:
      raise ConfigError(
        f"batch.features: with packing.pairs a step holds {', '.join(self.layout.kept)}; leave batch.features out"
      )
    if windows and (self.packing.add_bos or self.packing.add_eos):
      raise ConfigError(
        f"datasets.{windows[0]}: sampling: windows takes token windows as they lie in the file (their EOS "
        "separators included); packing.add_bos / add_eos cannot apply to them: turn them off"
      )
    schedule = self.schedule
    for setting, positive in zip(self.dataset_settings(), schedule.ever_positive()):
      if setting.policy == "passes" and not positive:
        raise ConfigError(
          f"datasets.{setting.name}: weight 0 in every phase under stop_after_passes; "
          "it would never complete a pass and the stream would never end"
        )

  @property
  def raw_inputs(self) -> bool:
    """Whether a dataset names raw inputs, to be converted (cached) before the pipeline opens it."""
    return any(d.inputs for d in self.datasets)

  @property
  def layout(self) -> StepLayout:
    """What every step holds (`StepLayout`): `FEATURES` (those `batch.features` keeps handed out), or with
    packing.pairs its layout's (`pair_features`, reference log-probabilities as float32), with
    packing.images the image features after them (`image_features`); then `batch.extra_features`."""
    pairs, images = self.packing.pairs, self.packing.images
    if pairs is not None:
      names = pair_features(pairs.layout, pairs.reference is not None)
      base = StepLayout.of_features(names, floats=[n for n in names if n.endswith("ref_logp")])
    elif images is not None:
      base = StepLayout.of_features(FEATURES, kept=self.batch.features)
      base = StepLayout((*base.features, *image_features(images)))
    else:
      base = StepLayout.of_features(FEATURES, kept=self.batch.features)
    return StepLayout((*base.features, *self.batch.extra_features))

  def _resolve_fractions(self) -> None:
    """Step boundaries given as fractions of total_steps (floats in (0, 1]) become steps."""

    def steps(value: Any, where: str) -> Any:
      if not isinstance(value, float):
        return value
      if self.total_steps is None:
        raise ConfigError(f"{where}: {value} is a fraction of total_steps, but total_steps is not set")
      if not 0 < value <= 1:
        raise ConfigError(f"{where}: a fraction of total_steps must lie in (0, 1], got {value}")
      return max(1, int(value * self.total_steps))

    ramp = self.batch.ramp
    if ramp is not None and isinstance(ramp.steps, float):
      object.__setattr__(
        self,
        "batch",
        dataclasses.replace(self.batch, ramp=dataclasses.replace(ramp, steps=steps(ramp.steps, "batch.ramp.steps"))),
      )
    if any(isinstance(p.until_step, float) for p in self.batch.schedule):
      batch_phases = tuple(
        dataclasses.replace(p, until_step=steps(p.until_step, f"batch.schedule[{i}].until_step"))
        for i, p in enumerate(self.batch.schedule)
      )
      object.__setattr__(self, "batch", dataclasses.replace(self.batch, schedule=batch_phases))
    linear = self.packing.linear_warmup
    if linear is not None and isinstance(linear.steps, float):
      packing = dataclasses.replace(
        self.packing,
        linear_warmup=dataclasses.replace(linear, steps=steps(linear.steps, "packing.linear_warmup.steps")),
      )
      object.__setattr__(self, "packing", packing)
    if self.mixture.schedule:
      phases = tuple(
        dataclasses.replace(p, until_step=steps(p.until_step, f"mixture.schedule[{i}].until_step"))
        for i, p in enumerate(self.mixture.schedule)
      )
      object.__setattr__(self, "mixture", dataclasses.replace(self.mixture, schedule=phases))

  def _check_per_dataset(self, field: str, check: Callable[[Any, str], None], allow_none: bool = False) -> None:
    value = getattr(self, field)
    if isinstance(value, Mapping):
      names = set(self.names)
      for key, item in value.items():
        if key not in names:
          raise ConfigError(f"{field}: {short(key)} is not a dataset of this config")
        if item is not None or not allow_none:  # null: that dataset takes no value (no limit)
          check(item, f"{field}.{key}")
    elif value is not None or not allow_none:
      check(value, field)

  # ------------------------------------------------------- derived quantities

  @property
  def names(self) -> tuple[str, ...]:
    return tuple(d.name for d in self.datasets)

  @property
  def tokens_per_step(self) -> int:
    """Row slots of the largest global batch: its size x seq_len (a staircase warmup phase
    has more, shorter rows; a batch schedule smaller batches before it)."""
    largest = max([self.batch.global_batch_size, *(p.global_batch_size for p in self.batch.schedule)])
    return largest * self.packing.seq_len

  def rows_at(self, step: int) -> int:
    """Rows of the global batch at `step`: the batch schedule's size, times seq_len / the step's
    length during a staircase warmup (constant tokens); the linear warmup keeps the rows."""
    size = self.batch.size_at(step)
    linear = self.packing.linear_warmup
    if linear is not None and linear.keep == "rows":
      return size
    rows = size * self.packing.seq_len // self.packing.seq_len_at(step)
    return rows if linear is None else max(linear.row_multiple, rows // linear.row_multiple * linear.row_multiple)

  def row_shapes(self) -> tuple[tuple[int, int], ...]:
    """Every (rows, seq_len) a step of the run has."""
    until = max(
      self.batch.changes_until,
      max((p.until_step for p in self.packing.warmup), default=0),
      int(self.packing.linear_warmup.steps) if self.packing.linear_warmup is not None else 0,
    )
    return tuple(sorted({(self.rows_at(s), self.packing.seq_len_at(s)) for s in range(until + 1)}))

  @functools.cached_property
  def schedule(self) -> Schedule:
    """The mixture's schedule (every step's config weights), built once: validating the config builds it."""
    phases = [(p.weights, p.until_step, p.ramp_steps) for p in self.mixture.phases()]
    return Schedule.from_phases(self.names, phases)

  def dataset_settings(self) -> tuple[DatasetSettings, ...]:
    """Every dataset's settings after inheritance and policy resolution."""
    top = DatasetDefaults(
      self.shuffle_shards,
      self.shuffle_within_shard,
      self.shuffle_block_size,
      self.reshuffle_on_repeat,
      self.exhausted_policy,
      self.max_repeats,
      self.stop_after_passes,
      self.open_shards,
    )
    return tuple(resolve_dataset(d, top, self.packing.seq_len) for d in self.datasets)

  @property
  def window_datasets(self) -> tuple[bool, ...]:
    """Per dataset (config order): whether it samples T + 1-token windows."""
    return tuple(d.sampling == "windows" for d in self.datasets)

  # ------------------------------------------------------------------ parsing

  def to_dict(self) -> dict[str, Any]:
    """The config as plain JSON-able data that `from_dict` reads back to an
    equal config (unset per-dataset fields stay unset, so they still inherit).

    >>> cfg = PipelineConfig.from_dict({"datasets": [{"name": "a"}], "mixture": {"weights": {"a": 1}}})
    >>> PipelineConfig.from_dict(cfg.to_dict()) == cfg
    True
    """
    return _plain(self)

  @classmethod
  def from_dict(cls, raw: Any, base_dir: str | None = None) -> PipelineConfig:
    """Builds from parsed YAML / JSON; unknown keys are errors naming the key.

    Relative dataset paths, `stats_path` and `cache_dir` are taken relative to `base_dir`
    when given.
    """
    top = mapping(raw, "config")
    no_unknown_keys(top, _field_names(cls), "config")
    for required in ("datasets", "mixture"):
      if required not in top:
        raise ConfigError(f"config: missing {short(required)}")
    entries = top["datasets"]
    if not isinstance(entries, list):
      raise ConfigError(f"datasets: expected a list of datasets, got {short(entries)}")

    def relative(path: Any) -> Any:
      if base_dir is None or not isinstance(path, str) or path.startswith(REMOTE_SCHEMES):
        return path
      return os.path.join(base_dir, os.path.expanduser(path))

    datasets = []
    for i, entry in enumerate(entries):
      entry = mapping(entry, f"datasets[{i}]")
      overrides: dict[str, Any] = {"path": relative(entry["path"])} if "path" in entry else {}
      if isinstance(entry.get("inputs"), (str, list)):
        globs = [entry["inputs"]] if isinstance(entry["inputs"], str) else entry["inputs"]
        overrides["inputs"] = tuple(relative(g) for g in globs)
      if isinstance(entry.get("tokenizer"), str):
        overrides["tokenizer"] = _relative_tokenizer(entry["tokenizer"], relative)
      if isinstance(entry.get("convert"), dict) and isinstance(entry["convert"].get("chat_template"), str):
        overrides["convert"] = {**entry["convert"], "chat_template": relative(entry["convert"]["chat_template"])}
      datasets.append(_build(DatasetConfig, entry, f"datasets[{i}]", **overrides))
    mixture = mapping(top["mixture"], "mixture")
    overrides = {}
    if mixture.get("schedule") is not None:
      phases = mixture["schedule"]
      if not isinstance(phases, list):
        raise ConfigError(f"mixture.schedule: expected a list of phases, got {short(phases)}")
      for i, phase in enumerate(phases):
        if "weights" not in mapping(phase, f"mixture.schedule[{i}]"):
          raise ConfigError(f"mixture.schedule[{i}]: missing 'weights'")
      overrides["schedule"] = tuple(_build(Phase, p, f"mixture.schedule[{i}]") for i, p in enumerate(phases))
    kwargs = {k: v for k, v in top.items() if k not in ("datasets", "mixture", "packing", "batch")}
    for key in ("stats_path", "cache_dir", "inputs_cache"):
      if key in kwargs:
        kwargs[key] = relative(kwargs[key])
    for section, kind in (("packing", PackingConfig), ("batch", BatchConfig)):
      if section in top:
        kwargs[section] = _build(kind, top[section], section)
    return cls(datasets=tuple(datasets), mixture=_build(MixtureConfig, mixture, "mixture", **overrides), **kwargs)


def _relative_tokenizer(spec: str, relative: Callable[[Any], Any]) -> str:
  """A tokenizer spec's file or directory taken relative to the config's directory, in every form
  `jaxdata convert --tokenizer` reads (hf: / huggingface: / sp: / sentencepiece:, a bare .json or .model
  file); byte names none."""
  kind, sep, where = spec.partition(":")
  if sep and kind in ("hf", "huggingface", "sp", "sentencepiece"):
    return f"{kind}:{relative(where)}"
  if spec.endswith((".json", ".model")):
    return str(relative(spec))
  return spec
