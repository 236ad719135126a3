"""MaxText: build a pipeline from MaxText's data config keys and hand out MaxText's batch features.

::

    MaxText key                              jaxdata
    grain_train_files "g1,w1;g2,w2" or "g"   datasets (a glob's directory is a jaxdata dataset), mixture weights
    grain_train_mixture_config_path          the same from JSON: {"name": {"path": glob, "weight": w}}
    data_shuffle_seed                        seed
    enable_data_shuffling                    shuffle_block_size: global (false: no shuffle at all)
    max_target_length                        packing.seq_len
    global_batch_size_to_load                batch.global_batch_size
    packing                                  packing.mode first_fit (false: none, one document a row)
    add_bos / add_eos (+ bos_id, eos_id)     packing.add_bos / add_eos (ids from the keys or the manifests)
    grain_worker_count                       Pipeline(workers=...) (0 or -1: in process)

Batches carry `inputs`, `inputs_segmentation`, `inputs_position`,
`targets`, `targets_segmentation` (0 wherever the loss must not count:
padding and each document's last token, as MaxText reads it for its loss
weights) and `targets_position`, int32 like MaxText's.

>>> values = {"grain_train_files": "data/web/*.array_record,0.7;data/code/*.array_record,0.3",
...           "max_target_length": 1024, "global_batch_size_to_load": 64}
>>> [(d.name, d.path) for d in maxtext_config(values, check_paths=False).datasets]
[('web', 'data/web'), ('code', 'data/code')]
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from typing import Any

import jax.numpy as jnp
import numpy as np

from jaxdata.config.pipeline_config import PipelineConfig
from jaxdata.config.validate import short, weight
from jaxdata.errors import ConfigError
from jaxdata.pipeline.pipeline import Pipeline
from jaxdata.sources.manifest import MANIFEST_NAME, Manifest

__all__ = ["FEATURES", "MaxTextPipeline", "maxtext_batch", "maxtext_config", "parse_train_files"]

FEATURES = ("inputs", "inputs_segmentation", "inputs_position", "targets", "targets_segmentation", "targets_position")
_SUPPORTED_FILE_TYPES = ("arrayrecord",)


def parse_train_files(spec: str) -> list[tuple[str, float]]:
  """MaxText's `grain_train_files`: one glob, or "glob,weight;glob,weight".

  >>> parse_train_files("a/*.ar,0.25;b/*.ar,0.75")
  [('a/*.ar', 0.25), ('b/*.ar', 0.75)]
  """
  if not isinstance(spec, str) or not spec.strip():
    raise ConfigError("grain_train_files: give a glob, or 'glob,weight;glob,weight'")
  parts = [p.strip() for p in spec.split(";") if p.strip()]
  if len(parts) == 1 and "," not in parts[0]:
    return [(parts[0], 1.0)]
  out = []
  for part in parts:
    glob, _, weight = part.rpartition(",")
    try:
      out.append((glob.strip(), float(weight)))
    except ValueError as e:
      raise ConfigError(f"grain_train_files: {part!r} is not 'glob,weight'") from e
  return out


def _mixture_file(path: str) -> list[tuple[str, str, float]]:
  try:
    with open(path, encoding="utf-8") as f:
      raw = json.load(f)
  except (OSError, json.JSONDecodeError) as e:
    raise ConfigError(f"grain_train_mixture_config_path: {path}: {e}") from e
  if not isinstance(raw, dict) or not raw:
    raise ConfigError(f"grain_train_mixture_config_path: {path}: expected {{name: {{path, weight}}}}")
  out = []
  for name, entry in raw.items():
    if not isinstance(entry, dict) or "path" not in entry or "weight" not in entry:
      raise ConfigError(f"grain_train_mixture_config_path: {path}: {name!r} needs 'path' and 'weight'")
    if not isinstance(entry["path"], str):
      raise ConfigError(
        f"grain_train_mixture_config_path: {path}: {name!r}.path: expected a glob, got {short(entry['path'])}"
      )
    out.append(
      (name, entry["path"], weight(entry["weight"], f"grain_train_mixture_config_path: {path}: weight of {name!r}"))
    )
  return out


def _directory_of(glob: str) -> str:
  """A file glob's dataset directory: the path before its first wildcard component."""
  parts = glob.split("/")
  fixed = [p for p in parts[: next((i for i, p in enumerate(parts) if set("*?[") & set(p)), len(parts))]]
  directory = "/".join(fixed) if len(fixed) < len(parts) else os.path.dirname(glob)
  return directory or "."


def _unique_names(directories: list[str]) -> list[str]:
  names = [os.path.basename(os.path.normpath(d)) or "data" for d in directories]
  return [n if names.count(n) == 1 else f"{n}{i}" for i, n in enumerate(names)]


def maxtext_config(values: Mapping[str, Any], check_paths: bool = True, **extra: Any) -> PipelineConfig:
  """A `PipelineConfig` from MaxText config values (unknown keys are MaxText's own: left alone).

  `extra` adds jaxdata keys (e.g. `exhausted_policy`, `open_shards`).
  With `check_paths`, every glob's directory must be a jaxdata dataset.
  """
  file_type = values.get("grain_file_type", "arrayrecord")
  if file_type not in _SUPPORTED_FILE_TYPES:
    raise ConfigError(
      f"grain_file_type: {file_type!r}; jaxdata reads jaxdata datasets (ArrayRecord shards with "
      "lengths and a manifest): convert or index the files first"
    )
  if values.get("grain_train_mixture_config_path"):
    entries = _mixture_file(values["grain_train_mixture_config_path"])
    names = [name for name, _, _ in entries]
    globs = [glob for _, glob, _ in entries]
    weights = [w for _, _, w in entries]
  else:
    pairs = parse_train_files(values.get("grain_train_files", ""))
    globs, weights = [glob for glob, _ in pairs], [w for _, w in pairs]
    names = _unique_names([_directory_of(glob) for glob in globs])
  directories = [_directory_of(glob) for glob in globs]
  if check_paths:
    for directory, glob in zip(directories, globs):
      if not os.path.isfile(os.path.join(directory, MANIFEST_NAME)) and "://" not in directory:
        raise ConfigError(
          f"grain_train_files: {glob}: {directory} holds no jaxdata dataset ({MANIFEST_NAME}); "
          f"write one with `jaxdata convert`, or index existing token shards with `jaxdata index "
          f"{glob} --dtype uint32`"
        )
  packing = bool(values.get("packing", True))
  add_bos, add_eos = bool(values.get("add_bos", True)), bool(values.get("add_eos", True))
  special = _special_ids(values, directories if check_paths else [])
  if "global_batch_size_to_load" not in values:
    raise ConfigError("global_batch_size_to_load: required (the global batch, in rows)")
  raw = {
    "seed": int(values.get("data_shuffle_seed", 0)),
    "datasets": [{"name": n, "path": d} for n, d in zip(names, directories)],
    "mixture": {"weights": dict(zip(names, weights))},
    "shuffle_block_size": "global" if values.get("enable_data_shuffling", True) else None,
    "shuffle_shards": bool(values.get("enable_data_shuffling", True)),
    "exhausted_policy": "repeat",
    "packing": {
      "mode": "first_fit" if packing else "none",
      "seq_len": int(values.get("max_target_length", 2048)),
      "add_bos": add_bos,
      "add_eos": add_eos,
      **special,
    },
    "batch": {"global_batch_size": int(values["global_batch_size_to_load"])},
  }
  raw.update(extra)
  return PipelineConfig.from_dict(raw)


def _special_ids(values: Mapping[str, Any], directories: list[str]) -> dict[str, int]:
  """bos_id / eos_id / pad_id from the values, else from the first dataset's tokenizer identity."""
  tokenizer = Manifest.load(directories[0]).tokenizer if directories else {}
  out = {}
  for key in ("bos_id", "eos_id", "pad_id"):
    value = values.get(key, tokenizer.get(key))
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
      out[key] = value
  return out


def maxtext_batch(batch: Mapping[str, Any]) -> dict[str, Any]:
  """A jaxdata batch under MaxText's feature names (NumPy or jax.Array, int32)."""
  where = np.where if isinstance(batch["tokens"], np.ndarray) else jnp.where
  return {
    "inputs": batch["tokens"],
    "inputs_segmentation": batch["segment_ids"],
    "inputs_position": batch["positions"],
    "targets": batch["targets"],
    "targets_segmentation": where(batch["loss_mask"] != 0, batch["segment_ids"], 0).astype("int32"),
    "targets_position": batch["positions"],
  }


class MaxTextPipeline:
  """A `Pipeline` built from MaxText values, yielding MaxText batches; its state is the pipeline's.

  Checkpoint it with `jaxdata.checkpoint.Save(maxtext.pipeline)` next to the model.
  """

  def __init__(
    self, values: Mapping[str, Any], mesh: Any = None, data_axes: tuple[str, ...] = ("data",), **pipeline_kwargs: Any
  ) -> None:
    workers = int(values.get("grain_worker_count", 0))
    pipeline_kwargs.setdefault("workers", max(0, workers))
    self.config = maxtext_config(values)
    self.pipeline = Pipeline(self.config, mesh, data_axes, **pipeline_kwargs)

  def __iter__(self) -> Iterator[dict[str, Any]]:
    return self

  def __next__(self) -> dict[str, Any]:
    return maxtext_batch(next(self.pipeline))

  def get_state(self) -> dict[str, Any]:
    return self.pipeline.get_state()

  def set_state(self, state: Mapping[str, Any]) -> None:
    self.pipeline.set_state(state)

  def close(self) -> None:
    self.pipeline.close()

  def __enter__(self) -> MaxTextPipeline:
    return self

  def __exit__(self, *exc: object) -> None:
    self.close()
