"""Stage 1 of the data flow: token datasets on disk.

`manifest` (what a dataset directory holds, checked on open), `dataset`
(`TokenDataset`: validated, batched reads), `writer` (`DatasetWriter`),
`index` (lengths index + manifest for existing shards), `lengths`
(`DocumentLengths`: memory-mapped lengths) and `fileutil`.
Depends on nothing but `jaxdata.errors`.
"""

from jaxdata.sources.dataset import RaggedTokens, ReadOptions, TokenDataset
from jaxdata.sources.index import build_index
from jaxdata.sources.lengths import DocumentLengths
from jaxdata.sources.manifest import FORMAT_VERSION, MANIFEST_NAME, Manifest, ShardInfo
from jaxdata.sources.writer import DatasetWriter

__all__ = [
    "DatasetWriter",
    "DocumentLengths",
    "FORMAT_VERSION",
    "MANIFEST_NAME",
    "Manifest",
    "RaggedTokens",
    "ReadOptions",
    "ShardInfo",
    "TokenDataset",
    "build_index",
]
