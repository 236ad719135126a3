"""`open_dataset`: the right reader for a dataset directory, whatever its format.

::

    manifest.json format   arrayrecord          -> TokenDataset
                           megatron | flat      -> FlatTokenDataset
    + window options (sampling: windows)        -> WindowView over the FlatTokenDataset
"""

from __future__ import annotations

import os

from jaxdata.errors import DatasetError
from jaxdata.sources.dataset import ReadOptions, TokenDataset
from jaxdata.sources.flat import FlatTokenDataset
from jaxdata.sources.manifest import MANIFEST_NAME, Manifest
from jaxdata.sources.remote import CacheOptions
from jaxdata.sources.sampling_windows import WindowOptions, WindowView
from jaxdata.sources.stores import is_remote
from jaxdata.sources.token_files import read_object

__all__ = ["Dataset", "open_dataset"]

Dataset = TokenDataset | FlatTokenDataset | WindowView


def open_dataset(
  path: str,
  read_options: ReadOptions = ReadOptions(),
  cache: CacheOptions | None = None,
  windows: WindowOptions | None = None,
  expected_format: str | None = None,
) -> Dataset:
  """Opens and checks the dataset at `path` (a directory or gs:// / s3:// prefix).

  `expected_format`, when given, must match the manifest's format.
  """
  path = os.fspath(path)
  if is_remote(path):
    url = f"{path.rstrip('/')}/{MANIFEST_NAME}"
    manifest = Manifest.parse(read_object(path, MANIFEST_NAME), url)
  else:
    manifest = Manifest.load(path)
  if expected_format is not None and manifest.format != expected_format:
    raise DatasetError(f"{path}: the config says format {expected_format}, its manifest.json says {manifest.format}")
  if manifest.format == "arrayrecord":
    if windows is not None:
      raise DatasetError(
        f"{path}: sampling: windows reads token ranges in place, which needs a megatron or flat "
        "dataset (`jaxdata index --format ...`); this one is arrayrecord"
      )
    return TokenDataset(path, read_options, cache)
  dataset = FlatTokenDataset(path, read_options, manifest)
  if windows is None:
    return dataset
  try:
    return WindowView(dataset, windows)
  except BaseException:  # re-raised: the files opened so far are closed first
    dataset.close()
    raise
