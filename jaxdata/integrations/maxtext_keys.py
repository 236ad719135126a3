"""MaxText's data keys -> a jaxdata `PipelineConfig`: every key is honoured, or refused with one line.

`MAXTEXT_KEYS` (read from maxtext_keys.json, beside this module) says, for
every data key of MaxText's `base.yml`, what jaxdata does with it
(docs/integrations.md prints the same table). A key
that jaxdata cannot honour is a `ConfigError` naming it when it is set to
anything but MaxText's neutral value; MaxText's other keys (model,
optimizer, ...) are not read.

Files: a glob selects exactly the shards it matches, as MaxText's
`glob.glob` does. The directory before its first wildcard must be a jaxdata
dataset; a glob matching no shard, or only some shards of it, is refused
(jaxdata reads a dataset whole: index the subset as its own dataset).
"""

from __future__ import annotations

import dataclasses
import importlib.resources
import json
import os
from collections.abc import Mapping
from typing import Any

import jax

from jaxdata.config.pipeline_config import PipelineConfig
from jaxdata.config.validate import short
from jaxdata.errors import ConfigError
from jaxdata.integrations.maxtext_files import (
  check_glob_selects_the_dataset,
  dataset_manifest,
  directory_of,
  mixture_file,
  parse_train_files,
  unique_names,
)
from jaxdata.integrations.maxtext_hf import hf_dataset
from jaxdata.integrations.maxtext_olmo import olmo_dataset
from jaxdata.integrations.maxtext_tokenizer import check_tokenizer, tokenizer_ids, tokenizes_at_load
from jaxdata.integrations.maxtext_values import KEY_TYPES, checked_values
from jaxdata.sources.fileutil import file_sha256
from jaxdata.sources.manifest import Manifest

__all__ = [
  "MAXTEXT_KEYS",
  "MAXTEXT_SOURCE",
  "maxtext_config",
  "maxtext_pad_id",
  "maxtext_sft",
  "maxtext_values",
  "maxtext_workers",
]

# key: what jaxdata does with it (the table of docs/integrations.md).
MAXTEXT_KEYS: dict[str, str] = json.loads(
  importlib.resources.files("jaxdata.integrations").joinpath("maxtext_keys.json").read_text(encoding="utf-8")
)
# The MaxText version MAXTEXT_KEYS follows: its base.yml's data keys (tests/support/maxtext_base_keys.json).
MAXTEXT_SOURCE = {"repository": "AI-Hypercomputer/maxtext", "commit": "e591f30cbbf217ed67ef71263ec0538239f9c3b8"}

# Keys jaxdata refuses unless they hold MaxText's neutral value.
_NEUTRAL: dict[str, tuple[Any, ...]] = {
  "expansion_factor_real_data": (-1, -1.0, 1, 1.0, None),
  "colocated_python_data_input": (False, None),
  "generate_padding_batch_train": (False, None),
  "generate_padding_batch_eval": (False, None),
  "enable_rampup_batch_size": (False, None),
  "training_objective": ("causal_lm", None),
}
_WHY_REFUSED = {
  "expansion_factor_real_data": "jaxdata loads exactly the global batch",
  "colocated_python_data_input": "jaxdata reads on every host itself",
  "generate_padding_batch_train": "the mixture repeats and never runs out",
  "generate_padding_batch_eval": "jaxdata does not add padding batches",
  "enable_rampup_batch_size": "use jaxdata's batch.ramp (docs/configuration.md)",
  "training_objective": "jaxdata makes next-token targets (causal_lm); block diffusion's masked canvases are MaxText's",
}
_PACKING_TYPES = {"first_fit": "first_fit", "best_fit": "best_fit", "concat_then_split": "concat"}
_READ_DATASET_TYPES = ("grain", "hf", "olmo_grain")


def maxtext_values(values: Mapping[str, Any]) -> dict[str, Any]:
  """The data keys of MaxText `values`, each checked to have MaxText's type (see `maxtext_values.KEY_TYPES`)."""
  return checked_values(values, not_read=tuple(k for k in MAXTEXT_KEYS if k not in KEY_TYPES))


def _refuse_unsupported(values: Mapping[str, Any]) -> None:
  dataset_type = values.get("dataset_type", "grain")
  if dataset_type not in _READ_DATASET_TYPES:
    raise ConfigError(
      f"dataset_type: {dataset_type!r}; jaxdata reads jaxdata datasets through dataset_type: grain with "
      "grain_train_files naming them: convert the data first (`jaxdata convert`)"
    )
  file_type = values.get("grain_file_type", "arrayrecord")
  if file_type != "arrayrecord":
    raise ConfigError(
      f"grain_file_type: {file_type!r}; jaxdata reads jaxdata datasets (ArrayRecord shards with lengths and a "
      "manifest): convert the files first (`jaxdata convert` reads Parquet)"
    )
  for key, neutral in _NEUTRAL.items():
    if key in values and values[key] not in neutral:
      raise ConfigError(f"{key}: {short(values[key])} is not supported: {_WHY_REFUSED[key]}")
  if values.get("use_dpo") and values.get("use_sft"):
    raise ConfigError("use_dpo: true with use_sft: true: one kind of batch at a time (pairs, or examples)")
  for key in ("train_data_columns", "eval_data_columns"):
    columns = values.get(key)
    if isinstance(columns, (list, tuple)) and len(columns) > (2 if values.get("use_dpo") else 1):
      raise ConfigError(f"{key}: {list(columns)}: one text column per dataset (the feature converted)")


def _batch_size(values: Mapping[str, Any], split: str, num_devices: int | None) -> int:
  suffix = "_eval" if split == "eval" else ""
  direct = values.get(f"global_batch_size_to_load{suffix}")
  per_device_key = (
    "eval_per_device_batch_size" if split == "eval" and values.get("eval_per_device_batch_size") else None
  )
  per_device_key = per_device_key or "per_device_batch_size"
  per_device = values.get(per_device_key)
  # a direct size is checked against the per-device size of its own split (eval: eval_per_device_batch_size)
  if direct is not None and (per_device is None or (split == "eval") != per_device_key.startswith("eval")):
    return int(direct)
  if per_device is None:
    raise ConfigError(f"global_batch_size_to_load{suffix}: give it, or per_device_batch_size")
  if num_devices is None:
    num_devices = jax.device_count()  # as MaxText's pyconfig counts them
  rows = float(per_device) * num_devices
  if direct is not None:
    if rows != direct:
      raise ConfigError(
        f"global_batch_size_to_load{suffix}: {direct} rows, but {per_device_key} {per_device} x {num_devices} "
        f"devices = {rows:g}: give one of them, or values that agree"
      )
    return int(direct)
  if rows < 1 or rows != int(rows):
    raise ConfigError(
      f"{per_device_key}: {per_device} x {num_devices} devices = {rows} rows; the global batch must be a "
      "whole number of rows >= 1"
    )
  return int(rows)


def maxtext_sft(values: Mapping[str, Any]) -> tuple[bool, bool]:
  """(use_sft, train on completions only): MaxText's SFT keys, checked."""
  values = maxtext_values(values)
  return bool(values.get("use_sft", False)), bool(values.get("sft_train_on_completion_only", False))


def _check_sft(values: Mapping[str, Any], manifests: list[Manifest], names: list[str]) -> None:
  """use_sft with completions only: every dataset holds examples with trained-token masks, converted with
  chat_template_path's template when it is given."""
  if not values.get("use_sft"):
    return
  if values.get("sft_train_on_completion_only"):
    plain = [n for n, m in zip(names, manifests) if not m.has_mask]
    if plain:
      raise ConfigError(
        f"sft_train_on_completion_only: dataset {plain[0]!r} has no trained-token masks; convert the "
        "conversations with `jaxdata convert --format chat` (the masks mark the completions)"
      )
  path = values.get("chat_template_path")
  if path:
    if not os.path.isfile(path):
      raise ConfigError(f"chat_template_path: {path} does not exist")
    digest = file_sha256(path)
    for name, manifest in zip(names, manifests):
      recorded = manifest.stats.get("chat_template_sha256")
      if recorded != digest:
        raise ConfigError(
          f"chat_template_path: {path} is not the template dataset {name!r} was converted with "
          f"({'sha256 ' + recorded[:12] + '...' if recorded else 'none recorded'}); convert it again with "
          f"`jaxdata convert --format chat --chat-template {path}`"
        )


def maxtext_pad_id(values: Mapping[str, Any], split: str = "train", opened: PipelineConfig | None = None) -> int:
  """The id MaxText's `ShiftData` ignores: the tokenizer's pad (else its unknown id), as MaxText picks it.
  `opened`: the config of a pipeline already open (with `dataset_type: hf` or `olmo_grain` its datasets
  exist only then: a cache built from raw files, OLMo's files indexed), whose datasets' manifests say."""
  values = maxtext_values(values)
  if opened is not None:
    names = [d.name for d in opened.datasets]
    manifests = [dataset_manifest(d.path, d.path, "dataset") for d in opened.datasets]
  else:
    names, _, _, _, manifests = _datasets(values, split, check_paths=True)
  return tokenizer_ids(values, manifests, names, {"add_bos": False, "add_eos": False}).get("pad_id", 0)


def _datasets(
  values: Mapping[str, Any], split: str, check_paths: bool
) -> tuple[list[str], list[str], list[float], list[str], list[Manifest]]:
  """(names, globs, weights, directories, manifests) of the split's files."""
  key = "grain_eval_files" if split == "eval" else "grain_train_files"
  if split == "train" and values.get("grain_train_mixture_config_path"):
    entries = mixture_file(values["grain_train_mixture_config_path"])
    names, globs, weights = [e[0] for e in entries], [e[1] for e in entries], [e[2] for e in entries]
    key = "grain_train_mixture_config_path"
  else:
    pairs = parse_train_files(values.get(key, ""), key)
    globs, weights = [glob for glob, _ in pairs], [w for _, w in pairs]
    names = unique_names([directory_of(glob) for glob in globs])
  globs = [os.path.expanduser(glob) for glob in globs]  # as MaxText's find_data_files does
  directories = [directory_of(glob) for glob in globs]
  manifests = []
  if check_paths:
    for directory, glob in zip(directories, globs):
      manifest = dataset_manifest(directory, glob, key)
      check_glob_selects_the_dataset(glob, directory, manifest, key)
      manifests.append(manifest)
  return names, globs, weights, directories, manifests


@dataclasses.dataclass(frozen=True)
class _Sources:
  """The datasets a MaxText config names: jaxdata's `datasets` entries, their names and weights, the
  manifests opened (none unless the paths were checked) and whether they were."""

  names: list[str]
  weights: list[float]
  datasets: list[dict[str, Any]]
  manifests: list[Manifest]
  checked: bool


def _sources(values: Mapping[str, Any], split: str, check_paths: bool, cache_dir: Any) -> _Sources:
  """Grain's globs (opened and checked with `check_paths`), or one Hugging Face or OLMo source: raw files
  converted (cached) when the pipeline opens, or OLMo's token files indexed in place."""
  kind = values.get("dataset_type", "grain")
  if kind == "hf":
    return _Sources(["hf"], [1.0], [hf_dataset(values, split)], [], False)
  if kind == "olmo_grain":
    return _Sources(["olmo"], [1.0], [olmo_dataset(values, cache_dir)], [], False)
  names, _, weights, directories, manifests = _datasets(values, split, check_paths)
  datasets = [{"name": n, "path": d} for n, d in zip(names, directories)]
  return _Sources(names, weights, datasets, manifests, check_paths)


def _packing_section(values: Mapping[str, Any], split: str, sources: _Sources) -> dict[str, Any]:
  """jaxdata's `packing` for MaxText's packing keys, with the tokenizer's ids where the paths were checked."""
  packing, truncate = bool(values.get("packing", True)), bool(values.get("use_truncation", True))
  if not packing and not truncate:
    raise ConfigError(
      "use_truncation: false with packing: false: MaxText then makes a row of each chunk of a long document; "
      "jaxdata's unpacked rows hold one document each (truncated): pack, or keep use_truncation: true"
    )
  dpo, olmo = bool(values.get("use_dpo", False)), values.get("dataset_type") == "olmo_grain"
  # SFT and DPO: MaxText's tokenizer adds no BOS / EOS (the chat template does); OLMo's windows are ids as stored
  tokenize = tokenizes_at_load(values, split) and not values.get("use_sft") and not dpo and not olmo
  adds = {flag: tokenize and bool(values.get(flag, True)) for flag in ("add_bos", "add_eos")}  # the tokenizer adds them
  special = {}
  if sources.checked:
    check_tokenizer(values, sources.manifests, sources.names, split)
    _check_sft(values, sources.manifests, sources.names)
    _check_dpo(values, sources.manifests, sources.names)
    special = tokenizer_ids(values, sources.manifests, sources.names, adds)
  # Grain's packers pad rows with zeros; MaxText pads unpacked rows with the tokenizer's pad id.
  special["pad_id"] = special.get("pad_id", 0) if not packing else 0
  packing_type = values.get("grain_packing_type", "first_fit")
  if packing_type not in _PACKING_TYPES:
    raise ConfigError(f"grain_packing_type: {packing_type!r} is not one of {', '.join(_PACKING_TYPES)}")
  if dpo:
    return _dpo_packing(values, special)
  return {
    "mode": _PACKING_TYPES[packing_type] if packing and not olmo else "none",  # (an OLMo window fills its row)
    "seq_len": int(values.get("max_target_length", 2048)),
    "long_docs": "truncate" if truncate else "split",
    **adds,
    "max_segments_per_row": _segment_cap(values, packing),
    **special,
  }


def maxtext_config(
  values: Mapping[str, Any],
  check_paths: bool = True,
  split: str = "train",
  num_devices: int | None = None,
  **extra: Any,
) -> PipelineConfig:
  """A `PipelineConfig` from MaxText config values (see `MAXTEXT_KEYS`; other keys are MaxText's own).

  Args:
    values: MaxText's config values (a dict, or its pyconfig's keys).
    check_paths: open every glob's dataset (its manifest) and check the glob
      selects it exactly; False builds the config from the values alone.
    split: "train" (grain_train_files) or "eval" (grain_eval_files: one
      pass, stored order).
    num_devices: the device count for per_device_batch_size (default:
      `jax.device_count()`).
    extra: jaxdata keys added or overridden (`open_shards`, a schedule, ...).
  """
  if split not in ("train", "eval"):
    raise ConfigError(f"split: 'train' or 'eval', got {split!r}")
  values = maxtext_values(values)
  _refuse_unsupported(values)
  sources = _sources(values, split, check_paths, extra.get("cache_dir"))
  shuffle = bool(values.get("enable_data_shuffling", True)) and split == "train"
  raw = {
    "seed": int(values.get("data_shuffle_seed", 0)),
    "datasets": sources.datasets,
    "mixture": {"weights": dict(zip(sources.names, sources.weights))},
    "shuffle_block_size": "global" if shuffle else None,
    "shuffle_shards": shuffle,
    "exhausted_policy": "repeat",
    "stop_after_passes": 1 if split == "eval" else int(values.get("num_epoch", 1)),
    "packing": _packing_section(values, split, sources),
    # eval: MaxText pads the last batch (batch_and_pad), so every held document is seen
    "batch": {"global_batch_size": _batch_size(values, split, num_devices), "drop_remainder": split != "eval"},
  }
  raw.update(extra)
  return PipelineConfig.from_dict(raw)


def _dpo_packing(values: Mapping[str, Any], special: Mapping[str, Any]) -> dict[str, Any]:
  """use_dpo: one pair a row in MaxText's layout (its dpo_loss_fn reads segment 1 of each row only)."""
  return {
    "mode": "none",
    "seq_len": int(values.get("max_target_length", 2048)),
    "pairs": {"layout": "parallel"},
    "pad_id": special.get("pad_id", 0),
  }


def _check_dpo(values: Mapping[str, Any], manifests: list[Manifest], names: list[str]) -> None:
  """use_dpo: every dataset holds preference pairs; without it, none does."""
  dpo = bool(values.get("use_dpo"))
  for name, manifest in zip(names, manifests):
    if dpo != manifest.holds_pairs:
      raise ConfigError(
        f"use_dpo: {dpo}, and dataset {name!r} holds {'documents' if dpo else 'preference pairs'}; "
        + ("convert the pairs with `jaxdata convert --format preference`" if dpo else "set use_dpo: true")
      )


def _segment_cap(values: Mapping[str, Any], packing: bool) -> int | None:
  """max_segments_per_seq -> packing.max_segments_per_row: -1 is no cap; unpacked rows hold one document."""
  cap = values.get("max_segments_per_seq", -1)
  return None if cap == -1 or not packing else int(cap)


def maxtext_workers(values: Mapping[str, Any], split: str = "train") -> int:
  """`StepMaking(reader_processes=...)` from grain_worker_count (-1, MaxText's auto-tuning: one reader per spare
  core)."""
  values = maxtext_values(values)
  key = "grain_worker_count_eval" if split == "eval" else "grain_worker_count"
  count = int(values.get(key, 0))
  if count == -1:
    return max(0, len(os.sched_getaffinity(0)) - 1) if hasattr(os, "sched_getaffinity") else 0
  if count < 0:
    raise ConfigError(f"{key}: {count}; give n >= 0, or -1 for auto")
  return count
