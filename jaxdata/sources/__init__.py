"""Stage 1 of the data flow: token datasets on disk. Depends on nothing but `jaxdata.errors`.

Its modules::

    manifest.py          what a dataset directory holds (manifest.json), checked on open
    records.py           `ShardedRecords`: what every reader shares, records numbered across shards
    dataset.py           `TokenDataset`: validated, batched reads of ArrayRecord shards
    read_options.py      `ReadOptions`: how a `TokenDataset` reads (threads, reader options, flat files' reader)
    ragged.py            `RaggedTokens`: documents as one flat id array and offsets (every reader's batch)
    masked.py            fine-tuning records: ids, then one trained-token mask byte per id
    image_records.py     image-text records: a masked record, then the example's images as stored
    columns.py           per-record columns beside a shard (a preference pair's side and prompt lengths)
    record_files.py      ArrayRecord and TFRecord files of serialized records
    flat.py              `FlatTokenDataset`: Megatron and flat token files read in place
    flat_format.py       where documents begin in files other tools wrote
    boundaries.py        `DocumentBoundaries`: the rule that says where a flat file's documents begin
    token_files.py       token ranges out of flat files (memory maps, tensorstore kvstores)
    block_sums.py        block checksums of a token file, checked on every range read
    sampling_windows.py  `WindowView`: T + 1-token windows of a flat dataset
    subset.py            `SubsetView` / `RangeView`: a dataset seen through some of its records
    opening.py           `open_dataset`: the right reader for a directory
    writer.py            `DatasetWriter`: documents in, a dataset directory out
    index.py             `build_index`: a manifest for existing token shards
    flat_index.py        `build_flat_index`: metadata for Megatron and flat token files
    index_target.py      where an index is written
    lengths.py           `DocumentLengths`: memory-mapped document lengths
    remote.py            `RemoteShards`: a dataset in object storage, read through the shard cache
    shard_cache.py       `ShardCache`: the bounded local cache of remote shards, pinned while read
    stores.py            buckets: `gs://` and `s3://` paths, clients, retries
    parallelism.py       how many requests to keep in flight to a bucket
    fileutil.py          hashing, and directories jaxdata may delete
"""

from jaxdata.sources.boundaries import DocumentBoundaries
from jaxdata.sources.dataset import ReadOptions, TokenDataset
from jaxdata.sources.flat import FlatTokenDataset
from jaxdata.sources.flat_index import build_flat_index
from jaxdata.sources.index import build_index
from jaxdata.sources.lengths import DocumentLengths
from jaxdata.sources.manifest import FORMAT_VERSION, MANIFEST_NAME, Manifest, ShardInfo
from jaxdata.sources.opening import open_dataset
from jaxdata.sources.ragged import RaggedTokens
from jaxdata.sources.sampling_windows import WindowOptions, WindowView
from jaxdata.sources.writer import DatasetWriter

__all__ = [
  "DatasetWriter",
  "DocumentBoundaries",
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
