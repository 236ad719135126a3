"""`open_dataset`: the right reader for a dataset directory, whatever its format.

::

    manifest.json format   arrayrecord          -> TokenDataset
                           megatron | flat      -> FlatTokenDataset
    + window options (sampling: windows)        -> WindowView over the FlatTokenDataset
"""

from __future__ import annotations

import os

import numpy as np

from jaxdata.errors import DatasetError
from jaxdata.sources.dataset import ReadOptions, TokenDataset
from jaxdata.sources.flat import FlatTokenDataset
from jaxdata.sources.manifest import MANIFEST_NAME, Manifest
from jaxdata.sources.sampling_windows import WindowOptions, WindowView
from jaxdata.sources.shard_cache import CacheOptions
from jaxdata.sources.stores import is_remote
from jaxdata.sources.subset import RangeView, SubsetView
from jaxdata.sources.token_files import read_object

__all__ = ["Dataset", "SplitDataset", "open_dataset", "record_columns"]

Dataset = TokenDataset | FlatTokenDataset | WindowView  # what open_dataset opens
SplitDataset = Dataset | RangeView | SubsetView  # as a split sees it (mixture.holdout.split_view)


def open_dataset(
  path: str,
  read_options: ReadOptions = ReadOptions(),
  cache: CacheOptions | None = None,
  windows: WindowOptions | None = None,
  expected_format: str | None = None,
) -> Dataset:
  """Opens and checks a dataset of any format: random access to its documents' tokens.

  Args:
    path: the dataset directory, or its gs:// / s3:// prefix.
    read_options: threads and reader choices (`ReadOptions`).
    cache: where and how much of a remote ArrayRecord dataset's shards to
      keep; default: the config's defaults.
    windows: sample fixed windows of T + 1 tokens instead of documents
      (Megatron and flat datasets only: `WindowOptions`).
    expected_format: when given, the manifest's format must be this one.

  Returns:
    A `TokenDataset` (ArrayRecord), `FlatTokenDataset` (Megatron, flat) or
    a window view of one: `num_records`, `read(shard_ids, record_ids)` (a
    `RaggedTokens`), `close()` (or `with`).

  Raises:
    DatasetError: naming the file: a missing or malformed manifest, shards
      that disagree with it, windows asked of an ArrayRecord dataset.

  >>> import os, tempfile
  >>> from jaxdata import from_iterable
  >>> root = tempfile.mkdtemp()
  >>> _ = from_iterable([[1, 2, 3], [4, 5]], out=os.path.join(root, "a"))
  >>> with open_dataset(os.path.join(root, "a")) as dataset:
  ...   dataset.num_records, [doc.tolist() for doc in dataset.read([0, 0], [1, 0]).to_list()]
  (2, [[4, 5], [1, 2, 3]])
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


def record_columns(dataset: SplitDataset, records: np.ndarray) -> tuple[TokenDataset, np.ndarray]:
  """(the dataset whose `columns` hold these records' values, their indices there): a split's records
  are its base dataset's, mapped."""
  base = dataset.dataset if isinstance(dataset, (RangeView, SubsetView)) else dataset
  if not isinstance(base, TokenDataset):
    raise DatasetError(f"{dataset.path}: per-record columns are read from ArrayRecord datasets")
  return base, dataset.to_base(records) if isinstance(dataset, (RangeView, SubsetView)) else records
