"""Which rows of the global batch this process holds, from the sharding itself.

The global batch [rows, seq_len] is sharded over the mesh's data axes and
replicated over the others. A process's rows are the union of the row
ranges of its addressable devices, read from
`sharding.addressable_devices_indices_map` (never from process-index
arithmetic: device ids need not be contiguous per process)::

    mesh (data=4, model=2), 8 rows:  device (d, m) holds rows 2d .. 2d+1
    process 0 owns devices (0,*), (1,*)  ->  rows 0..3; both model replicas read the same rows
"""

from __future__ import annotations

from typing import Sequence

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

__all__ = ["batch_sharding", "data_parallel_size", "local_rows", "host_row_blocks"]


def batch_sharding(mesh: Mesh, data_axes: Sequence[str]) -> NamedSharding:
  """Rows over `data_axes` (together), sequence replicated."""
  missing = [a for a in data_axes if a not in mesh.axis_names]
  if missing:
    raise ValueError(f"data_axes: {missing[0]!r} is not an axis of the mesh {mesh.axis_names}")
  return NamedSharding(mesh, PartitionSpec(tuple(data_axes), None))


def data_parallel_size(mesh: Mesh, data_axes: Sequence[str]) -> int:
  return int(np.prod([mesh.shape[a] for a in data_axes]))


def local_rows(sharding: jax.sharding.Sharding, shape: tuple[int, int]) -> np.ndarray:
  """Sorted global row indices held by this process's devices."""
  rows = set()
  for index in sharding.addressable_devices_indices_map(shape).values():
    row_slice = index[0]
    rows.update(range(*row_slice.indices(shape[0])))
  return np.array(sorted(rows), dtype=np.int64)


def host_row_blocks(rows: int, num_hosts: int) -> list[np.ndarray]:
  """Rows per host when `num_hosts` hosts split the data axis evenly, in order
  (the usual layout; used to plan and audit for a host count without a mesh)."""
  if num_hosts < 1 or rows % num_hosts:
    raise ValueError(f"num_hosts: {num_hosts} must be >= 1 and divide the {rows} rows")
  return list(np.arange(rows).reshape(num_hosts, rows // num_hosts))
