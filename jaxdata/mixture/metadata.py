"""`DatasetMeta`: what the mixture needs of a dataset, and loading it for a config.

Record counts per shard and every length (memory-mapped, or constant for
window datasets): planning never reads a token.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import numpy as np

from jaxdata.config.packing_config import PackingConfig
from jaxdata.config.pipeline_config import PipelineConfig
from jaxdata.config.resolve import DatasetSettings
from jaxdata.errors import ConfigError
from jaxdata.mixture.holdout import split_view
from jaxdata.sources.dataset import ReadOptions
from jaxdata.sources.lengths import LengthsBase
from jaxdata.sources.opening import SplitDataset, open_dataset, record_columns
from jaxdata.sources.sampling_windows import WindowOptions, WindowView
from jaxdata.sources.shard_cache import CacheOptions, default_cache_options

__all__ = ["DatasetMeta", "checked_metadata", "load_metadata", "open_split", "window_options", "with_image_budgets"]


@dataclasses.dataclass(frozen=True)
class DatasetMeta:
  """What the stream needs of a dataset: records per shard and every length
  (an integer array, a memory-mapped `DocumentLengths` or `ConstantLengths`).

  `pass_records` is set for a dataset drawn with replacement (windows):
  its order is then `SampledOrder`, with that many draws per pass.
  `pass_tokens` (window datasets) is what one pass trains, and
  `segments` (drawn windows) the lengths of the token runs they come from:
  what exposure needs to count passes and unique tokens seen.
  `image_amounts` (image-text datasets under packing.images): per record, its
  patches and images [records, 2], what packing's image budgets count.
  """

  shard_counts: np.ndarray
  lengths: np.ndarray | LengthsBase  # memory-mapped, constant, or a view's
  pass_records: int | None = None
  pass_tokens: int | None = None
  segments: np.ndarray | None = None
  image_amounts: np.ndarray | None = None

  @property
  def supply(self) -> int:
    """Tokens of one pass: every document's, or `pass_tokens`."""
    return int(self.lengths.sum()) if self.pass_tokens is None else self.pass_tokens

  @classmethod
  def from_dataset(cls, dataset: SplitDataset) -> DatasetMeta:
    if not isinstance(dataset, WindowView):
      return cls(dataset.shard_num_records.copy(), dataset.lengths)
    segments = dataset.segment_lengths() if dataset.pass_records is not None else None
    return cls(dataset.shard_num_records.copy(), dataset.lengths, dataset.pass_records, dataset.pass_tokens, segments)

  @classmethod
  def load(
    cls,
    path: str,
    cache: CacheOptions | None = None,
    windows: WindowOptions | None = None,
    expected_format: str | None = None,
  ) -> DatasetMeta:
    with open_dataset(path, cache=cache, windows=windows, expected_format=expected_format) as dataset:
      return cls.from_dataset(dataset)

  @classmethod
  def from_lengths(cls, lengths: Sequence[int] | np.ndarray, shard_counts: Sequence[int] | None = None) -> DatasetMeta:
    if not (isinstance(lengths, np.ndarray) and lengths.dtype.kind in "iu"):
      lengths = np.asarray(lengths, dtype=np.int64)  # integer arrays are kept as they are (no copy)
    counts = np.asarray([lengths.size] if shard_counts is None else shard_counts, dtype=np.int64)
    if counts.sum() != lengths.size:
      raise ValueError(f"shard_counts sum to {counts.sum()}, but {lengths.size} lengths given")
    return cls(counts, lengths)


def window_options(settings: DatasetSettings) -> WindowOptions | None:
  """A dataset's window sampling, None for a document dataset."""
  if settings.window is None:
    return None
  return WindowOptions(settings.window, settings.with_replacement, settings.cross_documents)


def load_metadata(cfg: PipelineConfig) -> dict[str, DatasetMeta]:
  """Every dataset's training metadata, from its directory (remote ones through the config's cache)."""
  raw = [d.name for d in cfg.datasets if d.inputs]
  if raw:
    raise ConfigError(
      f"datasets.{raw[0]}: names raw inputs, converted when a Pipeline opens the config; to read its metadata "
      "before that, build them first: cfg = jaxdata.with_built_inputs(cfg)"
    )
  cache = default_cache_options(cfg.cache_dir, cfg.cache_bytes)
  out = {}
  for s in cfg.dataset_settings():
    with open_split(s, ReadOptions(), cache, cfg.seed, "train") as dataset:
      out[s.name] = with_image_budgets(s.name, DatasetMeta.from_dataset(dataset), dataset, cfg.packing)
  return out


def with_image_budgets(name: str, meta: DatasetMeta, dataset: SplitDataset, packing: PackingConfig) -> DatasetMeta:
  """Under packing.images, an image-text dataset's meta with its records' patches and images, and each
  example over a budget on its own planned as longer than a row: packing leaves it out and counts it
  (`too_large: drop`; the mixture counts none of its tokens), or a `ConfigError` names the first (`error`)."""
  images = packing.images
  if images is None or not dataset.manifest.holds_images:
    return meta
  base, in_base = record_columns(dataset, np.arange(dataset.num_records))
  amounts = np.stack([base.columns[c][in_base] for c in ("num_patches", "num_images")], 1).astype(np.int64)
  lengths = np.asarray(meta.lengths, np.int64)
  over = (lengths > packing.seq_len) | (amounts[:, 0] > images.max_patches) | (amounts[:, 1] > images.max_images)
  first = np.flatnonzero(over)
  if first.size and images.too_large == "error":
    i = int(first[0])
    raise ConfigError(
      f"dataset {name}: {_count(first.size, 'example')} over a row's budgets (the first: record {i} of the split, "
      f"{int(lengths[i])} tokens, "
      f"{int(amounts[i, 0])} patches, {int(amounts[i, 1])} images; a row holds {packing.seq_len}, {images.max_patches}, "
      f"{images.max_images}); raise them, or set packing.images.too_large: drop (they are then left out and counted)"
    )
  planned = np.where(over, packing.seq_len + 1, lengths) if first.size else meta.lengths  # "longer than a row"
  return dataclasses.replace(meta, lengths=planned, image_amounts=amounts)


def checked_metadata(cfg: PipelineConfig, metadata: Mapping[str, DatasetMeta]) -> tuple[list[DatasetMeta], list[int]]:
  """Each dataset's metadata in the config's order, and its shortest document; a `ConfigError` names a
  dataset without metadata, without records, or with a document of no token (a token-limited pull
  could never end). One pass over the lengths: only when the shortest is 0 are they scanned again, to
  name the first."""
  missing = [n for n in cfg.names if n not in metadata]
  if missing:
    raise ConfigError(f"datasets.{missing[0]}: no metadata given for this dataset")
  metas, shortest = [metadata[n] for n in cfg.names], []
  for name, meta in zip(cfg.names, metas):
    num_records = int(meta.shard_counts.sum())
    if num_records == 0:
      raise ConfigError(f"datasets.{name}: the dataset has no records")
    if meta.lengths.size != num_records:
      raise ConfigError(f"datasets.{name}: {meta.lengths.size} lengths for {num_records} records")
    shortest.append(int(meta.lengths.min()))  # (a view's min may be a bound: 0 is checked on the lengths)
    empty = np.flatnonzero(np.asarray(meta.lengths) == 0) if shortest[-1] == 0 else np.zeros(0, np.int64)
    if len(empty):
      raise ConfigError(
        f"datasets.{name}: {len(empty)} documents of length 0 (the first is record {int(empty[0])}); every "
        "document needs at least one token"
      )
  return metas, shortest


def open_split(
  settings: DatasetSettings, read_options: ReadOptions, cache: CacheOptions, seed: int, split: str
) -> SplitDataset:
  """A dataset opened and seen as `split` sees it (windows, or without / only its held-out documents)."""
  dataset = open_dataset(settings.path, read_options, cache, window_options(settings), settings.format)
  try:
    return split_view(dataset, settings, seed, split)
  except BaseException:  # re-raised: nothing may stay open
    dataset.close()
    raise


def _count(n: int, noun: str) -> str:
  return f"{n} {noun}" + ("" if n == 1 else "s")
