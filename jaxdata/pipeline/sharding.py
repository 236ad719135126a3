"""Which rows of the global batch this process holds, and the global `jax.Array`s.

The global batch [rows, seq_len] is sharded over the mesh's data axes and
replicated over the others. A process's rows are the union of the row
ranges of its addressable devices, read from
`sharding.addressable_devices_indices_map` (never from process-index
arithmetic: device ids need not be contiguous per process)::

    mesh (data=4, model=2), 8 rows:  device (d, m) holds rows 2d .. 2d+1
    process 0 owns devices (0,*), (1,*)  ->  rows 0..3; both model replicas read the same rows
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from jaxdata.config.pipeline_config import PipelineConfig

__all__ = [
    "aliases_host_memory", "batch_sharding", "check_rows_divide", "data_parallel_size", "global_arrays", "local_rows",
    "output_functions",
]


def batch_sharding(mesh: Mesh, data_axes: Sequence[str]) -> NamedSharding:
  """Rows over `data_axes` (together), sequence replicated."""
  missing = [a for a in data_axes if a not in mesh.axis_names]
  if missing:
    raise ValueError(f"data_axes: {missing[0]!r} is not an axis of the mesh {mesh.axis_names}")
  return NamedSharding(mesh, PartitionSpec(tuple(data_axes), None))


def data_parallel_size(mesh: Mesh, data_axes: Sequence[str]) -> int:
  return int(np.prod([mesh.shape[a] for a in data_axes]))


def check_rows_divide(cfg: PipelineConfig, mesh: Mesh, data_axes: Sequence[str]) -> None:
  """Every step's rows (warmup included) must split evenly over the data-parallel shards."""
  shards = data_parallel_size(mesh, data_axes)
  for rows, seq_len in cfg.row_shapes():
    if rows % shards:
      raise ValueError(
          f"batch.global_batch_size: {rows} rows (at seq_len {seq_len}) do not divide over "
          f"the {shards} data-parallel shards of mesh axes {tuple(data_axes)}"
      )


def aliases_host_memory(sharding: jax.sharding.Sharding | None) -> bool:
  """Whether this process's devices are CPU devices: jax then uses aligned
  host memory in place (`make_array_from_callback` copies nothing), so rows
  assembled into aligned memory save a copy of every step."""
  return sharding is not None and all(d.platform == "cpu" for d in sharding.addressable_devices)


def local_rows(sharding: jax.sharding.Sharding, shape: tuple[int, int]) -> np.ndarray:
  """Sorted global row indices held by this process's devices."""
  rows = set()
  for index in sharding.addressable_devices_indices_map(shape).values():
    rows.update(range(*index[0].indices(shape[0])))
  return np.array(sorted(rows), dtype=np.int64)


def global_arrays(
    arrays: Mapping[str, np.ndarray], sharding: jax.sharding.Sharding, shape: tuple[int, int], rows_here: np.ndarray
) -> dict[str, jax.Array]:
  """Global arrays of `shape` from this process's rows (`arrays[name][i]` is row `rows_here[i]`)."""
  local_index = {row: i for i, row in enumerate(rows_here.tolist())}  # a device's rows are contiguous here

  def make(local: np.ndarray) -> jax.Array:
    def piece(index: tuple[slice, ...]) -> np.ndarray:
      start = index[0].start or 0
      stop = shape[0] if index[0].stop is None else index[0].stop
      first = local_index[start]
      block = local[first : first + stop - start]
      return block if index[1] == _ALL else block[:, index[1]]

    return jax.make_array_from_callback(shape, sharding, piece)

  return {name: make(local) for name, local in arrays.items()}


_ALL = slice(None)


def output_functions(
    sharding: jax.sharding.Sharding | None,
) -> tuple[Callable[[int, int], np.ndarray], Callable[..., dict[str, Any]] | None]:
  """(rows this process holds of a [rows, seq_len] step, how its assembled
  rows become the batch): all rows and NumPy without a sharding."""
  if sharding is None:
    return (lambda rows, _seq_len: np.arange(rows)), None

  def rows_here(rows: int, seq_len: int) -> np.ndarray:
    return local_rows(sharding, (rows, seq_len))

  def output(arrays: Mapping[str, np.ndarray], rows: int, seq_len: int, here: np.ndarray) -> dict[str, Any]:
    return global_arrays(arrays, sharding, (rows, seq_len), here)

  return rows_here, output
