"""MaxText's `dataset_type: olmo_grain`: OLMo's flat token files, read in place as fixed windows.

MaxText's OLMo pipeline reads an index JSON (`olmo_index_path`, written by
MaxText's OLMo index builder) listing flat token files; its instances are
the non-overlapping `sequence_length`-token windows of each file (trailing
tokens dropped), shuffled globally. jaxdata reads the same files in place
(`jaxdata index`'s flat format, each file one document) with window
sampling without replacement::

    index JSON {sequence_length L, dtype, files: [{path, n_tokens, ...}]}
        -> flat index of the files (built once, in the inputs cache, keyed by the index's fingerprint)
        -> dataset {sampling: windows, window: L - 1, with_replacement: false}
           records = windows [k L, (k + 1) L) of each file: OLMo's instances, one a row

A row holds the instance's L - 1 inputs and their targets; MaxText's own
rows hold L inputs with the last target masked, so the trained tokens are
the same. The order is jaxdata's (a keyed permutation per pass), not
OLMo's sampler.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Mapping
from typing import Any

from jaxdata.errors import ConfigError
from jaxdata.sources.flat_index import build_flat_index
from jaxdata.sources.index_target import TOKEN_DTYPES
from jaxdata.sources.manifest import MANIFEST_NAME, Manifest
from jaxdata.sources.shard_cache import default_cache_options
from jaxdata.sources.stores import is_remote

__all__ = ["olmo_dataset"]

OLMO_INDEX_VERSION = "1"  # MaxText's INDEX_FORMAT_VERSION: the index files this reads


def _index(path: str) -> dict[str, Any]:
  try:
    with open(os.path.expanduser(path), encoding="utf-8") as f:
      index = json.load(f)
  except (OSError, json.JSONDecodeError, UnicodeDecodeError) as e:
    raise ConfigError(f"olmo_index_path: {path}: not a readable index JSON ({e})") from e
  if not isinstance(index, dict) or index.get("format_version") != OLMO_INDEX_VERSION:
    got = index.get("format_version") if isinstance(index, dict) else None
    raise ConfigError(
      f"olmo_index_path: {path}: index format version {got!r}, jaxdata reads {OLMO_INDEX_VERSION!r} "
      "(MaxText's OLMo index builder)"
    )
  files = index.get("files")
  if not isinstance(files, list) or not files or not all(isinstance(f, dict) and "path" in f for f in files):
    raise ConfigError(f"olmo_index_path: {path}: 'files' must list the token files ({{path, n_tokens, ...}})")
  return index


def olmo_dataset(values: Mapping[str, Any], cache_dir: str | None = None) -> dict[str, Any]:
  """The jaxdata dataset entry of MaxText's olmo_grain values: the index's files indexed in place (once)."""
  path = values.get("olmo_index_path")
  if not path:
    raise ConfigError("olmo_index_path: dataset_type olmo_grain reads the files an index JSON lists: give it")
  if values.get("olmo_apply_ngram_filter", True):
    raise ConfigError(
      "olmo_apply_ngram_filter: true (MaxText's default) masks instances with repeated n-grams, OLMo-core's "
      "filter, which jaxdata does not run: set olmo_apply_ngram_filter: false"
    )
  if values.get("grain_train_files"):
    raise ConfigError(
      "grain_train_files: dataset_type olmo_grain reads the files olmo_index_path lists, so these would be "
      "ignored; remove grain_train_files, or read them with dataset_type: grain"
    )
  index = _index(str(path))
  length = index.get("sequence_length")
  if isinstance(length, bool) or not isinstance(length, int) or length < 2:
    raise ConfigError(f"olmo_index_path: {path}: sequence_length {length!r} is not a whole number of tokens >= 2")
  if index.get("dtype") not in TOKEN_DTYPES:
    raise ConfigError(
      f"olmo_index_path: {path}: dtype {index.get('dtype')!r}: the index must name its files' token dtype "
      "({' or '.join(TOKEN_DTYPES)}, as MaxText's OLMo index builder writes)"
    )
  if length != values.get("max_target_length", 2048):
    raise ConfigError(
      f"olmo_index_path: the index's sequence_length {length} is not max_target_length "
      f"{values.get('max_target_length', 2048)} (as MaxText, jaxdata reads instances of the index's length)"
    )
  old, new = str(values.get("olmo_path_remap_from") or ""), str(values.get("olmo_path_remap_to") or "")
  files = [new + f["path"][len(old) :] if old and f["path"].startswith(old) else f["path"] for f in index["files"]]
  for file in files:
    if is_remote(file):
      raise ConfigError(
        f"olmo_index_path: {file}: jaxdata reads OLMo's token files from a file system; mount the bucket "
        "(gcsfuse) and map its prefix with olmo_path_remap_from / olmo_path_remap_to"
      )
    if not os.path.isfile(file):
      raise ConfigError(f"olmo_index_path: {file} (listed by {path}) does not exist")
  # the key covers what the index says of the files (a rewritten index with another dtype is another index)
  key = hashlib.sha256(json.dumps([index.get("fingerprint"), index.get("dtype"), files]).encode()).hexdigest()[:16]
  root = os.path.join(default_cache_options(cache_dir).cache_dir, "datasets")
  target = os.path.join(root, f"olmo-{key}")
  if not os.path.isfile(os.path.join(target, MANIFEST_NAME)):
    os.makedirs(root, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=".olmo-", dir=root)
    try:
      build_flat_index("flat", files, dtype=str(index.get("dtype")), out_dir=staging, name="olmo")
      _check_counts(Manifest.load(staging), index, files)
      os.replace(staging, target)
    finally:
      shutil.rmtree(staging, ignore_errors=True)
  return {"name": "olmo", "path": target, "sampling": "windows", "window": length - 1, "with_replacement": False}


def _check_counts(manifest: Manifest, index: Mapping[str, Any], files: list[str]) -> None:
  """Each file holds the tokens the index says (a file that changed since the index was built is named)."""
  for shard, file, entry in zip(manifest.shards, files, index["files"]):
    if "n_tokens" in entry and shard.num_tokens != entry["n_tokens"]:
      raise ConfigError(
        f"olmo_index_path: {file} holds {shard.num_tokens:,} tokens, the index says {entry['n_tokens']:,}: "
        "the file changed since the index was built; build it again"
      )
