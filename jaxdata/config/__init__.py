"""Stage 0 of the data flow: what the user asked for, validated and resolved. Nothing here reads
data; every later stage may import it.

    schema.py           the sections of a config: frozen dataclasses that validate themselves
    packing_config.py   `PackingConfig`: the packing section, its warmups and preference pairs
    image_packing.py    `ImagePacking`: packing.images, a row's patch and image budgets, and its features
    batch.py            `BatchConfig`: the global batch and its schedule
    layout.py           `StepLayout`: what a step holds (each array's dtype and per-row shape)
    ramp.py             a value that rises linearly with the step (batch ramp, sequence warmup)
    pipeline_config.py  `PipelineConfig`: the whole pipeline in one frozen, validated object
    loading.py          `load_config`: YAML (a safe loader) into a `PipelineConfig`
    safe_yaml.py        the safe loader and its limits (PyYAML imported at the first `load_config`)
    resolve.py          `DatasetSettings`: a dataset's settings after inheritance
    schedule.py         weight schedules and their safe normalisation
    validate.py         the validators every stage shares
"""

from jaxdata.config.loading import load_config
from jaxdata.config.packing_config import PackingConfig, PairPacking, WarmupPhase
from jaxdata.config.pipeline_config import PipelineConfig
from jaxdata.config.resolve import DatasetSettings
from jaxdata.config.schedule import Schedule, normalize_weights
from jaxdata.config.schema import BatchConfig, DatasetConfig, MixtureConfig, Phase

__all__ = [
  "BatchConfig",
  "DatasetConfig",
  "DatasetSettings",
  "MixtureConfig",
  "PackingConfig",
  "PairPacking",
  "Phase",
  "PipelineConfig",
  "Schedule",
  "WarmupPhase",
  "load_config",
  "normalize_weights",
]
