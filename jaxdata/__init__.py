"""jaxdata: a JAX/TPU-native input pipeline for language-model training.

The public API is the explicit list in ``__all__``; see DESIGN.md for what
each piece means.
"""

from jaxdata import checkpoint, exposure, mixing, sources
from jaxdata.config import (
    BatchConfig,
    DatasetConfig,
    MixtureConfig,
    PackingConfig,
    Phase,
    PipelineConfig,
    load_config,
)
from jaxdata.convert import ConvertOptions, convert
from jaxdata.errors import CheckpointError, ConfigError, DatasetError, InputFormatError
from jaxdata.grain_adapter import PipelineDataset
from jaxdata.mixture import DatasetMeta, DocBatch, DocRef, DocumentStream
from jaxdata.order import DatasetOrder, ShuffleOptions
from jaxdata.pipeline import Pipeline, pieces_for_hosts
from jaxdata.schedule import Schedule
from jaxdata.sources import (
    DatasetWriter,
    Manifest,
    RaggedTokens,
    ReadOptions,
    ShardInfo,
    TokenDataset,
    build_index,
)
from jaxdata.tokenizers import (
    ByteTokenizer,
    HuggingFaceTokenizer,
    SentencePieceTokenizer,
    TokenizerSpec,
    load_tokenizer,
)

__version__ = "0.1.0"

__all__ = [
    "BatchConfig",
    "ByteTokenizer",
    "CheckpointError",
    "ConfigError",
    "ConvertOptions",
    "DatasetConfig",
    "DatasetError",
    "DatasetMeta",
    "DatasetOrder",
    "DatasetWriter",
    "DocBatch",
    "DocRef",
    "DocumentStream",
    "HuggingFaceTokenizer",
    "InputFormatError",
    "Manifest",
    "MixtureConfig",
    "PackingConfig",
    "Phase",
    "Pipeline",
    "PipelineConfig",
    "PipelineDataset",
    "RaggedTokens",
    "ReadOptions",
    "Schedule",
    "SentencePieceTokenizer",
    "ShardInfo",
    "ShuffleOptions",
    "TokenDataset",
    "TokenizerSpec",
    "build_index",
    "checkpoint",
    "convert",
    "exposure",
    "load_config",
    "load_tokenizer",
    "mixing",
    "pieces_for_hosts",
    "sources",
]
