"""The output directory of a conversion: refused when it holds a dataset, cleared of jaxdata's files on overwrite."""

from __future__ import annotations

import os

from jaxdata.sources.manifest import MANIFEST_NAME, Manifest

__all__ = ["prepare_output", "refuse_existing"]


def refuse_existing(out_dir: str, overwrite: bool) -> None:
  """Raises `FileExistsError` if `out_dir` holds a dataset and `overwrite` is not set."""
  if not overwrite and os.path.exists(os.path.join(out_dir, MANIFEST_NAME)):
    raise FileExistsError(f"{out_dir}: already holds a dataset ({MANIFEST_NAME}); `overwrite=True` replaces it")


def prepare_output(out_dir: str, overwrite: bool) -> None:
  """Refuses a directory that holds a dataset, unless `overwrite` (then only jaxdata's files leave)."""
  if not os.path.exists(os.path.join(out_dir, MANIFEST_NAME)):
    return
  refuse_existing(out_dir, overwrite)
  manifest = Manifest.load(out_dir)
  os.remove(os.path.join(out_dir, MANIFEST_NAME))  # first: a half-removed dataset is never taken for whole
  for shard in manifest.shards:
    for name in (shard.path, shard.lengths_path):
      if os.path.exists(os.path.join(out_dir, name)):
        os.remove(os.path.join(out_dir, name))
