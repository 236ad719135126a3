"""Stage 0 of the data flow: what the user asked for, validated and resolved.

Frozen dataclasses (`schema`, `pipeline_config`), YAML loading (`loading`),
per-dataset settings after inheritance (`resolve`), weight schedules
(`schedule`) and the validators every stage shares (`validate`). Nothing
here reads data; every later stage may import it.
"""

from jaxdata.config.loading import load_config
from jaxdata.config.pipeline_config import PipelineConfig
from jaxdata.config.resolve import DatasetSettings
from jaxdata.config.schedule import Schedule, normalize_weights
from jaxdata.config.schema import (
  BatchConfig,
  DatasetConfig,
  MixtureConfig,
  PackingConfig,
  Phase,
  WarmupPhase,
)

__all__ = [
  "BatchConfig",
  "DatasetConfig",
  "DatasetSettings",
  "MixtureConfig",
  "PackingConfig",
  "Phase",
  "PipelineConfig",
  "Schedule",
  "WarmupPhase",
  "load_config",
  "normalize_weights",
]
