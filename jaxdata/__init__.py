"""jaxdata: a JAX/TPU-native input pipeline for language-model training.

The user API is the explicit list in ``__all__``: the pipeline and its
config, the state, the errors, conversion, and the helpers a loss over
packed pairs needs. Everything else is reached through the stage that owns
it (``jaxdata.sources.TokenDataset``, ``jaxdata.mixture.DocumentStream``,
``jaxdata.config.BatchConfig``, ...). Names load lazily, so
``import jaxdata`` pulls in no jax, grain, orbax, pyarrow or matplotlib
until something needs them. The package follows the data flow, each stage
importing only the ones before it::

    `config`        what the user asked for: dataclasses, YAML, schedules, validators
    `sources`       datasets on disk: ArrayRecord shards, Megatron / flat token files read in place, windows
    `vision`        images: the processor's resize, grid and tokens from an image's size; decoding, patches
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

import warnings
from typing import Any

from jaxdata._lazy import lazy_exports

__version__ = "0.3.0"

__all__ = [
  "CheckpointError",
  "ConfigError",
  "ConvertOptions",
  "DatasetError",
  "Error",
  "Execution",
  "InputFormatError",
  "Pipeline",
  "PipelineClosedError",
  "PipelineConfig",
  "PipelineState",
  "StepMaking",
  "WorkerStartError",
  "checkpoint",
  "convert",
  "from_hf_dataset",
  "from_iterable",
  "load_config",
  "open_dataset",
  "pair_attention_mask",
  "reference_logprobs",
  "sequence_logprobs",
  "testing",
  "with_built_inputs",
]

_ERRORS = "jaxdata.errors"
_SUBPACKAGES: tuple[str, ...] = ("config", "sources", "order", "mixture", "transforms", "pipeline", "conversion")
_SUBPACKAGES += ("integrations", "tools", "research", "demo", "cli")

_public_getattr, _public_dir = lazy_exports(
  __name__,
  {
    **dict.fromkeys(
      ("CheckpointError", "ConfigError", "DatasetError", "Error", "InputFormatError", "PipelineClosedError"),
      _ERRORS,
    ),
    "WorkerStartError": _ERRORS,
    **dict.fromkeys(("ConvertOptions", "convert", "from_hf_dataset", "from_iterable"), "jaxdata.conversion"),
    **dict.fromkeys(("PipelineConfig", "load_config"), "jaxdata.config"),
    **dict.fromkeys(("Execution", "StepMaking"), "jaxdata.pipeline.execution"),
    **dict.fromkeys(("Pipeline", "pair_attention_mask", "sequence_logprobs"), "jaxdata.pipeline"),
    "PipelineState": "jaxdata.checkpoint.state",
    "open_dataset": "jaxdata.sources",
    "reference_logprobs": "jaxdata.tools.reference",
    "with_built_inputs": "jaxdata.pipeline.raw_inputs",
  },
  modules={
    "checkpoint": "jaxdata.checkpoint",
    "testing": "jaxdata.testing",
    **{name: f"jaxdata.{name}" for name in _SUBPACKAGES},
  },
  package_globals=globals(),
)

# Names the top level held before 0.4, each now its stage's: they still resolve, with a DeprecationWarning
# that names the new place (until 0.5).
MOVED = {
  **dict.fromkeys(
    ("BatchConfig", "DatasetConfig", "MixtureConfig", "PackingConfig", "PairPacking", "Phase", "Schedule"),
    "jaxdata.config",
  ),
  "WarmupPhase": "jaxdata.config",
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
    ),
    "jaxdata.sources",
  ),
  **dict.fromkeys(("DatasetOrder", "ShuffleOptions"), "jaxdata.order"),
  **dict.fromkeys(("DatasetMeta", "DocBatch", "DocRef", "DocumentStream"), "jaxdata.mixture"),
  **dict.fromkeys(("StepPlanner", "pair_references", "pair_sides", "pieces_for_hosts"), "jaxdata.pipeline"),
  **dict.fromkeys(
    ("ByteTokenizer", "HuggingFaceTokenizer", "SentencePieceTokenizer", "TokenizerSpec", "load_tokenizer"),
    "jaxdata.conversion",
  ),
  **dict.fromkeys(("MixtureDataset", "PipelineDataset"), "jaxdata.integrations"),
}
MOVED_MODULES = {"exposure": "jaxdata.tools.exposure", "mixing": "jaxdata.research.mixing"}
MOVED_MODULES["online"] = "jaxdata.research.online"
_moved_getattr, _ = lazy_exports(__name__, MOVED, MOVED_MODULES)


def __getattr__(name: str) -> Any:
  if name in MOVED or name in MOVED_MODULES:
    new = f"{MOVED[name]}.{name}" if name in MOVED else MOVED_MODULES[name]
    warnings.warn(f"jaxdata.{name} is now {new} (the alias goes in jaxdata 0.5)", DeprecationWarning, stacklevel=2)
    return _moved_getattr(name)
  return _public_getattr(name)


def __dir__() -> list[str]:
  return _public_dir()
