"""Which rows of the global batch this process holds, and the global `jax.Array`s.

The global batch [rows, seq_len] is sharded over the mesh's data axes and
replicated over the others. A process's rows are the union of the row
ranges of its addressable devices, read from
`sharding.addressable_devices_indices_map` (never from process-index
arithmetic: device ids need not be contiguous per process)::

    mesh (data=4, model=2), 8 rows:  device (d, m) holds rows 2d .. 2d+1
    process 0 owns devices (0,*), (1,*)  ->  rows 0..3; both model replicas read the same rows

Each feature's global array is one batched transfer of every device's block
(see `_batched_put`).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from jaxdata._lazy import lazy_module
from jaxdata.config.pipeline_config import PipelineConfig

# jax is imported when a mesh is first used: NumPy output starts without it (~2 s of imports on 2 cores).
if TYPE_CHECKING:  # the type checker sees jax; at run time it is imported on first use
  import jax
else:
  jax = lazy_module("jax")
jax_sharding = lazy_module("jax.sharding")
_jax_core = lazy_module("jax._src.core")  # private: see _batched_put
_pxla = lazy_module("jax._src.interpreters.pxla")


__all__ = [
  "aliases_host_memory",
  "batch_sharding",
  "global_arrays",
  "host_rows",
  "mesh_sharding",
  "output_functions",
]


def batch_sharding(mesh: jax.sharding.Mesh, data_axes: Sequence[str]) -> jax.sharding.NamedSharding:
  """Rows over `data_axes` (together), sequence replicated."""
  missing = [a for a in data_axes if a not in mesh.axis_names]
  if missing:
    raise ValueError(f"data_axes: {missing[0]!r} is not an axis of the mesh {mesh.axis_names}")
  return jax_sharding.NamedSharding(mesh, jax_sharding.PartitionSpec(tuple(data_axes), None))


def mesh_sharding(
  cfg: PipelineConfig, mesh_axes: tuple[jax.sharding.Mesh | None, Sequence[str]]
) -> tuple[jax.sharding.Mesh | None, jax.sharding.NamedSharding | None]:
  """(the mesh, the batch's sharding over its data axes) of a pipeline, the rows checked to divide over
  them; (None, None) without a mesh (NumPy batches)."""
  mesh, data_axes = mesh_axes
  if mesh is None:
    return None, None
  sharding = batch_sharding(mesh, data_axes)
  check_rows_divide(cfg, mesh, data_axes)
  return mesh, sharding


def data_parallel_size(mesh: jax.sharding.Mesh, data_axes: Sequence[str]) -> int:
  return int(np.prod([mesh.shape[a] for a in data_axes]))


def check_rows_divide(cfg: PipelineConfig, mesh: jax.sharding.Mesh, data_axes: Sequence[str]) -> None:
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
  host memory in place (the transfer copies nothing), so rows
  assembled into aligned memory save a copy of every step."""
  devices = sharding.addressable_devices if sharding is not None else set()
  return bool(devices) and all(d.platform == "cpu" for d in devices)  # type: ignore[attr-defined]  # jaxlib's Device


def host_rows(sharding: jax.sharding.Sharding, shape: tuple[int, int]) -> np.ndarray:
  """Sorted global row indices held by this process's devices."""
  rows: set[int] = set()
  for index in sharding.addressable_devices_indices_map(shape).values():
    rows.update(range(*_block_of(index)[0].indices(shape[0])))
  return np.array(sorted(rows), dtype=np.int64)


def global_arrays(
  arrays: Mapping[str, np.ndarray], sharding: jax.sharding.Sharding, shape: tuple[int, int], rows_here: np.ndarray
) -> dict[str, jax.Array]:
  """Global arrays from this process's rows (`arrays[name][i]` is row `rows_here[i]`): [rows, seq_len] of
  `shape` under `sharding`, and a feature of another per-row extent ([rows, *extent]) by rows alike."""
  here = np.asarray(rows_here, np.int64).tobytes()
  put = _batched_put()
  out: dict[str, jax.Array] = {}
  placements: dict[tuple[int, ...], Any] = {}  # per array shape, looked up once a step
  for name, local in arrays.items():
    full = (shape[0], *local.shape[1:])
    if full not in placements:
      placed = sharding if full == tuple(shape) else _by_rows(sharding, len(full))
      placements[full] = placed, (_device_blocks(placed, full, here) if put is not None else None)
    placed, found = placements[full]
    if put is None or found is None:
      piece = functools.partial(_piece, local, rows_here, full)
      out[name] = jax.make_array_from_callback(full, placed, piece)
      continue
    devices, blocks = found
    pieces = [local[first:stop] if columns == _ALL else local[first:stop, columns] for first, stop, columns in blocks]
    aval = _jax_core.update_aval_with_sharding(_jax_core.ShapedArray(full, local.dtype), placed)
    out[name] = put(aval, placed, pieces, devices)
  return out


@functools.lru_cache(maxsize=16)
def _by_rows(sharding: jax.sharding.Sharding, ndim: int) -> jax.sharding.Sharding:
  """The batch's sharding for an array of `ndim` axes: its rows as the batch's, every other axis replicated."""
  rows = sharding.spec[0]  # type: ignore[attr-defined]  # a NamedSharding (batch_sharding)
  return jax_sharding.NamedSharding(sharding.mesh, jax_sharding.PartitionSpec(rows, *([None] * (ndim - 1))))  # type: ignore[attr-defined]


@functools.lru_cache(maxsize=16)
def _device_blocks(
  sharding: jax.sharding.Sharding, shape: tuple[int, ...], rows_here: bytes
) -> tuple[list[Any], list[tuple[int, int, slice]]]:
  """This process's devices and, for each, which local rows and columns it
  holds: (first, stop, columns); checked to be the sharding's shard shape.
  `rows_here`: the int64 bytes of the process's rows (hashable, for the cache)."""
  local_index = {row: i for i, row in enumerate(np.frombuffer(rows_here, np.int64).tolist())}
  expected = tuple(sharding.shard_shape(shape))
  devices, blocks = [], []
  for device, given in sharding.addressable_devices_indices_map(shape).items():
    index = _block_of(given)
    start, stop, _ = index[0].indices(shape[0])
    columns = _ALL if len(shape) == 1 or index[1] == _ALL else slice(*index[1].indices(shape[1]))
    block = (stop - start, *shape[1:]) if len(shape) == 1 else (stop - start, len(range(*columns.indices(shape[1]))))
    if (*block, *shape[2:]) != expected or start not in local_index:
      raise ValueError(
        f"sharding: device {device} holds rows {start}:{stop} of {shape}, not a {expected} block of this process's rows"
      )
    devices.append(device)
    blocks.append((local_index[start], local_index[start] + stop - start, columns))
  return devices, blocks


def _piece(local: np.ndarray, rows_here: np.ndarray, shape: tuple[int, ...], index: tuple[slice, ...]) -> np.ndarray:
  """`make_array_from_callback`'s callback: the local rows of one device's block."""
  start, stop, _ = index[0].indices(shape[0])
  first = int(np.searchsorted(rows_here, start))
  block = local[first : first + stop - start]
  return block if len(index) == 1 or index[1] == _ALL else block[:, index[1]]


@functools.cache
def _batched_put() -> Callable[..., jax.Array] | None:
  """jax's `pxla.batched_device_put`, when it takes (aval, sharding, xs, devices).

  `make_array_from_callback` ends in it, after calling back into Python and
  wrapping the result once per device (48 times a step for 6 features on 8
  devices): about half of the global arrays' cost, all of it holding the
  training thread's GIL (a Python-bound loop fed 2M tokens/s over an
  8-device mesh slowed 3.4-5.7% with it, 1.8-3.0% without). It is not public
  API, so it is used only where it has the expected parameters; otherwise
  the callback path, with the same arrays."""
  try:
    put = getattr(_pxla, "batched_device_put", None)
    with_sharding = getattr(_jax_core, "update_aval_with_sharding", None)
  except ImportError:  # a jax without these private modules
    return None
  if put is None or with_sharding is None:
    return None
  if list(inspect.signature(put).parameters)[:4] != ["aval", "sharding", "xs", "devices"]:
    return None
  return put


_ALL = slice(None)


def output_functions(
  sharding: jax.sharding.Sharding | None,
) -> tuple[Callable[[int, int], np.ndarray], Callable[..., dict[str, Any]] | None]:
  """(rows this process holds of a [rows, seq_len] step, how its assembled
  rows become the batch): all rows and NumPy without a sharding."""
  if sharding is None:
    return (lambda rows, _seq_len: np.arange(rows)), None

  def rows_here(rows: int, seq_len: int) -> np.ndarray:
    return host_rows(sharding, (rows, seq_len))

  def output(arrays: Mapping[str, np.ndarray], rows: int, seq_len: int, here: np.ndarray) -> dict[str, Any]:
    return global_arrays(arrays, sharding, (rows, seq_len), here)

  return rows_here, output


def _block_of(index: tuple[slice, ...] | None) -> tuple[slice, ...]:
  """A device's block of the batch (jax types the map's values optional; an addressable device's is set)."""
  if index is None:
    raise ValueError("sharding: an addressable device holds no block of the batch")
  return index
