"""Small file helpers: hashing, and directories jaxdata may delete because it made them.

A command that clears a directory before reusing it (the demo's cache and
checkpoints) first checks the marker it wrote when it created the directory:
a directory it did not create is never deleted.

>>> import tempfile, os
>>> root = tempfile.mkdtemp()
>>> claim_directory(os.path.join(root, "cache"), "jaxdata demo")
>>> clear_claimed(os.path.join(root, "cache"), "jaxdata demo")
>>> open(os.path.join(root, "thesis.txt"), "w").close()
>>> claim_directory(root, "jaxdata demo")
Traceback (most recent call last):
...
FileExistsError: ...: exists, is not empty and was not created by jaxdata demo; choose a new or empty directory
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
from collections.abc import Mapping

import numpy as np

from jaxdata.errors import DatasetError

__all__ = [
  "check_inside",
  "check_name",
  "claim_directory",
  "clear_claimed",
  "file_sha256",
  "index_sha256",
  "replace_arrays",
  "sample_sha256",
]

SAMPLE_BLOCKS = 16  # blocks of 4 KiB, evenly spaced, first and last included
SAMPLE_BLOCK = 4096

MARKER = ".jaxdata-created-by"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")


def check_name(name: object, where: str) -> str:
  """A dataset name that is safe as a file-name prefix: letters, digits,
  '_', '.', '-', starting with a letter or digit, at most 128 characters
  (so `--name ../../x` cannot write outside the output directory)."""
  if not isinstance(name, str) or not _NAME.fullmatch(name):
    raise ValueError(
      f"{where}: {str(name)[:80]!r} is not a dataset name (letters, digits, '_', '.', '-'; "
      "starting with a letter or digit; at most 128 characters)"
    )
  return name


def file_sha256(path: str) -> str:
  """Hex sha256 of a file's bytes, read in 1 MiB blocks."""
  digest = hashlib.sha256()
  with open(path, "rb") as f:
    for block in iter(lambda: f.read(1 << 20), b""):
      digest.update(block)
  return digest.hexdigest()


def check_inside(path: str, root: str, what: str) -> None:
  """A `DatasetError` for a file that resolves (through links) outside `root`: a dataset's files lie inside it."""
  real_root = os.path.realpath(root)
  if os.path.commonpath([real_root, os.path.realpath(path)]) != real_root:
    raise DatasetError(f"{path}: a link that resolves outside {what}; a dataset's files must lie inside it")


def index_sha256(lengths: np.ndarray, starts: np.ndarray) -> str:
  """Hex sha256 of a flat shard's document index: its lengths (as little-endian
  uint32) and starts (int64). Another order, start or length changes it."""
  digest = hashlib.sha256()
  for values, dtype in ((lengths, "<u4"), (starts, "<i8")):
    digest.update(np.ascontiguousarray(values, dtype=dtype).tobytes())
  return digest.hexdigest()


def replace_arrays(arrays: Mapping[str, np.ndarray]) -> list[str]:
  """Writes every `.npy` file of `arrays` (path -> values) next to its place,
  then renames them all into place; returns the paths. Nothing is replaced
  unless every file was written, and a process that has an old file open or
  memory-mapped keeps reading the old file (a rename, never a truncation)."""
  temporary = {path: f"{path}.tmp-{os.getpid()}.npy" for path in arrays}
  try:
    for path, values in arrays.items():
      np.save(temporary[path], values)
  except BaseException:  # re-raised: the files in place stay untouched
    for tmp in temporary.values():
      if os.path.exists(tmp):
        os.remove(tmp)
    raise
  for path, tmp in temporary.items():
    os.replace(tmp, path)
  return list(arrays)


def sample_sha256(path: str) -> str:
  """A cheap identity of a file: sha256 of its size and of 16 evenly spaced
  4 KiB blocks (64 KiB read whatever the size). A shard swapped for another
  file, even one of the same size and record lengths, changes it."""
  size = os.path.getsize(path)
  digest = hashlib.sha256(str(size).encode())
  with open(path, "rb") as f:
    last = max(size - SAMPLE_BLOCK, 0)
    for i in range(SAMPLE_BLOCKS):
      f.seek(last * i // (SAMPLE_BLOCKS - 1))
      digest.update(f.read(SAMPLE_BLOCK))
  return digest.hexdigest()


def is_claimed(path: str, owner: str) -> bool:
  """Whether `path` is a directory that `owner` created (its marker says so)."""
  marker = os.path.join(path, MARKER)
  if not os.path.isfile(marker) or os.path.islink(marker):
    return False
  with open(marker, encoding="utf-8", errors="replace") as f:
    return f.read(256) == owner


def claim_directory(path: str, owner: str) -> None:
  """Creates `path` for `owner` (or adopts an empty directory) and marks it;
  a non-empty directory that `owner` did not create is refused."""
  if os.path.lexists(path) and not os.path.isdir(path):
    raise FileExistsError(f"{path}: exists and is not a directory")
  if os.path.isdir(path) and not is_claimed(path, owner) and os.listdir(path):
    raise FileExistsError(
      f"{path}: exists, is not empty and was not created by {owner}; choose a new or empty directory"
    )
  os.makedirs(path, exist_ok=True)
  with open(os.path.join(path, MARKER), "w", encoding="utf-8") as f:
    f.write(owner)


def clear_claimed(path: str, owner: str) -> None:
  """Deletes everything in `path` but its marker, if `owner` created it;
  otherwise refuses (FileExistsError) and deletes nothing."""
  if not is_claimed(path, owner):
    raise FileExistsError(f"{path}: was not created by {owner}; not deleting it (choose another directory)")
  for entry in os.listdir(path):
    if entry == MARKER:
      continue
    full = os.path.join(path, entry)
    if os.path.isdir(full) and not os.path.islink(full):
      shutil.rmtree(full)
    else:
      os.remove(full)
