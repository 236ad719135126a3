"""MaxText's tokenizer keys: the special ids (BOS, EOS, pad) from the values, the datasets' tokenizer or
`tokenizer_path`, and the check that `tokenizer_path` is the tokenizer the datasets were written with."""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from typing import Any

from jaxdata.conversion.tokenizers import HuggingFaceTokenizer, content_sha256
from jaxdata.errors import ConfigError, optional_module
from jaxdata.sources.fileutil import file_sha256
from jaxdata.sources.manifest import Manifest
from jaxdata.sources.stores import is_remote

__all__ = ["check_tokenizer", "tokenizer_ids", "tokenizes_at_load"]


def tokenizes_at_load(values: Mapping[str, Any], split: str) -> bool:
  """Whether MaxText would tokenize at load (and so add BOS / EOS): tokenize_train_data / tokenize_eval_data."""
  return bool(values.get("tokenize_eval_data" if split == "eval" else "tokenize_train_data", True))


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


def tokenizer_ids(
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


def check_tokenizer(values: Mapping[str, Any], manifests: list[Manifest], names: list[str], split: str) -> None:
  """tokenize_*_data: true says the data was text for tokenizer_path: each dataset's tokenizer must be it
  (a dataset indexed with no tokenizer record cannot be checked, and is not refused)."""
  path = values.get("tokenizer_path")
  if not tokenizes_at_load(values, split) or not path or is_remote(path):
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
