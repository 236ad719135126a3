"""MaxText's data keys -> a jaxdata `PipelineConfig`: every key is honoured, or refused with one line.

`MAXTEXT_KEYS` says, for every data key of MaxText's `base.yml`, what
jaxdata does with it (docs/integrations.md prints the same table). A key
that jaxdata cannot honour is a `ConfigError` naming it when it is set to
anything but MaxText's neutral value; MaxText's other keys (model,
optimizer, ...) are not read.

Files: a glob selects exactly the shards it matches, as MaxText's
`glob.glob` does. The directory before its first wildcard must be a jaxdata
dataset; a glob matching no shard, or only some shards of it, is refused
(jaxdata reads a dataset whole: index the subset as its own dataset).

>>> parse_train_files("a/*.ar:0.25;b/*.ar:0.75") == parse_train_files("a/*.ar,0.25;b/*.ar,0.75")
True
"""

from __future__ import annotations

import fnmatch
import functools
import json
import os
from collections.abc import Mapping
from typing import Any

import jax

from jaxdata.config.pipeline_config import PipelineConfig
from jaxdata.config.validate import short, weight
from jaxdata.conversion.tokenizers import HuggingFaceTokenizer, content_sha256
from jaxdata.errors import ConfigError, optional_module
from jaxdata.integrations.maxtext_olmo import olmo_dataset
from jaxdata.integrations.maxtext_values import KEY_TYPES, checked_values
from jaxdata.sources.fileutil import file_sha256
from jaxdata.sources.manifest import MANIFEST_NAME, Manifest
from jaxdata.sources.stores import is_remote
from jaxdata.sources.token_files import read_object

__all__ = [
  "MAXTEXT_KEYS",
  "MAXTEXT_SOURCE",
  "maxtext_config",
  "maxtext_pad_id",
  "maxtext_sft",
  "maxtext_values",
  "maxtext_workers",
  "parse_train_files",
]

# key: what jaxdata does with it (the table of docs/integrations.md).
MAXTEXT_KEYS: dict[str, str] = {
  "dataset_type": "grain (or unset): jaxdata datasets; hf: local Parquet / JSON files (hf_path, hf_train_files), "
  "converted into a cache the first time (docs/convert.md); olmo_grain: OLMo's flat token files (olmo_index_path), "
  "read in place as fixed windows; tfds, synthetic, c4_mlperf: refused",
  "grain_train_files": "datasets and weights ('glob', 'glob,w;glob,w', older 'glob:w;...'); exact glob match; "
  "weights are token shares (MaxText's mix counts records)",
  "grain_train_mixture_config_path": "the same from JSON {name: {path, weight}}",
  "grain_eval_files": "the datasets of maxtext_config(values, split='eval'): one pass, last batch padded",
  "grain_file_type": "arrayrecord: read; parquet: refused (convert it)",
  "grain_packing_type": "packing.mode: first_fit, best_fit, concat_then_split -> concat",
  "packing": "false: packing.mode none (one document a row, padded with the pad id; true: zeros, as Grain's packers)",
  "max_segments_per_seq": "packing.max_segments_per_row (-1: no cap; MaxText's default 32 caps documents per row)",
  "max_target_length": "packing.seq_len",
  "use_truncation": "packing.long_docs: true -> truncate (TokenizeAndTrim), false -> split (chunks; refused unpacked)",
  "add_bos": "packing.add_bos when MaxText tokenizes (tokenize_*_data), with the tokenizer's BOS id (refused if unknown)",
  "add_eos": "packing.add_eos when MaxText tokenizes (tokenize_*_data), with the tokenizer's EOS id (refused if unknown)",
  "tokenize_train_data": "true: the datasets hold tokenizer_path's ids (checked) and get BOS / EOS; false: ids, no BOS / EOS",
  "tokenize_eval_data": "as tokenize_train_data, for split='eval'",
  "tokenizer_path": "checked against each dataset's tokenizer (sha256; an HF tokenizer directory: its tokenizer.json); "
  "SentencePiece: BOS / EOS / pad ids",
  "tokenizer_type": "read with tokenizer_path (sentencepiece, huggingface); tiktoken: not checked",
  "train_data_columns": "one column: read (it was the feature `jaxdata convert --field` read); several: refused",
  "eval_data_columns": "as train_data_columns",
  "data_shuffle_seed": "seed",
  "enable_data_shuffling": "true: shuffle shards and a global permutation; false: stored order",
  "num_epoch": "stop_after_passes (every dataset repeats until then; eval: one pass)",
  "global_batch_size_to_load": "batch.global_batch_size",
  "per_device_batch_size": "batch.global_batch_size = per_device_batch_size x devices, when the above is unset",
  "global_batch_size_to_load_eval": "batch.global_batch_size of split='eval'",
  "eval_per_device_batch_size": "as per_device_batch_size, for split='eval' (0: per_device_batch_size)",
  "expansion_factor_real_data": "-1 or 1: read; other values: refused",
  "grain_worker_count": "StepMaking(reader_processes=n); 0: in process; -1: auto (one reader per spare core)",
  "grain_worker_count_eval": "as grain_worker_count, for split='eval'",
  "grain_per_worker_buffer_size": "Pipeline(prefetch=n): steps made ahead",
  "grain_per_worker_buffer_size_eval": "as grain_per_worker_buffer_size, for split='eval'",
  "grain_num_threads": "Pipeline(read_threads=n)",
  "grain_num_threads_eval": "as grain_num_threads, for split='eval'",
  "grain_prefetch_buffer_size": "no effect: jaxdata reads ahead by read_ahead_tokens, not by records",
  "grain_prefetch_buffer_size_eval": "no effect (as grain_prefetch_buffer_size)",
  "grain_ram_budget_mb": "no effect: sizes MaxText's worker auto-tuning, which jaxdata does not do",
  "grain_data_source_max_workers": "no effect: jaxdata reads every dataset in one batched read per step",
  "grain_use_elastic_iterator": "read: jaxdata's state is elastic whatever the value (any host count restores it)",
  "colocated_python_data_input": "false: read; true: refused",
  "generate_padding_batch_train": "false: read; true: refused (the mixture repeats; it never runs out)",
  "generate_padding_batch_eval": "false: read; true: refused",
  "use_dpo": "true: preference pairs (jaxdata convert --format preference), one pair a row as MaxText's "
  "dpo_loss_fn reads them (chosen, rejected, *_segmentation, *_position: packing.pairs layout parallel, mode none); "
  "a pair with a side longer than max_target_length is dropped and counted (MaxText truncates it)",
  "use_sft": "true: fine-tuning batches from datasets with trained-token masks (jaxdata convert --format chat); "
  "MaxText's tokenizer adds no BOS / EOS then (the template does)",
  "sft_train_on_completion_only": "true: only trained tokens are targets (targets_segmentation 0 elsewhere, as "
  "SFTPromptMasking's masked prompts); false: every token",
  "chat_template_path": "the template the datasets were converted with: checked (sha256) against their conversion",
  "enable_rampup_batch_size": "false: read; true: refused (use jaxdata's batch.ramp)",
  "dataset_path": "not read with dataset_type grain (MaxText reads it for tfds only)",
  "dataset_name": "not read with dataset_type grain (tfds only)",
  "eval_dataset_name": "not read with dataset_type grain (tfds only)",
  "train_split": "not read with dataset_type grain (tfds / hf only)",
  "eval_split": "not read with dataset_type grain (tfds / hf only)",
  "hf_path": "dataset_type hf: parquet / json / text (then hf_train_files), or a local directory or file of them; "
  "a Hub id is refused (no network: download it first)",
  "hf_name": "not read with dataset_type grain (hf only)",
  "hf_data_dir": "dataset_type hf: the directory hf_train_files lie in (as load_dataset's data_dir)",
  "hf_train_files": "dataset_type hf: the training files (a glob or a list), converted with tokenizer_path",
  "hf_eval_split": "not read with dataset_type grain (hf only)",
  "hf_eval_files": "dataset_type hf: the evaluation files, for split='eval'",
  "hf_access_token": "not read with dataset_type grain (hf only)",
  "olmo_index_path": "dataset_type olmo_grain: the index JSON (format 1) of the flat token files; its sequence_length "
  "must be max_target_length; the files are indexed in place once (the inputs cache) and read as windows",
  "olmo_path_remap_from": "dataset_type olmo_grain: an index path prefix replaced by olmo_path_remap_to",
  "olmo_path_remap_to": "dataset_type olmo_grain: what olmo_path_remap_from becomes (a mounted bucket's path)",
  "olmo_apply_ngram_filter": "false: read; true (MaxText's default): refused (OLMo-core's repeated n-gram mask is "
  "not run by jaxdata)",
  "training_objective": "causal_lm: read (next-token targets); block_diffusion: refused",
  "grain_shuffle_buffer_size": "no effect: a buffer shuffle is for sequential formats; jaxdata's shuffles are "
  "exact permutations",
  "grain_index_storage_option": "no effect: jaxdata reads each shard's record offsets itself",
  "global_batch_size_to_load_start": "not read: batch ramp-up (enable_rampup_batch_size) is refused; use batch.ramp",
  "per_device_batch_size_start": "not read (batch ramp-up)",
  "per_device_batch_size_increment": "not read (batch ramp-up)",
  "global_rampup_samples": "not read (batch ramp-up)",
  "use_chat_template": "not read: templates are applied when the examples are converted (jaxdata convert "
  "--format chat); chat_template_path is checked against them",
  "chat_template": "not read (as use_chat_template): name the template file with chat_template_path to check it",
  "train_image_column": "not read: image columns (multimodal input) are MaxText's own",
  "eval_image_column": "not read (as train_image_column)",
  "default_prompt": "not read (multimodal input)",
  "max_corpus_chars": "not read: MaxText's tokenizer training input",
  "block_diffusion_mask_id": "not read (training_objective block_diffusion is refused)",
  "block_diffusion_min_noise": "not read (block_diffusion)",
  "block_diffusion_logit_alignment": "not read (block_diffusion)",
  "block_diffusion_canvas_policy": "not read (block_diffusion)",
}
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
_HF_BUILDERS = ("parquet", "json", "text")
_HF_DATA_FILES = (
  "*.parquet",
  "*.jsonl",
  "*.json",
  "*.jsonl.gz",
  "*.jsonl.zst",
  "*.json.gz",
)  # load_dataset's file builders: hf_path names the format, the files follow


def parse_train_files(spec: str, key: str = "grain_train_files") -> list[tuple[str, float]]:
  """MaxText's file spec: one glob, or "glob,weight;glob,weight" (the older form: "glob:weight").

  >>> parse_train_files("a/*.ar,0.25;b/*.ar,0.75")
  [('a/*.ar', 0.25), ('b/*.ar', 0.75)]
  >>> parse_train_files("gs://bucket/c4/*")
  [('gs://bucket/c4/*', 1.0)]
  """
  if not isinstance(spec, str) or not spec.strip():
    raise ConfigError(f"{key}: give a glob, or 'glob,weight;glob,weight'")
  parts = [p.strip() for p in spec.split(";") if p.strip()]
  if len(parts) == 1:
    glob, weight_text = _split_weight(parts[0])
    return [(parts[0], 1.0)] if weight_text is None else [(glob, _weight(weight_text, parts[0], key))]
  out = []
  for part in parts:
    glob, weight_text = _split_weight(part)
    if weight_text is None:
      raise ConfigError(f"{key}: {part!r} is not 'glob,weight' (or 'glob:weight')")
    out.append((glob, _weight(weight_text, part, key)))
  return out


def _split_weight(part: str) -> tuple[str, str | None]:
  """(glob, weight text) at the last ',' or ':' (a gs:// scheme's ':' is not a weight), or (part, None)."""
  cut = max(part.rfind(","), part.rfind(":"))
  if cut <= 0 or part[cut + 1 :].startswith("//"):
    return part, None
  return part[:cut].strip(), part[cut + 1 :].strip()


def _weight(text: str, part: str, key: str) -> float:
  try:
    value = float(text)
  except ValueError as e:
    raise ConfigError(f"{key}: {part!r} is not 'glob,weight' (or 'glob:weight')") from e
  if not value >= 0:  # NaN too
    raise ConfigError(f"{key}: {part!r}: a weight must be a number >= 0")
  return value


def _mixture_file(path: str) -> list[tuple[str, str, float]]:
  try:
    with open(path, encoding="utf-8") as f:
      raw = json.load(f, object_pairs_hook=functools.partial(_unique_keys, path))
  except (OSError, json.JSONDecodeError, UnicodeDecodeError) as e:
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


def _unique_keys(path: str, pairs: list[tuple[str, Any]]) -> dict[str, Any]:
  names = [k for k, _ in pairs]
  twice = sorted({k for k in names if names.count(k) > 1})
  if twice:
    raise ConfigError(f"grain_train_mixture_config_path: {path}: {twice[0]!r} is named twice; name each dataset once")
  return dict(pairs)


def maxtext_values(values: Mapping[str, Any]) -> dict[str, Any]:
  """The data keys of MaxText `values`, each checked to have MaxText's type (see `maxtext_values.KEY_TYPES`)."""
  return checked_values(values, not_read=tuple(k for k in MAXTEXT_KEYS if k not in KEY_TYPES))


def _directory_of(glob: str) -> str:
  """A file glob's dataset directory: the path before its first wildcard component."""
  parts = glob.split("/")
  wild = next((i for i, p in enumerate(parts) if set("*?[") & set(p)), len(parts))
  directory = "/".join(parts[:wild]) if wild < len(parts) else os.path.dirname(glob)
  return directory or "."


def _glob_matches(pattern: str, path: str) -> bool:
  """Whether `glob.glob(pattern)` would list `path`: component by component (a '*' never crosses '/')."""
  wanted, parts = pattern.split("/"), path.split("/")
  return len(wanted) == len(parts) and all(fnmatch.fnmatchcase(p, w) for p, w in zip(parts, wanted))


def _dataset_manifest(directory: str, glob: str, key: str) -> Manifest:
  if is_remote(directory):
    return Manifest.parse(read_object(directory, MANIFEST_NAME), f"{directory}/{MANIFEST_NAME}")
  if not os.path.isfile(os.path.join(directory, MANIFEST_NAME)):
    raise ConfigError(
      f"{key}: {glob}: {directory} holds no jaxdata dataset ({MANIFEST_NAME}); write one with "
      f"`jaxdata convert` (MaxText's tf.train.Example files: `jaxdata convert {glob} --out DIR --name NAME "
      "--tokenizer ...`), or index token shards with `jaxdata index`"
    )
  return Manifest.load(directory)


def _check_glob_selects_the_dataset(glob: str, directory: str, manifest: Manifest, key: str) -> None:
  root = directory.rstrip("/")
  shard_paths = [f"{root}/{shard.path}" for shard in manifest.shards]
  matched = [p for p in shard_paths if _glob_matches(glob, p)]
  if not matched:
    raise ConfigError(f"{key}: {glob} matches no shard of the dataset in {directory} (MaxText: no file found)")
  if len(matched) < len(shard_paths):
    raise ConfigError(
      f"{key}: {glob} matches {len(matched)} of the {len(shard_paths)} shards of the dataset in {directory}; "
      "jaxdata reads a dataset whole: widen the glob, or index those shards as a dataset of their own"
    )


def _unique_names(directories: list[str]) -> list[str]:
  names = [os.path.basename(os.path.normpath(d)) or "data" for d in directories]
  return [n if names.count(n) == 1 else f"{n}{i}" for i, n in enumerate(names)]


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


def _tokenize(values: Mapping[str, Any], split: str) -> bool:
  """Whether MaxText would tokenize at load (and so add BOS / EOS): tokenize_train_data / tokenize_eval_data."""
  return bool(values.get("tokenize_eval_data" if split == "eval" else "tokenize_train_data", True))


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


def _sentencepiece_ids(values: Mapping[str, Any]) -> dict[str, int]:
  """The special ids of tokenizer_path: a SentencePiece model's, or a Hugging Face tokenizer's (its
  tokenizer_config.json names them)."""
  path = values.get("tokenizer_path")
  if path and not is_remote(str(path)) and (os.path.isdir(path) or str(path).endswith(".json")):
    named = os.path.join(path, "tokenizer.json") if os.path.isdir(path) else str(path)
    if not os.path.isfile(named):
      return {}
    try:
      return HuggingFaceTokenizer(named).special_ids()
    except ValueError:  # not a tokenizer: the check that it is the datasets' names it (tokenize_*_data)
      return {}
  if not (path and os.path.isfile(path) and str(path).endswith(".model")):
    return {}
  sentencepiece = optional_module("sentencepiece", "sentencepiece", "reading BOS / EOS ids from tokenizer_path")
  try:
    processor = sentencepiece.SentencePieceProcessor(model_file=path)
  except (OSError, RuntimeError) as e:
    raise ConfigError(f"tokenizer_path: {path} is not a SentencePiece model ({str(e)[:200]})") from e
  ids = {"bos_id": processor.bos_id(), "eos_id": processor.eos_id(), "pad_id": processor.pad_id()}
  if ids["pad_id"] < 0:  # MaxText pads with the unknown id when the model has no pad
    ids["pad_id"] = processor.unk_id()
  return ids


def _tokenizer_ids(
  values: Mapping[str, Any], manifests: list[Manifest], names: list[str], adds: dict[str, bool]
) -> dict[str, int]:
  """bos_id / eos_id / pad_id: from the values, the datasets' tokenizer, or tokenizer_path (SentencePiece)."""
  from_path = _sentencepiece_ids(values)
  out = {}
  for key in ("bos_id", "eos_id", "pad_id"):
    candidates = [values.get(key), *(m.tokenizer.get(key) for m in manifests), from_path.get(key)]
    found = next((v for v in candidates if isinstance(v, int) and not isinstance(v, bool) and v >= 0), None)
    if found is not None:
      out[key] = found
  for flag, key in (("add_bos", "bos_id"), ("add_eos", "eos_id")):
    if adds[flag] and key not in out:
      recorded = next((m.tokenizer for m in manifests if m.tokenizer.get("kind") not in (None, "unknown")), None)
      path = values.get("tokenizer_path")
      cause = (
        f"dataset {names[0]!r}'s tokenizer ({recorded.get('kind')}, recorded in its manifest) has no "
        f"{key[:3].upper()} token; give {key}, or {flag}: false"
        if recorded is not None
        else f"the tokenizer at tokenizer_path {path} names no {key[:3].upper()} token; give {key}, or {flag}: false"
        if from_path or (path and os.path.isdir(str(path)))
        else f"dataset {names[0]!r} was indexed without a tokenizer; give tokenizer_path (a SentencePiece "
        f"model or a Hugging Face tokenizer directory), {key}, or {flag}: false"
      )
      raise ConfigError(
        f"{flag}: true (MaxText's default) adds the tokenizer's {key[:3].upper()}, and no id is known: {cause}"
      )
  return out


def _check_tokenizer(values: Mapping[str, Any], manifests: list[Manifest], names: list[str], split: str) -> None:
  """tokenize_*_data: true says the data was text for tokenizer_path: each dataset's tokenizer must be it
  (a dataset indexed with no tokenizer record cannot be checked, and is not refused)."""
  path = values.get("tokenizer_path")
  if not _tokenize(values, split) or not path or is_remote(path):
    return
  if os.path.isdir(path):  # an HF tokenizer directory: the manifest records its tokenizer.json's hash
    if not os.path.isfile(os.path.join(path, "tokenizer.json")):
      raise ConfigError(f"tokenizer_path: {path} is a directory without tokenizer.json (an HF tokenizer's files)")
    path = os.path.join(path, "tokenizer.json")
  if not os.path.isfile(path):
    raise ConfigError(
      f"tokenizer_path: {path} does not exist; MaxText tokenizes with it (tokenize_{split}_data: true) and jaxdata "
      f"checks the datasets were converted with it: give the tokenizer file, or tokenize_{split}_data: false"
    )
  digest = file_sha256(path)
  content = functools.cache(lambda: content_sha256(HuggingFaceTokenizer(path).backend))
  for name, manifest in zip(names, manifests):
    kind, recorded = manifest.tokenizer.get("kind"), manifest.tokenizer.get("sha256")
    if kind in (None, "unknown") or recorded == digest:
      continue
    if kind == "huggingface" and path.endswith(".json") and manifest.tokenizer.get("content_sha256") == content():
      continue
    was = f"{manifest.tokenizer.get('file', kind)}, sha256 {recorded[:12]}..." if recorded else f"the {kind} tokenizer"
    raise ConfigError(
      f"tokenizer_path: {path} (sha256 {digest[:12]}...) is not the tokenizer dataset {name!r} was converted "
      f"with ({was}): convert it again with this tokenizer, or point tokenizer_path at that one"
    )


def maxtext_pad_id(values: Mapping[str, Any], split: str = "train", opened: PipelineConfig | None = None) -> int:
  """The id MaxText's `ShiftData` ignores: the tokenizer's pad (else its unknown id), as MaxText picks it.
  `opened`: the config of a pipeline already open (with `dataset_type: hf` or `olmo_grain` its datasets
  exist only then: a cache built from raw files, OLMo's files indexed), whose datasets' manifests say."""
  values = maxtext_values(values)
  if opened is not None:
    names = [d.name for d in opened.datasets]
    manifests = [_dataset_manifest(d.path, d.path, "dataset") for d in opened.datasets]
  else:
    names, _, _, _, manifests = _datasets(values, split, check_paths=True)
  return _tokenizer_ids(values, manifests, names, {"add_bos": False, "add_eos": False}).get("pad_id", 0)


def _datasets(
  values: Mapping[str, Any], split: str, check_paths: bool
) -> tuple[list[str], list[str], list[float], list[str], list[Manifest]]:
  """(names, globs, weights, directories, manifests) of the split's files."""
  key = "grain_eval_files" if split == "eval" else "grain_train_files"
  if split == "train" and values.get("grain_train_mixture_config_path"):
    entries = _mixture_file(values["grain_train_mixture_config_path"])
    names, globs, weights = [e[0] for e in entries], [e[1] for e in entries], [e[2] for e in entries]
    key = "grain_train_mixture_config_path"
  else:
    pairs = parse_train_files(values.get(key, ""), key)
    globs, weights = [glob for glob, _ in pairs], [w for _, w in pairs]
    names = _unique_names([_directory_of(glob) for glob in globs])
  globs = [os.path.expanduser(glob) for glob in globs]  # as MaxText's find_data_files does
  directories = [_directory_of(glob) for glob in globs]
  manifests = []
  if check_paths:
    for directory, glob in zip(directories, globs):
      manifest = _dataset_manifest(directory, glob, key)
      _check_glob_selects_the_dataset(glob, directory, manifest, key)
      manifests.append(manifest)
  return names, globs, weights, directories, manifests


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
  hf = values.get("dataset_type", "grain") == "hf"
  olmo = values.get("dataset_type") == "olmo_grain"
  if hf or olmo:  # raw files converted (cached) when the pipeline opens, or OLMo's token files indexed in place
    names, weights, directories = ["olmo" if olmo else "hf"], [1.0], [""]
    manifests: list[Manifest] = []
    check_paths = False
  else:
    names, _, weights, directories, manifests = _datasets(values, split, check_paths)
  packing = bool(values.get("packing", True))
  truncate = bool(values.get("use_truncation", True))
  if not packing and not truncate:
    raise ConfigError(
      "use_truncation: false with packing: false: MaxText then makes a row of each chunk of a long document; "
      "jaxdata's unpacked rows hold one document each (truncated): pack, or keep use_truncation: true"
    )
  dpo = bool(values.get("use_dpo", False))
  # SFT and DPO: MaxText's tokenizer adds no BOS / EOS (the chat template does); OLMo's windows are ids as stored
  tokenize = _tokenize(values, split) and not values.get("use_sft") and not dpo and not olmo
  adds = {flag: tokenize and bool(values.get(flag, True)) for flag in ("add_bos", "add_eos")}  # the tokenizer adds them
  special = {}
  if check_paths:
    _check_tokenizer(values, manifests, names, split)
    _check_sft(values, manifests, names)
    _check_dpo(values, manifests, names)
    special = _tokenizer_ids(values, manifests, names, adds)
  # Grain's packers pad rows with zeros; MaxText pads unpacked rows with the tokenizer's pad id.
  special["pad_id"] = special.get("pad_id", 0) if not packing else 0
  packing_type = values.get("grain_packing_type", "first_fit")
  if packing_type not in _PACKING_TYPES:
    raise ConfigError(f"grain_packing_type: {packing_type!r} is not one of {', '.join(_PACKING_TYPES)}")
  shuffle = bool(values.get("enable_data_shuffling", True)) and split == "train"
  epochs = 1 if split == "eval" else int(values.get("num_epoch", 1))
  raw = {
    "seed": int(values.get("data_shuffle_seed", 0)),
    "datasets": [_hf_dataset(values, split)]
    if hf
    else [olmo_dataset(values, extra.get("cache_dir"))]
    if olmo
    else [{"name": n, "path": d} for n, d in zip(names, directories)],
    "mixture": {"weights": dict(zip(names, weights))},
    "shuffle_block_size": "global" if shuffle else None,
    "shuffle_shards": shuffle,
    "exhausted_policy": "repeat",
    "stop_after_passes": epochs,
    "packing": {
      "mode": _PACKING_TYPES[packing_type] if packing and not olmo else "none",  # (an OLMo window fills its row)
      "seq_len": int(values.get("max_target_length", 2048)),
      "long_docs": "truncate" if truncate else "split",
      "add_bos": adds["add_bos"],
      "add_eos": adds["add_eos"],
      "max_segments_per_row": _segment_cap(values, packing),
      **special,
    },
    **({"packing": _dpo_packing(values, special)} if dpo else {}),
    # eval: MaxText pads the last batch (batch_and_pad), so every held document is seen
    "batch": {"global_batch_size": _batch_size(values, split, num_devices), "drop_remainder": split != "eval"},
  }
  raw.update(extra)
  return PipelineConfig.from_dict(raw)


def _hf_dataset(values: Mapping[str, Any], split: str) -> dict[str, Any]:
  """dataset_type hf: the files MaxText's load_dataset would read, as a dataset of raw inputs."""
  path = str(values.get("hf_path") or "")
  files = values.get("hf_eval_files" if split == "eval" else "hf_train_files")
  files = [f for f in ([files] if isinstance(files, str) else list(files or [])) if f]  # base.yml's '' is none
  data_dir = values.get("hf_data_dir")
  if data_dir:
    files = [f if os.path.isabs(f) else os.path.join(str(data_dir), f) for f in files]
  convert: dict[str, Any] = {}
  if path not in _HF_BUILDERS:
    local = os.path.expanduser(path)
    if not os.path.exists(local):
      raise ConfigError(
        f"hf_path: {path!r} is not a local file or directory, nor one of {', '.join(_HF_BUILDERS)}: jaxdata reads "
        "no Hub dataset (no network); download its data files (Parquet / JSON) and name them"
      )
    if os.path.isdir(local):
      if any(n.endswith(".arrow") for n in os.listdir(local)):
        raise ConfigError(
          f"hf_path: {path} is a save_to_disk directory (Arrow files): export it with to_parquet or to_json first"
        )
      convert["include"] = list(_HF_DATA_FILES)  # as load_dataset on a directory: its data files, not a README
    files = files or [local]
  elif path == "text":  # load_dataset("text"): a row per line
    convert["text_mode"] = "line"
  if not files:
    raise ConfigError(f"hf_train_files: hf_path {path!r} names a format; give the files (a glob) to read with it")
  tokenizer = values.get("tokenizer_path")
  if not tokenizer:
    raise ConfigError("tokenizer_path: dataset_type hf converts text: it needs the tokenizer (a directory or a file)")
  tokenizer = str(tokenizer)
  spec = f"sp:{tokenizer}" if tokenizer.endswith(".model") else f"hf:{tokenizer}"
  key = "eval_data_columns" if split == "eval" else "train_data_columns"
  columns = values.get(key) or ["text"]
  columns = [columns] if isinstance(columns, str) else list(columns)
  if values.get("use_dpo"):  # dpo.yml: ['chosen', 'rejected'], each side's text or messages
    if len(columns) != 2:
      raise ConfigError(f"{key}: {columns}: use_dpo reads two columns, the chosen and the rejected side")
    convert.update(examples="preference", pair_fields=columns)
  elif len(columns) != 1:
    raise ConfigError(f"{key}: {columns}: one text column (the field converted)")
  elif values.get("use_sft"):  # sft.yml: ['messages'], conversations rendered with the tokenizer's template
    train_on = "assistant" if values.get("sft_train_on_completion_only") else "all"
    convert.update(examples="chat", field=columns[0], train_on=train_on)
    if values.get("chat_template_path"):
      convert["chat_template"] = str(values["chat_template_path"])
  else:
    convert["field"] = columns[0]
  return {"name": "hf", "inputs": files, "tokenizer": spec, "convert": convert}


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
