"""TPU slice configs (`tpu_configs/*.yaml`, installed as `jaxdata.tpu_configs`) and their meshes.

A slice file says how many chips and hosts a slice has and its default mesh::

    name: v5p-128            chips: 64   hosts: 16   chips_per_host: 4   topology: "4x4x4"
    mesh: {axes: [data, fsdp, tensor], shape: [16, 4, 1]}
    data_axes: [data, fsdp]  # the batch rows are sharded over these

>>> spec = load_slice("v5p-128")
>>> spec.chips, spec.rows_per_host(1024)
(64, 64)
"""

from __future__ import annotations

import dataclasses
import importlib.resources
import math
from typing import Any

import jax
import numpy as np
import yaml
from jax.sharding import Mesh

from jaxdata.errors import ConfigError

__all__ = ["SliceSpec", "available_slices", "load_slice", "slice_mesh"]

_PACKAGE = "jaxdata.tpu_configs"


@dataclasses.dataclass(frozen=True)
class SliceSpec:
  name: str
  accelerator: str
  chips: int
  hosts: int
  chips_per_host: int
  topology: str
  mesh_axes: tuple[str, ...]
  mesh_shape: tuple[int, ...]
  data_axes: tuple[str, ...]

  def __post_init__(self) -> None:
    where = f"tpu_configs/{self.name}.yaml"
    if self.hosts * self.chips_per_host != self.chips:
      raise ConfigError(f"{where}: hosts x chips_per_host = {self.hosts * self.chips_per_host}, chips = {self.chips}")
    if math.prod(self.mesh_shape) != self.chips:
      raise ConfigError(f"{where}: mesh shape {self.mesh_shape} multiplies to {math.prod(self.mesh_shape)}, not {self.chips}")
    if math.prod(int(x) for x in self.topology.split("x")) != self.chips:
      raise ConfigError(f"{where}: topology {self.topology} does not have {self.chips} chips")
    if len(self.mesh_axes) != len(self.mesh_shape) or not set(self.data_axes) <= set(self.mesh_axes):
      raise ConfigError(f"{where}: mesh axes {self.mesh_axes} / data axes {self.data_axes} do not match")

  @property
  def data_parallel(self) -> int:
    return math.prod(s for a, s in zip(self.mesh_axes, self.mesh_shape) if a in self.data_axes)

  def data_shards_per_host(self) -> list[int]:
    """Distinct data shards (row blocks) on each host, devices in mesh order."""
    coords = np.indices(self.mesh_shape).reshape(len(self.mesh_shape), -1).T  # device i -> mesh coords
    data_dims = [i for i, a in enumerate(self.mesh_axes) if a in self.data_axes]
    host = np.arange(self.chips) // self.chips_per_host
    return [len({tuple(c[data_dims]) for c in coords[host == h]}) for h in range(self.hosts)]

  def rows_per_host(self, global_batch: int) -> int:
    """Rows each host holds; raises ConfigError if the batch does not divide."""
    if global_batch % self.data_parallel:
      raise ConfigError(
          f"global batch {global_batch} does not divide over the {self.data_parallel} data-parallel "
          f"shards of {self.name} (mesh {dict(zip(self.mesh_axes, self.mesh_shape))}, data axes "
          f"{list(self.data_axes)}); use a multiple of {self.data_parallel}"
      )
    per_shard = global_batch // self.data_parallel
    shards = set(self.data_shards_per_host())
    return per_shard * max(shards)


def available_slices() -> list[str]:
  return sorted(
      f.name[: -len(".yaml")] for f in importlib.resources.files(_PACKAGE).iterdir() if f.name.endswith(".yaml")
  )


def load_slice(name: str) -> SliceSpec:
  """The slice config named `name` (for example "v5e-8", or "cpu-8" for tests)."""
  resource = importlib.resources.files(_PACKAGE) / f"{name}.yaml"
  if not resource.is_file():
    raise ConfigError(f"tpu: no slice config {name!r}; available: {', '.join(available_slices())}")
  raw: Any = yaml.safe_load(resource.read_text())
  try:
    mesh = raw.pop("mesh")
    return SliceSpec(
        mesh_axes=tuple(mesh["axes"]), mesh_shape=tuple(mesh["shape"]),
        data_axes=tuple(raw.pop("data_axes")), **raw,
    )
  except (KeyError, TypeError) as e:
    raise ConfigError(f"tpu_configs/{name}.yaml: malformed slice config ({e})") from e


def slice_mesh(spec: SliceSpec, devices: list[jax.Device] | None = None) -> Mesh:
  """The slice's default mesh over `devices` (default: all of jax.devices())."""
  devices = list(jax.devices()) if devices is None else list(devices)
  if len(devices) != spec.chips:
    raise ConfigError(
        f"tpu: slice {spec.name} has {spec.chips} chips but {len(devices)} devices are visible"
    )
  ordered = sorted(devices, key=lambda d: (d.process_index, d.id))
  return Mesh(np.array(ordered).reshape(spec.mesh_shape), spec.mesh_axes)
