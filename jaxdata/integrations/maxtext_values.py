"""MaxText's data keys, checked where they enter: each key has MaxText's own type.

`checked_values(values)` returns the data keys of a MaxText config with
their values checked against `KEY_TYPES` (a wrong type or value is a
`ConfigError` naming the key), drops the keys jaxdata does not read, and
refuses a key that is a near miss of a data key (`grain_train_filez`): a
typo would otherwise leave the real key at its default without a word.
MaxText's other keys (model, optimizer, ...) pass unread.

>>> checked_values({"packing": False, "max_target_length": 512, "learning_rate": 3e-4})
{'packing': False, 'max_target_length': 512}
>>> checked_values({"packing": "false"})
Traceback (most recent call last):
...
jaxdata.errors.ConfigError: packing: expected true or false (MaxText's type), got 'false'
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Mapping
from typing import Any, Literal

import numpy as np

from jaxdata.config.validate import short
from jaxdata.errors import ConfigError

__all__ = ["KEY_TYPES", "checked_values"]

KeyType = Literal["bool", "int", "number", "str", "columns"]

# Every data key jaxdata reads, with MaxText's type (base.yml) and, for numbers, the least value it takes.
KEY_TYPES: dict[str, tuple[KeyType, int | float | None]] = {
  "dataset_type": ("str", None),
  "grain_train_files": ("str", None),
  "grain_train_mixture_config_path": ("str", None),
  "grain_eval_files": ("str", None),
  "grain_file_type": ("str", None),
  "grain_packing_type": ("str", None),
  "packing": ("bool", None),
  "max_segments_per_seq": ("int", -1),
  "max_target_length": ("int", 2),
  "use_truncation": ("bool", None),
  "add_bos": ("bool", None),
  "add_eos": ("bool", None),
  "tokenize_train_data": ("bool", None),
  "tokenize_eval_data": ("bool", None),
  "tokenizer_path": ("str", None),
  "tokenizer_type": ("str", None),
  "train_data_columns": ("columns", None),
  "eval_data_columns": ("columns", None),
  "data_shuffle_seed": ("int", 0),
  "enable_data_shuffling": ("bool", None),
  "num_epoch": ("int", 1),
  "global_batch_size_to_load": ("int", 1),
  "per_device_batch_size": ("number", 0),
  "global_batch_size_to_load_eval": ("int", 1),
  "eval_per_device_batch_size": ("number", 0),
  "expansion_factor_real_data": ("number", -1),
  "grain_worker_count": ("int", -1),
  "grain_worker_count_eval": ("int", -1),
  "grain_per_worker_buffer_size": ("int", 0),
  "grain_per_worker_buffer_size_eval": ("int", 0),
  "grain_num_threads": ("int", 1),
  "grain_num_threads_eval": ("int", 1),
  "grain_prefetch_buffer_size": ("int", 0),
  "grain_prefetch_buffer_size_eval": ("int", 0),
  "grain_ram_budget_mb": ("int", 0),
  "grain_data_source_max_workers": ("int", 0),
  "grain_use_elastic_iterator": ("bool", None),
  "colocated_python_data_input": ("bool", None),
  "generate_padding_batch_train": ("bool", None),
  "generate_padding_batch_eval": ("bool", None),
  "use_dpo": ("bool", None),
  "use_sft": ("bool", None),
  "sft_train_on_completion_only": ("bool", None),
  "chat_template_path": ("str", None),
  "enable_rampup_batch_size": ("bool", None),
  "hf_path": ("str", None),
  "hf_data_dir": ("str", None),
  "hf_train_files": ("columns", None),  # a glob or a list of them
  "hf_eval_files": ("columns", None),
  "olmo_index_path": ("str", None),
  "olmo_path_remap_from": ("str", None),
  "olmo_path_remap_to": ("str", None),
  "olmo_apply_ngram_filter": ("bool", None),
  "training_objective": ("str", None),
  "grain_shuffle_buffer_size": ("int", 0),
  "grain_index_storage_option": ("str", None),
}
# jaxdata's own additions to MaxText's keys (the special ids, when no tokenizer says them).
JAXDATA_KEYS: dict[str, tuple[KeyType, int | float | None]] = {
  "bos_id": ("int", 0),
  "eos_id": ("int", 0),
  "pad_id": ("int", 0),
}
_TYPES = {**KEY_TYPES, **JAXDATA_KEYS}
# Keys MaxText may leave unset (None): the derived batch sizes and the string keys.
_MAY_BE_NONE = {"global_batch_size_to_load", "global_batch_size_to_load_eval"}
# Real MaxText keys that are near misses of data keys, so never taken for typos.
_OTHER_MAXTEXT_KEYS = {
  "global_batch_size_to_train_on",
  "global_batch_size_to_eval_on",
  "micro_batch_size_to_train_on",
  "micro_batch_size_to_eval_on",
  "hf_data_files",
  "max_prefill_predict_length",
  "tokenizer_vocab_size",
}
_TYPO_CUTOFF = 0.88  # difflib ratio: one or two letters off in a key of 12+ characters


def checked_values(values: Mapping[str, Any], not_read: tuple[str, ...] = ()) -> dict[str, Any]:
  """The data keys of `values`, checked against `KEY_TYPES` (None for an unset key is left out).

  `not_read`: further data keys MaxText has that jaxdata does not read (accepted as any value).
  """
  if not isinstance(values, Mapping):
    raise ConfigError(f"MaxText values: expected a mapping of config keys, got {short(values)}")
  known = set(_TYPES) | set(not_read)
  out: dict[str, Any] = {}
  for key, value in values.items():
    if not isinstance(key, str):
      raise ConfigError(f"MaxText values: a key must be a string, got {short(key)}")
    if key in _TYPES:
      checked = _checked(key, value)
      if checked is not None:
        out[key] = checked
    elif key not in known and key not in _OTHER_MAXTEXT_KEYS:
      near = difflib.get_close_matches(key, sorted(known), n=1, cutoff=_TYPO_CUTOFF)
      near = near or [k for k in sorted(known) if _one_edit_apart(key, k)][:1]  # short keys: use_stf
      if near and near[0] not in values:
        raise ConfigError(
          f"{key}: not a MaxText data key; did you mean {near[0]!r}? (MaxText's other keys pass unread)"
        )
      if near:
        raise ConfigError(f"{key}: not a MaxText data key, given beside {near[0]!r}; remove the misspelled one")
  return out


def _one_edit_apart(a: str, b: str) -> bool:
  """One letter replaced, inserted, removed, or two neighbours swapped (`use_stf` for `use_sft`): a typo
  of a short key, which difflib's ratio does not catch."""
  if a == b or abs(len(a) - len(b)) > 1 or min(len(a), len(b)) < 4:
    return False
  if len(a) == len(b):
    differ = [i for i, (x, y) in enumerate(zip(a, b)) if x != y]
    swapped = (
      len(differ) == 2 and differ[1] == differ[0] + 1 and a[differ[0]] == b[differ[1]] and a[differ[1]] == b[differ[0]]
    )
    return len(differ) == 1 or swapped
  shorter, longer = (a, b) if len(a) < len(b) else (b, a)
  return any(longer[:i] + longer[i + 1 :] == shorter for i in range(len(longer)))


def _checked(key: str, value: Any) -> Any:
  kind, least = _TYPES[key]
  if value is None:
    if kind in ("str", "columns") or key in _MAY_BE_NONE:
      return None
    raise ConfigError(f"{key}: null; give {_describe(kind, least)} (MaxText's type), or leave the key out")
  if isinstance(value, np.generic):
    value = value.item()
  if kind == "bool":
    if not isinstance(value, bool):
      raise ConfigError(f"{key}: expected true or false (MaxText's type), got {short(value)}")
    return value
  if kind in ("int", "number"):
    numeric = isinstance(value, int) or (kind == "number" and isinstance(value, float))
    if isinstance(value, bool) or not numeric:
      raise ConfigError(f"{key}: expected {_describe(kind, least)} (MaxText's type), got {short(value)}")
    if isinstance(value, float) and not math.isfinite(value):
      raise ConfigError(f"{key}: {value} is not a finite number")
    if least is not None and value < least:
      raise ConfigError(f"{key}: {short(value)}; expected {_describe(kind, least)}")
    if key == "max_segments_per_seq" and value == 0:
      raise ConfigError(f"{key}: 0; give -1 (no cap) or a cap >= 1 on documents per packed row")
    return value
  if kind == "columns":
    if isinstance(value, str):
      return value
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, str) for v in value):
      return list(value)
    raise ConfigError(f"{key}: expected a column name or a list of them, got {short(value)}")
  if not isinstance(value, str):
    raise ConfigError(f"{key}: expected a string (MaxText's type), got {short(value)}")
  return value


def _describe(kind: KeyType, least: int | float | None) -> str:
  what = {"bool": "true or false", "int": "an int", "number": "a number", "str": "a string", "columns": "columns"}[kind]
  return what if least is None else f"{what} >= {least}"
