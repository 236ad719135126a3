"""jaxdata: a JAX/TPU-native input pipeline for language-model training.

The public API is the explicit list in ``__all__``. Names load lazily, so
``import jaxdata`` pulls in no jax, grain, orbax, pyarrow or matplotlib
until something needs them. The package follows the data flow, each stage
importing only the ones before it::

    `config`        what the user asked for: dataclasses, YAML, schedules, validators
    `sources`       datasets on disk: ArrayRecord shards, Megatron / flat token files read in place, windows
    `order`         each dataset's order per pass: keyed permutations, cursors
    `mixture`       the mixture as one stream of documents: interleave strategies
    `transforms`    packing documents into rows, planned from lengths; row assembly
    `checkpoint`    the versioned state, its fingerprint, Orbax args
    `pipeline`      step planning, reading, prefetch, sharding: `Pipeline`
    `conversion`    raw text into datasets (jaxdata convert, from_iterable)
    `integrations`  other tools' APIs: Grain, MaxText, Megatron, Levanter
    `tools`, `demo`, `research`, `cli`, `testing`   built on the stages above
    `errors`        `Error`, the base of every error jaxdata raises, and its kinds
    `tpu_configs`   the TPU slice YAML files (data, read by `jaxdata.pipeline.slices`)

docs/ in the repository describes the configuration, the state, the order
and its guarantees, and a training loop with save and restore.
"""

from jaxdata._lazy import lazy_exports

__version__ = "0.3.0"

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
  "DocumentBoundaries",
  "DocBatch",
  "DocRef",
  "DocumentLengths",
  "DocumentStream",
  "Error",
  "Execution",
  "HuggingFaceTokenizer",
  "FlatTokenDataset",
  "InputFormatError",
  "Manifest",
  "MixtureDataset",
  "MixtureConfig",
  "PackingConfig",
  "Phase",
  "PairPacking",
  "Pipeline",
  "PipelineConfig",
  "PipelineClosedError",
  "PipelineDataset",
  "PipelineState",
  "RaggedTokens",
  "ReadOptions",
  "Schedule",
  "SentencePieceTokenizer",
  "ShardInfo",
  "ShuffleOptions",
  "StepMaking",
  "StepPlanner",
  "TokenDataset",
  "TokenizerSpec",
  "WarmupPhase",
  "WindowOptions",
  "WorkerStartError",
  "build_flat_index",
  "build_index",
  "checkpoint",
  "convert",
  "exposure",
  "from_hf_dataset",
  "from_iterable",
  "load_config",
  "load_tokenizer",
  "mixing",
  "open_dataset",
  "pair_attention_mask",
  "pair_references",
  "pair_sides",
  "pieces_for_hosts",
  "reference_logprobs",
  "sequence_logprobs",
  "with_built_inputs",
  "sources",
  "testing",
]

_CONFIG = "jaxdata.config"
_ERRORS = "jaxdata.errors"
_SOURCES = "jaxdata.sources"
_TOKENIZERS = "jaxdata.conversion.tokenizers"

__getattr__, __dir__ = lazy_exports(
  __name__,
  {
    **dict.fromkeys(
      (
        "BatchConfig",
        "DatasetConfig",
        "MixtureConfig",
        "PackingConfig",
        "Phase",
        "PipelineConfig",
        "Schedule",
        "WarmupPhase",
        "load_config",
      ),
      _CONFIG,
    ),
    **dict.fromkeys(
      (
        "CheckpointError",
        "ConfigError",
        "DatasetError",
        "Error",
        "InputFormatError",
        "PipelineClosedError",
        "WorkerStartError",
      ),
      _ERRORS,
    ),
    **dict.fromkeys(
      (
        "DatasetWriter",
        "DocumentBoundaries",
        "DocumentLengths",
        "FlatTokenDataset",
        "Manifest",
        "RaggedTokens",
        "ReadOptions",
        "ShardInfo",
        "TokenDataset",
        "WindowOptions",
        "build_flat_index",
        "build_index",
        "open_dataset",
      ),
      _SOURCES,
    ),
    **dict.fromkeys(
      ("ByteTokenizer", "HuggingFaceTokenizer", "SentencePieceTokenizer", "TokenizerSpec", "load_tokenizer"),
      _TOKENIZERS,
    ),
    "ConvertOptions": "jaxdata.conversion.options",
    "from_hf_dataset": "jaxdata.conversion.from_python",
    "from_iterable": "jaxdata.conversion.from_python",
    "convert": "jaxdata.conversion.local_runner",
    "DatasetOrder": "jaxdata.order.dataset_order",
    "ShuffleOptions": "jaxdata.order.dataset_order",
    **dict.fromkeys(("DocBatch", "DocRef"), "jaxdata.mixture.documents"),
    **dict.fromkeys(("DatasetMeta", "DocumentStream"), "jaxdata.mixture.stream"),
    "Pipeline": "jaxdata.pipeline.pipeline",
    "PairPacking": "jaxdata.config.schema",
    "pair_attention_mask": "jaxdata.pipeline.pair_logprobs",
    "pair_references": "jaxdata.pipeline.pair_logprobs",
    "pair_sides": "jaxdata.pipeline.pair_logprobs",
    "reference_logprobs": "jaxdata.tools.reference",
    "sequence_logprobs": "jaxdata.pipeline.pair_logprobs",
    "with_built_inputs": "jaxdata.pipeline.raw_inputs",
    "Execution": "jaxdata.pipeline.execution",
    "StepMaking": "jaxdata.pipeline.execution",
    "PipelineState": "jaxdata.checkpoint.state",
    "PipelineDataset": "jaxdata.integrations.grain",
    "MixtureDataset": "jaxdata.integrations.grain_mixture",
    "StepPlanner": "jaxdata.pipeline.planner",
    "pieces_for_hosts": "jaxdata.pipeline.planner",
  },
  modules={
    "checkpoint": "jaxdata.checkpoint",
    "exposure": "jaxdata.tools.exposure",
    "mixing": "jaxdata.research.mixing",
    "online": "jaxdata.research.online",
    "sources": "jaxdata.sources",
    "testing": "jaxdata.testing",
  },
  package_globals=globals(),
)
