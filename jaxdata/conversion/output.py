"""The output directory of a conversion: what it may hold, and replacing a dataset without losing it.

--out DIR    new or empty: written in place
             holds a dataset: refused, or with overwrite written beside it and swapped in
               when sealed (an interruption, a full disk or a bad input leave the old one whole)
             holds other files, or lies inside an input: refused (the next conversion of that
               input would read jaxdata's own files as input)
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import tempfile
from collections.abc import Sequence

from jaxdata.sources.manifest import MANIFEST_NAME, Manifest

__all__ = ["check_output", "prepare_output", "staging_directory", "swap_in"]


def refuse_existing(out_dir: str, overwrite: bool) -> None:
  """Raises `FileExistsError` if `out_dir` holds a dataset and `overwrite` is not set."""
  if not overwrite and os.path.exists(os.path.join(out_dir, MANIFEST_NAME)):
    raise FileExistsError(f"{out_dir}: already holds a dataset ({MANIFEST_NAME}); `overwrite=True` replaces it")


def check_output(out_dir: str, inputs: Sequence[str], overwrite: bool) -> None:
  """Refuses an output directory that lies inside an input, holds files that are not a jaxdata
  dataset's, or holds a dataset (unless `overwrite`); every error names the directory."""
  out = os.path.realpath(out_dir)
  for given in inputs:
    if "://" in given or any(c in given for c in "*?["):
      continue  # remote inputs and globs: the files they match are checked by the converter
    root = os.path.realpath(given)
    if os.path.isdir(root) and (out == root or out.startswith(root + os.sep)):
      raise ValueError(
        f"--out {out_dir}: lies inside the input {given}; the next conversion of {given} would read the "
        "dataset's own files as input: write it elsewhere"
      )
  refuse_existing(out_dir, overwrite)
  if not os.path.isdir(out_dir):
    return
  own = set()
  if os.path.exists(os.path.join(out_dir, MANIFEST_NAME)):
    manifest = Manifest.load(out_dir)
    own = {MANIFEST_NAME, *(n for s in manifest.shards for n in s.files())}
  # hidden files count too (an overwrite swaps the whole directory): only jaxdata's own scratch is skipped
  others = sorted(n for n in os.listdir(out_dir) if n not in own and not n.startswith(".jaxdata"))
  if others:
    raise FileExistsError(
      f"--out {out_dir}: holds files that are not a jaxdata dataset ({', '.join(others[:3])}"
      f"{', ...' if len(others) > 3 else ''}); give a new or empty directory"
    )


def prepare_output(out_dir: str, overwrite: bool) -> None:
  """Refuses a directory that holds a dataset, unless `overwrite` (then only jaxdata's files leave)."""
  if not os.path.exists(os.path.join(out_dir, MANIFEST_NAME)):
    return
  refuse_existing(out_dir, overwrite)
  manifest = Manifest.load(out_dir)
  os.remove(os.path.join(out_dir, MANIFEST_NAME))  # first: a half-removed dataset is never taken for whole
  for shard in manifest.shards:
    for name in shard.files():
      if os.path.exists(os.path.join(out_dir, name)):
        os.remove(os.path.join(out_dir, name))


def staging_directory(out_dir: str) -> str:
  """A new hidden directory beside `out_dir` (its real path: a symlink's target; same file system) to write
  a replacement dataset into, with `out_dir`'s permissions (mkdtemp would leave it readable by its owner only)."""
  real = os.path.realpath(out_dir)
  staged = tempfile.mkdtemp(prefix=f".{os.path.basename(real)}.jaxdata-new-", dir=os.path.dirname(real))
  with contextlib.suppress(OSError):
    os.chmod(staged, os.stat(real).st_mode & 0o7777)
  return staged


_RENAME_EXCHANGE = 2  # linux/fs.h


def _exchange(a: str, b: str) -> bool:
  """Swaps two directories in one atomic step (Linux renameat2); False where that is not available."""
  try:
    libc = ctypes.CDLL(None, use_errno=True)
    renameat2 = libc.renameat2
  except (OSError, AttributeError):
    return False
  at_cwd = -100
  return renameat2(at_cwd, os.fsencode(a), at_cwd, os.fsencode(b), _RENAME_EXCHANGE) == 0


def swap_in(staged: str, out_dir: str) -> None:
  """Puts the sealed dataset in `staged` at `out_dir` and removes the one it replaces: one atomic exchange
  where the system has it, else two renames (the old dataset stays whole beside, under a hidden name,
  until the new one is in place)."""
  real = os.path.realpath(out_dir)  # a symlinked --out: the dataset is replaced where the link points
  if not os.path.isdir(real):
    os.rename(staged, real)
    return
  try:
    if not _exchange(staged, real):
      old = staged + ".old"
      os.rename(real, old)
      os.rename(staged, real)
      staged = old
  except OSError as e:  # the old dataset stays as it was; the new one is not left behind
    shutil.rmtree(staged, ignore_errors=True)
    raise OSError(
      f"--out {out_dir}: the new dataset could not replace the old one ({e.strerror}); the old one is kept"
    ) from e
  with contextlib.suppress(OSError):
    shutil.rmtree(staged)
