"""`with_built_inputs`: a config whose datasets name raw inputs, made one that names their caches.

Every entrance that opens datasets (`Pipeline`, `jaxdata plan` / `audit` /
`doctor`, `jaxdata demo --config`) calls it first, in the main process: the
caches are built there, once, and worker processes get a config of plain
paths. A dataset converted in place is the same dataset `jaxdata convert`
writes from the same files and options, so its batches are the same::

    datasets: [{name: web, inputs: corpus/*.jsonl, tokenizer: hf:tok, convert: {examples: chat}}]
        -> conversion.input_cache.built_dataset (keyed; built the first time, reused after)
        -> datasets: [{name: web, path: CACHE/datasets/web-KEY16}]   (or inputs_cache/web-KEY16: a bucket's
                                                                       copy, conversion.bucket_cache)
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
from collections.abc import Callable

from jaxdata.config.pipeline_config import PipelineConfig
from jaxdata.config.schema import DatasetConfig
from jaxdata.conversion.bucket_cache import published_dataset
from jaxdata.conversion.input_cache import built_dataset
from jaxdata.conversion.options import ConvertOptions
from jaxdata.conversion.tokenizers import TokenizerSpec
from jaxdata.errors import ConfigError
from jaxdata.sources.shard_cache import default_cache_options
from jaxdata.sources.stores import is_remote

__all__ = ["with_built_inputs"]

logger = logging.getLogger("jaxdata")


def cache_root(cfg: PipelineConfig) -> str:
  """Where converted raw inputs are built: `cache_dir`, else $JAXDATA_CACHE_DIR, else ~/.cache/jaxdata; /datasets.
  Also where they are kept, unless `inputs_cache` names another place."""
  return os.path.join(default_cache_options(cfg.cache_dir).cache_dir, "datasets")


def convert_options(d: DatasetConfig) -> ConvertOptions:
  """The dataset's `convert` mapping as `ConvertOptions`; a ConfigError names a wrong key or value."""
  where = f"datasets.{d.name}"
  known = {f.name for f in dataclasses.fields(ConvertOptions)} - {"tokenizer"}
  given = dict(d.convert or {})
  unknown = sorted(set(given) - known)
  if unknown:
    raise ConfigError(f"{where}.convert.{unknown[0]}: not an option of jaxdata convert ({', '.join(sorted(known))})")
  for key in ("include", "exclude"):  # globs: one (a string) or several (a list)
    if isinstance(given.get(key), str):
      given[key] = (given[key],)
    elif isinstance(given.get(key), list):
      given[key] = tuple(given[key])
  try:
    tokenizer = TokenizerSpec.parse(str(d.tokenizer))
  except ValueError as error:
    raise ConfigError(f"{where}.tokenizer: {error}") from error
  try:
    return ConvertOptions(tokenizer=tokenizer, **given)
  except (ValueError, TypeError) as error:
    raise ConfigError(f"{where}.convert: {error}") from error


def build_processes() -> tuple[int, int]:
  """(this process's index, the processes building together): $JAXDATA_PROCESS_INDEX / _COUNT, else
  jax.distributed's processes (when it is initialized), else (0, 1). They must share the cache directory."""
  given = os.environ.get("JAXDATA_PROCESS_INDEX"), os.environ.get("JAXDATA_PROCESS_COUNT")
  if any(v is not None for v in given):
    try:
      index, count = (int(v) for v in given)  # type: ignore[arg-type]
    except (TypeError, ValueError) as error:
      raise ConfigError(
        f"JAXDATA_PROCESS_INDEX / JAXDATA_PROCESS_COUNT: {given}: give both, as integers 0 <= index < count"
      ) from error
    if not 0 <= index < count:
      raise ConfigError(f"JAXDATA_PROCESS_INDEX {index}: not in [0, JAXDATA_PROCESS_COUNT {count})")
    return index, count
  jax = sys.modules.get("jax")  # never imported for this: without jax, no jax.distributed either
  if jax is not None and jax.distributed.is_initialized():
    return jax.process_index(), jax.process_count()
  return 0, 1


def say(message: str) -> None:
  """A cache build's progress: on the "jaxdata" logger where logging is set up, else on stderr (a script
  that sets up no logging still sees a build of minutes, as `jaxdata convert` shows it)."""
  if logger.hasHandlers():
    logger.info(message)
  else:
    print(f"jaxdata: {message}", file=sys.stderr, flush=True)


def with_built_inputs(cfg: PipelineConfig, log: Callable[[str], None] = say) -> PipelineConfig:
  """`cfg` with every raw-input dataset's cache built (or found) and named as its path."""
  if not cfg.raw_inputs:
    return cfg
  local_root = cache_root(cfg)
  bucket = cfg.inputs_cache if cfg.inputs_cache is not None and is_remote(cfg.inputs_cache) else None
  root = cfg.inputs_cache if cfg.inputs_cache is not None and bucket is None else local_root
  wait_s = _build_wait_s()  # how long a process waits on the others
  full = cfg.inputs_hash == "full"
  datasets = []
  for d in cfg.datasets:
    if d.inputs:
      options = convert_options(d)
      processes = build_processes()
      try:
        if bucket is not None:  # hosts without a shared disk: process 0 builds here and publishes
          path = published_dataset(
            d.name,
            list(d.inputs),
            options,
            bucket,
            local_root,
            log,
            max_bytes=cfg.inputs_max_bytes,
            process=processes,
            wait_s=wait_s,
            full_hash=full,
          )
        else:
          path = built_dataset(
            d.name,
            list(d.inputs),
            options,
            root,
            log,
            cfg.inputs_max_bytes,
            process=processes,
            wait_s=wait_s,
            full_hash=full,
          )
      except ConfigError as error:  # "inputs: ..." / "tokenizer: ...": the config's key, whole
        raise ConfigError(f"datasets.{d.name}.{error}") from error
      d = dataclasses.replace(d, path=path, inputs=(), tokenizer=None, convert=None)
    datasets.append(d)
  return dataclasses.replace(cfg, datasets=tuple(datasets))


def _build_wait_s() -> float:
  """$JAXDATA_BUILD_WAIT_S (default 3600): seconds a process waits on the others' share of a build."""
  given = os.environ.get("JAXDATA_BUILD_WAIT_S", "3600")
  try:
    value = float(given)
  except ValueError:
    value = -1.0
  if not value > 0 or value == float("inf"):
    raise ConfigError(f"$JAXDATA_BUILD_WAIT_S: {given!r} is not a number of seconds above 0 (default 3600)")
  return value
