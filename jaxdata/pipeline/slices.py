"""TPU slices and their meshes: a built-in table of the v4, v5e, v5p and v6e families, slice YAML files
(`tpu_configs/*.yaml`, installed as `jaxdata.tpu_configs`, or your own path), or an explicit mesh.

The table follows the families' naming (v4-N and v5p-N count TensorCores: N / 2
chips, 4 per host, 3-D torus; v5e-N and v6e-N count chips: up to 8 on one host,
else 4 per host, 2-D torus). A slice says how many chips and hosts it has and its default mesh::

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
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from jaxdata._lazy import lazy_module
from jaxdata.errors import ConfigError

if TYPE_CHECKING:  # the type checker sees jax; at run time it is imported on first use
  import jax
  from jax.sharding import Mesh
else:
  jax = lazy_module("jax")  # only `slice_mesh` needs it: `jaxdata mesh` and the planner stay light
jax_sharding = lazy_module("jax.sharding")
yaml = lazy_module("yaml")  # a slice file is read when one is named, not at import

__all__ = ["SliceSpec", "available_slices", "explicit_slice", "load_slice", "mesh_and_axes"]

_PACKAGE = "jaxdata.tpu_configs"
_TORUS_3D = {
  4: "2x2x1",
  8: "2x2x2",
  16: "2x2x4",
  32: "2x4x4",
  64: "4x4x4",
  128: "4x4x8",
  256: "4x8x8",
  512: "8x8x8",
  1024: "8x8x16",
  2048: "8x16x16",
  4096: "16x16x16",
  6144: "16x16x24",
}
_TORUS_2D = {1: "1x1", 4: "2x2", 8: "2x4", 16: "4x4", 32: "4x8", 64: "8x8", 128: "8x16", 256: "16x16"}
_FAMILIES = {
  "v4": ("tpu-v4", _TORUS_3D, 2),
  "v5p": ("tpu-v5p", _TORUS_3D, 2),
  "v5e": ("tpu-v5-lite", _TORUS_2D, 1),
  "v6e": ("tpu-v6e", _TORUS_2D, 1),
}


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
      raise ConfigError(
        f"{where}: mesh shape {self.mesh_shape} multiplies to {math.prod(self.mesh_shape)}, not {self.chips}"
      )
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


def _table() -> dict[str, SliceSpec]:
  """Every built-in slice of the four families."""
  table = {}
  for family, (accelerator, topologies, cores_per_chip) in _FAMILIES.items():
    for chips, topology in topologies.items():
      if family == "v4" and chips > 4096:  # a v4 pod has 4,096 chips
        continue
      per_host = chips if (cores_per_chip == 1 and chips <= 8) else min(4, chips)
      hosts = chips // per_host
      name = f"{family}-{chips * cores_per_chip}"
      table[name] = SliceSpec(
        name,
        accelerator,
        chips,
        hosts,
        per_host,
        topology,
        ("data", "fsdp", "tensor"),
        (hosts, per_host, 1),
        ("data", "fsdp"),
      )
  return table


def available_slices() -> list[str]:
  files = [f.name[: -len(".yaml")] for f in importlib.resources.files(_PACKAGE).iterdir() if f.name.endswith(".yaml")]
  return sorted(set(files) | set(_table()), key=lambda n: (n.split("-")[0], int(n.split("-")[-1].split("x")[-1])))


def explicit_slice(
  shape: Sequence[int], axes: Sequence[str], data_axes: Sequence[str], hosts: int = 1, name: str = "mesh"
) -> SliceSpec:
  """A slice from an explicit mesh shape and axis names (devices spread evenly over `hosts`)."""
  chips = math.prod(shape)
  if hosts < 1 or chips % hosts:
    raise ConfigError(f"tpu: {chips} devices do not split over {hosts} hosts")
  return SliceSpec(
    name,
    "explicit",
    chips,
    hosts,
    chips // hosts,
    "x".join(str(s) for s in shape),
    tuple(axes),
    tuple(int(s) for s in shape),
    tuple(data_axes),
  )


def load_slice(name: str) -> SliceSpec:
  """The slice `name`: a built-in one ("v5e-8", "v5p-1024", "cpu-8" for tests) or a slice YAML file's path."""
  if name.endswith((".yaml", ".yml")) and os.path.isfile(name):
    with open(name, encoding="utf-8") as f:
      return _from_yaml(yaml.safe_load(f), name)
  resource = importlib.resources.files(_PACKAGE) / f"{name}.yaml"
  if resource.is_file():
    return _from_yaml(yaml.safe_load(resource.read_text()), f"tpu_configs/{name}.yaml")
  if name in _table():
    return _table()[name]
  raise ConfigError(
    f"tpu: no slice {name!r}; built in: {', '.join(available_slices())}; or give a slice YAML "
    "file's path, or an explicit mesh"
  )


def _from_yaml(raw: Any, where: str) -> SliceSpec:
  if not isinstance(raw, dict):
    raise ConfigError(f"{where}: not a slice config (a mapping with name, chips, hosts, mesh, data_axes)")
  raw = dict(raw)
  try:
    mesh = raw.pop("mesh")
    return SliceSpec(
      mesh_axes=tuple(mesh["axes"]),
      mesh_shape=tuple(mesh["shape"]),
      data_axes=tuple(raw.pop("data_axes")),
      **raw,
    )
  except (KeyError, TypeError) as e:
    raise ConfigError(f"{where}: malformed slice config ({e})") from e


def slice_mesh(spec: SliceSpec, devices: list[jax.Device] | None = None) -> jax.sharding.Mesh:
  """The slice's default mesh over `devices` (default: all of jax.devices())."""
  devices = list(jax.devices()) if devices is None else list(devices)
  if len(devices) != spec.chips:
    raise ConfigError(f"tpu: slice {spec.name} has {spec.chips} chips but {len(devices)} devices are visible")
  ordered = sorted(devices, key=lambda d: (d.process_index, d.id))
  return jax_sharding.Mesh(np.array(ordered).reshape(spec.mesh_shape), spec.mesh_axes)


def mesh_and_axes(
  tpu: str | SliceSpec | None, mesh: Mesh | None, data_axes: Sequence[str]
) -> tuple[Mesh | None, Sequence[str]]:
  """The mesh and data axes given, or a slice's default ones."""
  if tpu is None:
    return mesh, data_axes
  if mesh is not None:
    raise ValueError("tpu: give a slice name or a mesh, not both")
  spec = tpu if isinstance(tpu, SliceSpec) else load_slice(tpu)
  return slice_mesh(spec), spec.data_axes
