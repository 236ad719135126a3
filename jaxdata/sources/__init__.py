"""Stage 1 of the data flow: token datasets on disk.

`manifest` (what a dataset directory holds, checked on open), `dataset`
(`TokenDataset`: validated, batched reads of ArrayRecord shards), `flat`
(`FlatTokenDataset`: Megatron and flat token files read in place, through
`token_files` and `flat_format`), `windows` (`WindowView`: T + 1-token
windows of a flat dataset), `opening` (`open_dataset`: the right one for a
directory), `writer` (`DatasetWriter`), `index` / `flat_index` (metadata for
files other tools wrote), `lengths` (`DocumentLengths`: memory-mapped
lengths), `remote` / `stores` (object storage) and `fileutil`.
Depends on nothing but `jaxdata.errors`.
"""

from jaxdata.sources.dataset import RaggedTokens, ReadOptions, TokenDataset
from jaxdata.sources.flat import FlatTokenDataset
from jaxdata.sources.flat_index import build_flat_index
from jaxdata.sources.index import build_index
from jaxdata.sources.lengths import DocumentLengths
from jaxdata.sources.manifest import FORMAT_VERSION, MANIFEST_NAME, Manifest, ShardInfo
from jaxdata.sources.opening import open_dataset
from jaxdata.sources.sampling_windows import WindowOptions, WindowView
from jaxdata.sources.writer import DatasetWriter

__all__ = [
  "DatasetWriter",
  "DocumentLengths",
  "FORMAT_VERSION",
  "FlatTokenDataset",
  "MANIFEST_NAME",
  "Manifest",
  "RaggedTokens",
  "ReadOptions",
  "ShardInfo",
  "TokenDataset",
  "WindowOptions",
  "WindowView",
  "build_flat_index",
  "build_index",
  "open_dataset",
]
