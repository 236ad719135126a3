"""Held-out documents (per-domain loss on held-out data): chosen by a keyed order, never trained on.

::

    holdout: H (a count) or f (a fraction: round(f N))       dataset of N documents
    held out = sorted(permute([0, H), N, key(seed, dataset, "holdout")))   the first H of a keyed permutation
    split "train"  the other N - H documents (SubsetView keep=False): every shuffle runs over them
    split "eval"   the H held-out ones (SubsetView keep=True), each dataset once, unshuffled

>>> held_out_records("web", 1000, 0.01, seed=0).size
10
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from jaxdata.config.pipeline_config import PipelineConfig
from jaxdata.config.resolve import DatasetSettings
from jaxdata.errors import ConfigError
from jaxdata.order.feistel import derive_key
from jaxdata.order.permutation import permute
from jaxdata.sources.opening import SplitDataset
from jaxdata.sources.subset import RangeView, SubsetView

__all__ = ["SPLITS", "eval_config", "held_out_records", "split_view"]

SPLITS = ("train", "eval")


def held_out_count(holdout: int | float | None, num_records: int, name: str = "") -> int:
  if not holdout:
    return 0
  count = holdout if isinstance(holdout, int) else int(round(holdout * num_records))
  if count >= num_records:
    raise ConfigError(f"datasets.{name}.holdout: {count} of its {num_records} documents would leave none to train on")
  return count


def held_out_records(name: str, num_records: int, holdout: int | float | None, seed: int) -> np.ndarray:
  """The held-out documents (sorted global record indices): the first H of a keyed permutation."""
  count = held_out_count(holdout, num_records, name)
  if not count:
    return np.zeros(0, np.int64)
  return np.sort(permute(np.arange(count, dtype=np.int64), num_records, derive_key(seed, name, "holdout")))


def split_view(dataset: SplitDataset, settings: DatasetSettings, seed: int, split: str) -> SplitDataset:
  """`dataset` as the split sees it: itself (no holdout), the others ("train") or the held-out ones ("eval");
  within its `documents` range when it has one."""
  if split not in SPLITS:
    raise ValueError(f"split: {split!r} is not one of {SPLITS}")
  if settings.documents is not None:
    dataset = RangeView(dataset, *settings.documents)
  if not settings.holdout:
    return dataset
  records = held_out_records(settings.name, dataset.num_records, settings.holdout, seed)
  return SubsetView(dataset, records, keep=split == "eval")


def eval_config(cfg: PipelineConfig, held_out: Mapping[str, int]) -> PipelineConfig:
  """The eval split's config: the datasets with held-out documents, each read once in stored order,
  mixed in proportion to their held-out counts (documents unit, exact interleave: every dataset's
  last document comes with the stream's last), the final partial batch kept (padded)."""
  names = [n for n in cfg.names if held_out.get(n)]
  if not names:
    raise ConfigError("split eval: no dataset has a holdout (set datasets[].holdout)")
  raw = cfg.to_dict()
  raw["datasets"] = [
    {
      **d,
      "shuffle_shards": False,
      "shuffle_within_shard": False,
      "shuffle_block_size": None,
      "exhausted_policy": None,
      "max_repeats": None,
      "stop_after_passes": None,
      "open_shards": 1,
    }
    for d in raw["datasets"]
    if d["name"] in names
  ]
  raw["mixture"] = {"weights": {n: held_out[n] for n in names}, "unit": "documents", "interleave": "exact"}
  for key in ("exhausted_policy", "max_repeats", "reshuffle_on_repeat"):
    raw.pop(key, None)
  raw["stop_after_passes"] = 1
  raw["batch"] = {**raw.get("batch", {}), "drop_remainder": False}
  raw.pop("stats_path", None)
  return PipelineConfig.from_dict(raw)
