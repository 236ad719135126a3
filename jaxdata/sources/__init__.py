"""Token datasets on disk: ArrayRecord shards, lengths indices, manifests."""

from jaxdata.sources.dataset import RaggedTokens, ReadOptions, TokenDataset
from jaxdata.sources.index import build_index
from jaxdata.sources.manifest import FORMAT_VERSION, MANIFEST_NAME, Manifest, ShardInfo
from jaxdata.sources.writer import DatasetWriter

__all__ = [
    "DatasetWriter",
    "FORMAT_VERSION",
    "MANIFEST_NAME",
    "Manifest",
    "RaggedTokens",
    "ReadOptions",
    "ShardInfo",
    "TokenDataset",
    "build_index",
]
