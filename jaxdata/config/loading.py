"""`load_config`: a YAML file into a validated `PipelineConfig`, safely.

The loader is PyYAML's safe loader with limits for hostile files:

    size        at most 1 MiB, UTF-8 (a config is a few KB)
    aliases     at most 64 `*alias` uses (an alias bomb of 641 bytes expands past memory)
    keys        a key given twice in one mapping is an error (not "the last wins")
    timestamps  stay strings (2026-01-01 is not a date object)
    types       !!set, !!binary, !!omap and !!pairs are refused (a config is JSON-shaped)

>>> import tempfile, os
>>> path = os.path.join(tempfile.mkdtemp(), "twice.yaml")
>>> _ = open(path, "w").write("seed: 1\\nseed: 2\\n")
>>> load_config(path)
Traceback (most recent call last):
...
jaxdata.errors.ConfigError: ...twice.yaml: line 2: key 'seed' is given twice in one mapping
"""

from __future__ import annotations

import os

from jaxdata._lazy import lazy_module
from jaxdata.config.pipeline_config import PipelineConfig
from jaxdata.errors import ConfigError

__all__ = ["load_config"]

MAX_CONFIG_BYTES = 1 << 20
safe_yaml = lazy_module("jaxdata.config.safe_yaml")  # PyYAML is imported at the first load_config


def load_config(path: str) -> PipelineConfig:
  """Reads a pipeline config from YAML (a safe loader: no tags, no objects) and validates it.

  Args:
    path: the YAML file (docs/configuration.md lists every key). Dataset
      paths in it are relative to its directory.

  Returns:
    The frozen, validated `PipelineConfig`.

  Raises:
    ConfigError: naming the file and the key or value at fault (an unknown
      key gets the allowed ones and a did-you-mean); not UTF-8, not YAML,
      non-JSON YAML types, a file over 1 MiB.
    OSError: the file cannot be read.

  >>> import os, tempfile
  >>> from jaxdata import from_iterable
  >>> root = tempfile.mkdtemp()
  >>> _ = from_iterable(["hello world", "more text"], out=os.path.join(root, "web"))
  >>> with open(os.path.join(root, "pipeline.yaml"), "w") as f:
  ...   _ = f.write("datasets: [{name: web, path: web}]\\nmixture: {weights: {web: 1}}\\n")
  >>> cfg = load_config(os.path.join(root, "pipeline.yaml"))
  >>> cfg.names, cfg.datasets[0].path == os.path.join(root, "web")
  (('web',), True)
  """
  with open(path, "rb") as f:
    blob = f.read(MAX_CONFIG_BYTES + 1)
  if len(blob) > MAX_CONFIG_BYTES:
    raise ConfigError(f"{path}: larger than {MAX_CONFIG_BYTES >> 10} KiB; not a pipeline config")
  try:
    text = blob.decode("utf-8")
  except UnicodeDecodeError as e:
    raise ConfigError(f"{path}: not UTF-8 text (byte {e.start})") from e
  try:
    raw = safe_yaml.parse_config_text(text)
  except ConfigError as e:
    raise ConfigError(f"{path}: {e}") from e
  except RecursionError as e:
    raise ConfigError(f"{path}: nested too deeply to be a pipeline config") from e
  try:
    return PipelineConfig.from_dict(raw, base_dir=os.path.dirname(os.path.abspath(path)))
  except ConfigError as e:
    raise ConfigError(f"{path}: {e}") from e
