"""MaxText's file keys: its train-file spec and mixture file parsed, each glob's jaxdata dataset found and
checked to select it whole (as MaxText's `glob.glob` lists files: a '*' never crosses '/').

>>> parse_train_files("a/*.ar:0.25;b/*.ar:0.75") == parse_train_files("a/*.ar,0.25;b/*.ar,0.75")
True
"""

from __future__ import annotations

import fnmatch
import functools
import json
import os
from typing import Any

from jaxdata.config.validate import short, weight
from jaxdata.errors import ConfigError
from jaxdata.sources.manifest import MANIFEST_NAME, Manifest
from jaxdata.sources.stores import is_remote
from jaxdata.sources.token_files import read_object

__all__ = [
  "check_glob_selects_the_dataset",
  "dataset_manifest",
  "directory_of",
  "mixture_file",
  "parse_train_files",
  "unique_names",
]


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


def mixture_file(path: str) -> list[tuple[str, str, float]]:
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


def directory_of(glob: str) -> str:
  """A file glob's dataset directory: the path before its first wildcard component."""
  parts = glob.split("/")
  wild = next((i for i, p in enumerate(parts) if set("*?[") & set(p)), len(parts))
  directory = "/".join(parts[:wild]) if wild < len(parts) else os.path.dirname(glob)
  return directory or "."


def _glob_matches(pattern: str, path: str) -> bool:
  """Whether `glob.glob(pattern)` would list `path`: component by component (a '*' never crosses '/')."""
  wanted, parts = pattern.split("/"), path.split("/")
  return len(wanted) == len(parts) and all(fnmatch.fnmatchcase(p, w) for p, w in zip(parts, wanted))


def dataset_manifest(directory: str, glob: str, key: str) -> Manifest:
  if is_remote(directory):
    return Manifest.parse(read_object(directory, MANIFEST_NAME), f"{directory}/{MANIFEST_NAME}")
  if not os.path.isfile(os.path.join(directory, MANIFEST_NAME)):
    raise ConfigError(
      f"{key}: {glob}: {directory} holds no jaxdata dataset ({MANIFEST_NAME}); write one with "
      f"`jaxdata convert` (MaxText's tf.train.Example files: `jaxdata convert {glob} --out DIR --name NAME "
      "--tokenizer ...`), or index token shards with `jaxdata index`"
    )
  return Manifest.load(directory)


def check_glob_selects_the_dataset(glob: str, directory: str, manifest: Manifest, key: str) -> None:
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


def unique_names(directories: list[str]) -> list[str]:
  names = [os.path.basename(os.path.normpath(d)) or "data" for d in directories]
  return [n if names.count(n) == 1 else f"{n}{i}" for i, n in enumerate(names)]
