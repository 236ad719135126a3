"""Declarative TPU slice and mesh configs, shipped as package data.

Installed as ``jaxdata.tpu_configs``. Slice files (``v5e-8.yaml`` and so on)
arrive with the mesh issue; `available_slices` lists what is installed.
"""

from __future__ import annotations

import importlib.resources

__all__ = ["available_slices"]


def available_slices() -> list[str]:
  """Names of the slice configs shipped with this install, sorted."""
  files = importlib.resources.files(__name__).iterdir()
  return sorted(f.name[: -len(".yaml")] for f in files if f.name.endswith(".yaml"))
