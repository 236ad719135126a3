"""`open_parts`: what a pipeline plans and reads with, opened from a config.

Used by `Pipeline` and by its worker processes, which open the same files
from the same `PipelineSpec` and must arrive at the same fingerprint::

    spec: config, split, epoch -> datasets (checked; any format, windows where sampled) -> token bound, StepPlanner, DocumentReader, order fingerprint
"""

from __future__ import annotations

import contextvars
import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np

from jaxdata.checkpoint.fingerprint import order_fingerprint
from jaxdata.config.pipeline_config import PipelineConfig
from jaxdata.errors import ConfigError
from jaxdata.mixture.holdout import eval_config
from jaxdata.mixture.metadata import DatasetMeta, open_split
from jaxdata.pipeline.planner import StepPlanner
from jaxdata.pipeline.reader import DocumentReader, ReadLog
from jaxdata.pipeline.spec import PipelineSpec
from jaxdata.pipeline.state import PipelineState
from jaxdata.pipeline.stats import StatsRecorder
from jaxdata.pipeline.vocabulary import token_bound, with_special_ids
from jaxdata.sources.dataset import ReadOptions
from jaxdata.sources.opening import SplitDataset
from jaxdata.sources.sampling_windows import WindowView
from jaxdata.sources.shard_cache import default_cache_options

__all__ = ["Parts", "open_parts", "state_snapshot"]


@dataclasses.dataclass(frozen=True)
class Parts:
  planner: StepPlanner
  reader: DocumentReader
  fingerprint: dict[str, Any]
  cfg: PipelineConfig  # the config the planner runs (the eval split's for split="eval")
  record_starts: list[np.ndarray]  # per dataset: its shards' first records


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
      _refuse_pairs(d.name, datasets[-1])
    if split == "eval":
      cfg = eval_config(
        cfg,
        {
          ds_name: ds.num_records
          for ds_name, ds in zip([d.name for d in cfg.dataset_settings() if d.holdout], datasets)
        },
      )
    cfg = with_special_ids(cfg, datasets)
    bound = token_bound(cfg, datasets)
    planner = StepPlanner(
      cfg, {d.name: DatasetMeta.from_dataset(ds) for d, ds in zip(cfg.datasets, datasets)}, spec.epoch
    )
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
    DocumentReader(datasets, cfg.names, bound, RECORDED_READS.get()),
    fingerprint,
    cfg,
    [np.asarray(ds.record_starts) for ds in datasets],
  )


def _refuse_pairs(name: str, dataset: SplitDataset) -> None:
  """A dataset of preference pairs is not packed as documents: its two sides would train as one."""
  if dataset.manifest.holds_pairs:
    raise ConfigError(
      f"dataset {name}: holds preference pairs (features {list(dataset.manifest.features)}: chosen and "
      "rejected in one record); a Pipeline packs documents, and would train both sides as one; this jaxdata "
      "does not pack pairs"
    )


def _sampling(dataset: SplitDataset, settings: Any) -> str:
  """What the fingerprint adds to a dataset's order: its windows, its holdout."""
  parts = [dataset.options.describe()] if isinstance(dataset, WindowView) else []
  if settings.holdout:
    parts.append(f"holdout={settings.holdout}")
  if settings.documents is not None:
    parts.append(f"documents={settings.documents[0]}:{settings.documents[1]}")
  return " ".join(parts)


def state_snapshot(planner: StepPlanner, fingerprint: Mapping[str, Any], recorder: StatsRecorder) -> PipelineState:
  """The state right now, cheaply (nothing encoded): snapshots are taken for every planned step."""
  return PipelineState.of_planner(planner, fingerprint, recorder.tokens_per_source())
