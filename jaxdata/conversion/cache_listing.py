"""The caches of converted raw inputs under a root, with their sizes: listed, and the stale ones pruned.

A root (`cache_dir`'s `datasets/`, or a local `inputs_cache`) holds, per dataset name::

    NAME-KEY16/                 a cache: current (the last built under NAME), or superseded by a later build
                                (a config still naming its inputs and options builds it again)
    NAME-KEY16/ w/o manifest    incomplete (half removed): never opened, replaced when built again
    .NAME-KEY16.building/.units an unfinished build (a Ctrl-C, a killed host): the next run resumes it;
                                abandoned once no process holds its lock

`prune` removes the superseded, incomplete and abandoned (never a build under way, never a current cache
unless asked: `everything=True`).

>>> import tempfile
>>> cached_datasets(tempfile.mkdtemp())
[]
"""

from __future__ import annotations

import dataclasses
import fcntl
import glob
import json
import os
import re
import shutil
from typing import Literal

from jaxdata.sources.manifest import MANIFEST_NAME

__all__ = ["CachedDataset", "cached_datasets", "prune_caches"]

CacheState = Literal["current", "superseded", "incomplete", "unfinished build", "build under way"]
_CACHE = re.compile(r"^(?P<name>.+)-(?P<key>[0-9a-f]{16})$")
_BUILD = re.compile(r"^\.(?P<name>.+)-(?P<key>[0-9a-f]{16})\.(building|units)$")


@dataclasses.dataclass(frozen=True)
class CachedDataset:
  """One entry of a cache root: the dataset name, its key (16 hex digits), its directory, its size in
  bytes, when it was last written (seconds since the epoch) and its state."""

  name: str
  key: str
  path: str
  size: int
  modified: float
  state: CacheState

  @property
  def stale(self) -> bool:
    """What `prune` removes: superseded, incomplete, or an abandoned build."""
    return self.state in ("superseded", "incomplete", "unfinished build")


def cached_datasets(root: str) -> list[CachedDataset]:
  """Every cache and unfinished build under `root`, by name, then newest first."""
  if not os.path.isdir(root):
    return []
  found = []
  for entry in sorted(os.listdir(root)):
    path = os.path.join(root, entry)
    if not os.path.isdir(path) or os.path.islink(path):
      continue
    cache, build = _CACHE.match(entry), _BUILD.match(entry)
    if build:
      name, key = build["name"], build["key"]
      state: CacheState = "build under way" if _locked(root, name, key) else "unfinished build"
    elif cache and not entry.startswith("."):
      name, key = cache["name"], cache["key"]
      if not os.path.isfile(os.path.join(path, MANIFEST_NAME)):
        state = "incomplete"
      else:
        state = "current" if _current_key(root, name) in (key, None) else "superseded"
    else:
      continue
    found.append(CachedDataset(name, key, path, _size(path), os.path.getmtime(path), state))
  newest_first = sorted(found, key=lambda c: -c.modified)
  return sorted(_one_current_per_name(newest_first), key=lambda c: c.name)


def prune_caches(root: str, everything: bool = False, dry_run: bool = False) -> list[CachedDataset]:
  """Removes the stale entries under `root` (with `everything`, the current caches too; never a build
  under way) and returns what it removed (with `dry_run`, what it would remove)."""
  removed = []
  for cached in cached_datasets(root):
    if cached.stale or (everything and cached.state == "current"):
      if not dry_run:
        shutil.rmtree(cached.path)
      removed.append(cached)
  return removed


def _current_key(root: str, name: str) -> str | None:
  """The key of the last cache built under `name` (`NAME.last.json`); None where it does not say."""
  try:
    with open(os.path.join(root, f"{name}.last.json")) as f:
      digest = json.load(f).get("digest")
  except (OSError, ValueError, AttributeError):
    return None
  return digest[:16] if isinstance(digest, str) else None


def _one_current_per_name(entries: list[CachedDataset]) -> list[CachedDataset]:
  """Where `last.json` named no key (written before it did), the newest complete cache of a name is current."""
  seen: set[str] = set()
  out = []
  for cached in entries:
    if cached.state == "current":
      if cached.name in seen:
        cached = dataclasses.replace(cached, state="superseded")
      seen.add(cached.name)
    out.append(cached)
  return out


def _locked(root: str, name: str, key: str) -> bool:
  """Whether a process holds a lock of this build (it is building now)."""
  for lock_path in glob.glob(os.path.join(glob.escape(root), f".{glob.escape(name)}-{key}.lock-*")):
    with open(lock_path) as lock:
      try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
      except BlockingIOError:
        return True
      fcntl.flock(lock, fcntl.LOCK_UN)
  return False


def _size(path: str) -> int:
  total = 0
  for folder, _, names in os.walk(path):
    for name in names:
      try:
        total += os.lstat(os.path.join(folder, name)).st_size
      except FileNotFoundError:  # removed while we walked
        continue
  return total
