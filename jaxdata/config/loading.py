"""`load_config`: a YAML file (safe loader) into a validated `PipelineConfig`."""

from __future__ import annotations

import os

import yaml

from jaxdata.config.pipeline_config import PipelineConfig
from jaxdata.errors import ConfigError

__all__ = ["load_config"]


def load_config(path: str) -> PipelineConfig:
  """Reads a YAML config with a safe loader and validates it.

  Dataset paths are relative to the config file's directory. Errors name the
  file and the offending key or value.
  """
  try:
    with open(path) as f:
      raw = yaml.safe_load(f)
  except yaml.YAMLError as e:
    raise ConfigError(f"{path}: not valid YAML ({e})") from e
  try:
    return PipelineConfig.from_dict(raw, base_dir=os.path.dirname(os.path.abspath(path)))
  except ConfigError as e:
    raise ConfigError(f"{path}: {e}") from e
