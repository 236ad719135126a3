"""jaxdata: a JAX/TPU-native input pipeline for language-model training.

The public API is the explicit list in ``__all__``; see DESIGN.md for what
each piece means.
"""

from jaxdata import sources
from jaxdata.convert import ConvertOptions, convert
from jaxdata.errors import ConfigError, DatasetError, InputFormatError
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
    "ByteTokenizer",
    "ConfigError",
    "ConvertOptions",
    "DatasetError",
    "DatasetWriter",
    "HuggingFaceTokenizer",
    "InputFormatError",
    "Manifest",
    "RaggedTokens",
    "ReadOptions",
    "SentencePieceTokenizer",
    "ShardInfo",
    "TokenDataset",
    "TokenizerSpec",
    "build_index",
    "convert",
    "load_tokenizer",
    "sources",
]
