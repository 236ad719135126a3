"""MaxText's `dataset_type: hf`: the files its `load_dataset` would read, as a jaxdata dataset of raw inputs.

MaxText reads a Hub builder (`parquet`, `json`, `text`) over `hf_train_files`
/ `hf_eval_files`, or a local file or directory (`hf_path`), and tokenizes the
column `train_data_columns` names at load. jaxdata converts the same files
once (cached) when the pipeline opens, with the same tokenizer, and reads them
as any dataset: the text column as text, `use_sft` conversations rendered with
the tokenizer's chat template, `use_dpo`'s two columns as preference pairs.

>>> import tempfile, os
>>> root = tempfile.mkdtemp()
>>> hf_dataset({"hf_path": "json", "hf_train_files": os.path.join(root, "*.jsonl"),
...             "tokenizer_path": "/tok"}, "train")["convert"]
{'field': 'text'}
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from jaxdata.errors import ConfigError

__all__ = ["hf_dataset"]

_HF_BUILDERS = ("parquet", "json", "text")
_HF_DATA_FILES = (
  "*.parquet",
  "*.jsonl",
  "*.json",
  "*.jsonl.gz",
  "*.jsonl.zst",
  "*.json.gz",
)  # load_dataset's file builders: hf_path names the format, the files follow


def hf_dataset(values: Mapping[str, Any], split: str) -> dict[str, Any]:
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
