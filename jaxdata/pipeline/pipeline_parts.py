"""`open_parts`: what a pipeline plans and reads with, opened from a config.

Used by `Pipeline` and by its worker processes, which open the same files
from the same `PipelineSpec` and must arrive at the same fingerprint::

    spec: config, split, epoch -> datasets (checked; any format, windows where sampled) -> token bound, StepPlanner, DocumentReader, order fingerprint
"""

from __future__ import annotations

import contextvars
import dataclasses
from typing import Any

import numpy as np

from jaxdata.checkpoint.fingerprint import OrderFingerprint, order_fingerprint
from jaxdata.checkpoint.state import PipelineState
from jaxdata.config.pipeline_config import PipelineConfig
from jaxdata.errors import ConfigError
from jaxdata.mixture.holdout import eval_config
from jaxdata.mixture.metadata import DatasetMeta, open_split, with_image_budgets
from jaxdata.pipeline.execution import StepMaking
from jaxdata.pipeline.planner import StepPlanner
from jaxdata.pipeline.reader import DocumentReader, ReadLog
from jaxdata.pipeline.spec import PipelineSpec
from jaxdata.pipeline.stats import StatsRecorder
from jaxdata.pipeline.vocabulary import token_bound, with_special_ids
from jaxdata.pipeline.wait_warning import LOGGER
from jaxdata.sources.columns import REFERENCE_COLUMNS, REFERENCE_STATS, check_reference_values
from jaxdata.sources.dataset import ReadOptions
from jaxdata.sources.image_records import IMAGE_COLUMNS
from jaxdata.sources.opening import SplitDataset, record_columns
from jaxdata.sources.sampling_windows import WindowView
from jaxdata.sources.shard_cache import default_cache_options
from jaxdata.transforms.pairs import planning_lengths
from jaxdata.vision.policies import FixedSize, NativeResolution, image_policy

__all__ = [
  "Parts",
  "check_pipeline_arguments",
  "log_stored_orders",
  "open_parts",
  "state_snapshot",
]


@dataclasses.dataclass(frozen=True)
class Parts:
  planner: StepPlanner
  reader: DocumentReader
  fingerprint: OrderFingerprint
  cfg: PipelineConfig  # the config the planner runs (the eval split's for split="eval")
  record_starts: list[np.ndarray]  # per dataset: its shards' first records
  # parallel pairs: per dataset, per record, the slots a pair fills in its two rows (the step's padding counts
  # both rows); None for other layouts, where a piece's length is what it fills
  pair_slots: list[np.ndarray] | None = None


# A list that `open_parts` hands its reader, so that every read made in this process is logged there:
# set by `jaxdata.testing.recorded_reads`, never by a training run.
RECORDED_READS: contextvars.ContextVar[ReadLog | None] = contextvars.ContextVar("jaxdata_recorded_reads", default=None)


def open_parts(spec: PipelineSpec) -> Parts:
  """Opens and checks every dataset of the spec's config as its split sees it; on an error nothing stays open."""
  cfg, split = spec.config, spec.split
  datasets: list[SplitDataset] = []
  cache = default_cache_options(cfg.cache_dir, cfg.cache_bytes)  # one budget for all remote datasets
  try:
    for d in cfg.dataset_settings():
      if split == "eval" and not d.holdout:
        continue
      datasets.append(open_split(d, ReadOptions(num_threads=spec.read_threads), cache, cfg.seed, split))
      _check_packing_kind(d.name, datasets[-1], cfg.packing.pairs is not None, cfg.packing.images is not None)
    if split == "eval":
      cfg = eval_config(
        cfg,
        {
          ds_name: ds.num_records
          for ds_name, ds in zip([d.name for d in cfg.dataset_settings() if d.holdout], datasets)
        },
      )
    cfg = _with_image_policy(with_special_ids(cfg, datasets), datasets)
    bound = token_bound(cfg, datasets)
    planner = StepPlanner(cfg, {d.name: _meta(d.name, ds, cfg) for d, ds in zip(cfg.datasets, datasets)}, spec.epoch)
  except BaseException:  # re-raised: nothing may stay open
    for dataset in datasets:
      dataset.close()
    raise
  fingerprint = order_fingerprint(
    cfg,
    [ds.manifest.fingerprint for ds in datasets],
    [c.order for c in planner.stream.cursors],
    [_sampling(ds, d) for ds, d in zip(datasets, cfg.dataset_settings())],
  )
  return Parts(
    planner,
    DocumentReader(datasets, cfg.names, bound, RECORDED_READS.get(), _columns_read(cfg)),
    fingerprint,
    cfg,
    [np.asarray(ds.record_starts) for ds in datasets],
    _pair_slots(cfg, datasets),
  )


def _with_image_policy(cfg: PipelineConfig, datasets: list[SplitDataset]) -> PipelineConfig:
  """Under packing.images, the config with the image policy its image-text datasets were converted with (they
  must agree, and agree with a policy the config gives); a `ConfigError` names the dataset that differs."""
  images = cfg.packing.images
  if images is None:
    return cfg
  found: dict[str, FixedSize | NativeResolution] = {}
  for settings, dataset in zip(cfg.dataset_settings(), datasets):
    if dataset.manifest.holds_images:
      try:
        found[settings.name] = image_policy(dataset.manifest.stats["images"]["policy"])
      except (KeyError, TypeError, ValueError) as error:
        raise ConfigError(f"dataset {settings.name}: its manifest records no valid image policy ({error})") from error
  wanted = images.policy if images.policy is not None else next(iter(found.values()), None)
  if wanted is None:
    raise ConfigError("packing.images: no dataset holds images, and packing.images.policy is not given")
  for name, policy in found.items():
    if policy != wanted:
      raise ConfigError(
        f"dataset {name}: its images were converted with {policy}, not {wanted} (packing.images.policy, or the "
        "first image-text dataset's): a row's patches must be cut one way"
      )
  return dataclasses.replace(
    cfg, packing=dataclasses.replace(cfg.packing, images=dataclasses.replace(images, policy=wanted))
  )


def _pair_slots(cfg: PipelineConfig, datasets: list[SplitDataset]) -> list[np.ndarray] | None:
  """With `parallel` pairs: per dataset, per record, the tokens its two rows hold (the chosen side, and the
  rejected side less the shared prompt); a pair is planned by its longer side only."""
  pairs = cfg.packing.pairs
  if pairs is None or pairs.layout != "parallel":
    return None
  out = []
  for dataset in datasets:
    records = np.arange(dataset.num_records)
    base, in_base = record_columns(dataset, records)
    chosen, prompt = base.columns["chosen_length"][in_base], base.columns["prompt_length"][in_base]
    record = np.asarray(dataset.lengths[records], np.int64)
    one_row = planning_lengths(record, chosen, prompt, dataclasses.replace(pairs, layout="one_row"))
    out.append(np.asarray(one_row, np.int64))  # both sides, less the prompt laid out once
  return out


def _check_packing_kind(name: str, dataset: SplitDataset, packs_pairs: bool, packs_images: bool) -> None:
  """Pairs are packed with packing.pairs, and only pairs: as documents their two sides would train as one;
  image-text examples with packing.images."""
  if dataset.manifest.holds_pairs and not packs_pairs:
    raise ConfigError(
      f"dataset {name}: holds preference pairs (features {list(dataset.manifest.features)}: chosen and "
      "rejected in one record); packed as documents both sides would train as one: set packing.pairs "
      "(docs/preference.md)"
    )
  if dataset.manifest.holds_images and not packs_images:
    raise ConfigError(
      f"dataset {name}: holds image-text examples (features {list(dataset.manifest.features)}); they are packed "
      "with their images under a row's patch and image budgets: set packing.images (docs/vision.md)"
    )
  if packs_pairs and not dataset.manifest.holds_pairs:
    raise ConfigError(
      f"dataset {name}: holds documents, not preference pairs (features {list(dataset.manifest.features)}); "
      "packing.pairs packs pairs only (convert them with jaxdata convert --format preference)"
    )


def _columns_read(cfg: PipelineConfig) -> tuple[str, ...]:
  """The per-record columns a step carries: a reference model's log-probabilities where asked for; each
  example's images and patches as planned (the read stage checks its images against them)."""
  pairs = cfg.packing.pairs
  if cfg.packing.images is not None:
    return IMAGE_COLUMNS
  return REFERENCE_COLUMNS if pairs is not None and pairs.reference is not None else ()


def _meta(name: str, dataset: SplitDataset, cfg: PipelineConfig) -> DatasetMeta:
  """What the planner needs of a dataset; for pairs, the columns each pair takes in a row (its
  planning length, `jaxdata.transforms.pairs.planning_lengths`) stand for its length."""
  meta = with_image_budgets(name, DatasetMeta.from_dataset(dataset), dataset, cfg.packing)
  pairs = cfg.packing.pairs
  if pairs is None:
    return meta
  records = np.arange(dataset.num_records)
  base, in_base = record_columns(dataset, records)
  if pairs.reference is not None:
    stored = base.manifest.stats.get(REFERENCE_STATS, {}).get("model_id")
    if stored != pairs.reference:
      raise ConfigError(
        f"dataset {name}: holds reference log-probabilities of {f'model {stored!r}' if stored else 'no model'}; "
        f"packing.pairs.reference asks for {pairs.reference!r} (jaxdata.reference_logprobs writes them)"
      )
    check_reference_values(base.columns, base.manifest.stats[REFERENCE_STATS], base.path)
  lengths = planning_lengths(
    np.asarray(dataset.lengths[records], np.int64),
    base.columns["chosen_length"][in_base],
    base.columns["prompt_length"][in_base],
    pairs,
  )
  too_long = np.flatnonzero(lengths > cfg.packing.seq_len)
  if too_long.size and pairs.too_long == "error":
    raise ConfigError(
      f"dataset {name}: {too_long.size} pairs take more than packing.seq_len {cfg.packing.seq_len} columns "
      f"(the first: record {int(too_long[0])}, {int(lengths[too_long[0]])} columns with layout {pairs.layout}); "
      "raise seq_len, or set packing.pairs.too_long: drop (they are then left out and counted)"
    )
  return dataclasses.replace(meta, lengths=lengths)


def _sampling(dataset: SplitDataset, settings: Any) -> str:
  """What the fingerprint adds to a dataset's order: its windows, its holdout."""
  parts = [dataset.options.describe()] if isinstance(dataset, WindowView) else []
  if settings.holdout:
    parts.append(f"holdout={settings.holdout}")
  if settings.documents is not None:
    parts.append(f"documents={settings.documents[0]}:{settings.documents[1]}")
  return " ".join(parts)


def state_snapshot(planner: StepPlanner, fingerprint: OrderFingerprint, recorder: StatsRecorder) -> PipelineState:
  """The state right now, cheaply (nothing encoded): snapshots are taken for every planned step."""
  stream, packer = planner.stream.state(), planner.packer.state()
  return PipelineState(planner.step, fingerprint, stream, packer, recorder.tokens_per_source())


def check_pipeline_arguments(prefetch: int, making: StepMaking, read_ahead_tokens: int) -> None:
  """`Pipeline`'s `prefetch`, `making` and `read_ahead_tokens`, checked before any file is opened."""
  if isinstance(prefetch, bool) or not isinstance(prefetch, int) or prefetch < 0:
    raise ValueError(f"prefetch: must be an int >= 0, got {prefetch!r}")
  if making.reader_processes and RECORDED_READS.get() is not None:
    raise ValueError("making: reads cannot be recorded (`recorded_reads`) when reader processes make them")
  if isinstance(read_ahead_tokens, bool) or not isinstance(read_ahead_tokens, int) or read_ahead_tokens < 1:
    raise ValueError(f"read_ahead_tokens: must be an int >= 1, got {read_ahead_tokens!r}")


def log_stored_orders(cfg: PipelineConfig) -> None:
  """One line on the "jaxdata" logger per dataset read in runs of stored order (asked for by name:
  the default mixes every dataset on every pass)."""
  for settings in cfg.dataset_settings():
    if settings.keeps_stored_order:
      LOGGER.info(
        "jaxdata: dataset %s is read in %s, the same runs every pass (shuffle_block_size: null); "
        "the default (global) mixes it",
        settings.name,
        settings.order_name,
      )
