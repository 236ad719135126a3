"""Which files are a conversion's inputs: `expand_inputs`, `file_sizes` (their formats: formats.py).

Files, directories (walked) and globs, local or in gs:// / s3://, become one sorted list; a directory
walk skips hidden entries and any cache directory inside (a CACHEDIR.TAG: jaxdata's raw-input
caches)::

    corpus/            -> corpus/a.jsonl, corpus/b.parquet.zst, ...    (corpus/cache/ with a CACHEDIR.TAG: skipped)
"""

from __future__ import annotations

import glob
import os
import re
from collections.abc import Sequence

from jaxdata.conversion.remote_inputs import list_remote, matches, remote_sizes
from jaxdata.sources.stores import is_remote

__all__ = ["CACHE_TAG", "expand_inputs", "file_sizes", "is_compressed"]

COMPRESSED_SUFFIXES = (".gz", ".zst")


def _hidden(name: str) -> bool:
  return name.startswith(".") or name == "__pycache__"


CACHE_TAG = "CACHEDIR.TAG"  # a cache directory's tag (jaxdata's raw-input caches have one): never inputs


def _in_a_cache(path: str, top: str) -> bool:
  """Whether a directory between `top` (excluded) and `path` is tagged as a cache."""
  top = os.path.abspath(top)
  folder = os.path.dirname(os.path.abspath(path))
  while folder.startswith(top + os.sep) and folder != top:
    if os.path.isfile(os.path.join(folder, CACHE_TAG)):
      return True
    folder = os.path.dirname(folder)
  return False


def _glob_top(pattern: str) -> str:
  """The directory a glob's literal part names (where its wildcards begin)."""
  literal = re.split(r"[*?\[]", pattern, maxsplit=1)[0]
  return os.path.dirname(literal) or "."


def expand_inputs(inputs: Sequence[str], include: Sequence[str] = (), exclude: Sequence[str] = ()) -> list[str]:
  """Files, directories (recursively) and globs -> sorted unique file list.

  Walking a directory skips hidden files and directories, `__pycache__`, and a cache directory inside
  (one with a CACHEDIR.TAG: jaxdata's raw-input caches); a glob skips the files in such a directory too.
  `include` / `exclude` are globs matched against each file's path and its
  name (``*.jsonl``, ``**/test/*``): a file is kept if it matches an include
  (when any is given) and no exclude.
  """
  found: list[str] = []
  for item in inputs:
    if is_remote(item):  # gs://, s3://: through Beam's file systems
      found.extend(list_remote(item))
    elif os.path.isdir(item):
      for root, dirs, names in os.walk(item):  # a cache inside (a tagged directory) is not walked
        dirs[:] = [d for d in dirs if not _hidden(d) and not os.path.isfile(os.path.join(root, d, CACHE_TAG))]
        found.extend(os.path.join(root, n) for n in names if not _hidden(n))
    elif os.path.isfile(item):
      found.append(item)
    else:
      globbed = [m for m in glob.glob(item, recursive=True) if os.path.isfile(m)]
      globbed = [m for m in globbed if not _in_a_cache(m, _glob_top(item))]
      if not globbed:
        raise FileNotFoundError(f"input: {item} does not exist")
      found.extend(globbed)
  kept = [f for f in found if (not include or matches(f, include)) and not matches(f, exclude)]
  # Sorting makes the output independent of the order files were listed in.
  return sorted(set(kept))


def is_compressed(path: str) -> bool:
  return path.endswith(COMPRESSED_SUFFIXES)


def file_sizes(paths: Sequence[str]) -> list[int]:
  """Bytes of every input (local or remote)."""
  remote = [p for p in paths if is_remote(p)]
  sizes = dict(zip(remote, remote_sizes(remote))) if remote else {}
  return [sizes[p] if p in sizes else os.path.getsize(p) for p in paths]
