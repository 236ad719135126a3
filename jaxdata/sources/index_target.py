"""Where an index is written: one dataset directory for the files, and no manifest there unless rebuilding.

The rules `build_index` (ArrayRecord) and `build_flat_index` (Megatron, flat
files) share. Errors name the parameter; the CLI says the flag that sets it.

>>> dataset_directory(["/data/web/a.bin", "/data/web/b.bin"], None, "inputs")
'/data/web'
>>> token_dtype("uint32").name
'uint32'
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from jaxdata.sources.fileutil import replace_arrays
from jaxdata.sources.manifest import MANIFEST_NAME, TOKEN_DTYPES, Manifest

__all__ = ["dataset_directory", "refuse_existing_index", "save_index", "token_dtype"]


def token_dtype(dtype: Any) -> np.dtype:
  """`dtype` as a NumPy dtype, or a `ValueError` naming it when it is not a token type."""
  try:
    found = np.dtype(dtype)
  except TypeError as e:
    raise ValueError(f"dtype: {dtype!r} is not {' or '.join(TOKEN_DTYPES)}") from e
  if found.name not in TOKEN_DTYPES:
    raise ValueError(f"dtype: {dtype!r} is not {' or '.join(TOKEN_DTYPES)}")
  return found


def dataset_directory(paths: Sequence[str], out_dir: str | None, what: str) -> str:
  """`out_dir` (absolute), or the one directory `paths` lie in; files in several need an `out_dir`."""
  directories = sorted({os.path.dirname(os.path.abspath(p)) for p in paths})
  if out_dir is None and len(directories) > 1:
    shown = ", ".join(directories[:3]) + (", ..." if len(directories) > 3 else "")
    raise ValueError(
      f"{what}: they lie in {len(directories)} directories ({shown}); a dataset is one directory: "
      "give `out_dir` to make them one, or index each directory as its own dataset "
      "(`group_by_directory`)"
    )
  return os.path.abspath(out_dir if out_dir is not None else os.path.commonpath(directories))


def refuse_existing_index(out_dir: str, force: bool) -> None:
  """A `FileExistsError` when `out_dir` already has a manifest and `force` is not set."""
  if os.path.exists(os.path.join(out_dir, MANIFEST_NAME)) and not force:
    raise FileExistsError(f"{out_dir}: already has a {MANIFEST_NAME}; `force=True` rebuilds it")


def save_index(manifest: Manifest, out_dir: str, arrays: Mapping[str, np.ndarray]) -> None:
  """Writes the index's arrays (path -> values), then the manifest; on an error removes what this call
  wrote, nothing else. Arrays are renamed into place, never rewritten: a run reading the old files keeps
  reading them."""
  written = replace_arrays(arrays)
  try:
    os.makedirs(out_dir, exist_ok=True)
    manifest.save(out_dir)
  except BaseException:
    for file_name in written:
      os.remove(file_name)
    raise
