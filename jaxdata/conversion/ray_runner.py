"""`convert_with_ray`: `jaxdata convert`'s work units as Ray tasks; the same dataset, byte for byte.

The local runner's phases run unchanged; only where each task runs differs::

    plan units (here) -> tokenize each batch of units: a Ray task -> plan shards (here)
                      -> write each shard: a Ray task -> manifest (here, written last)

Tasks read the inputs and write the scratch files and shards by path, so on
a cluster of several machines the inputs, the output and its parent
directory must be on a file system every node mounts (NFS, a FUSE-mounted
bucket). `ray.init(address)` joins a running cluster ("auto", a head's
address) or, with None, starts one on this machine.
"""

from __future__ import annotations

import concurrent.futures
import socket
from collections.abc import Callable, Sequence
from typing import Any

from jaxdata.conversion.local_runner import convert
from jaxdata.conversion.options import ConvertOptions, Progress
from jaxdata.errors import ConfigError, optional_module
from jaxdata.sources.manifest import Manifest
from jaxdata.sources.stores import is_remote

__all__ = ["RayExecutor", "convert_with_ray"]


class RayExecutor(concurrent.futures.Executor):
  """A `concurrent.futures.Executor` whose calls run as Ray tasks (one CPU each)."""

  def __init__(self, ray: Any) -> None:
    self._ray = ray
    self._remote: dict[Callable[..., Any], Any] = {}

  def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> concurrent.futures.Future[Any]:
    if fn not in self._remote:
      self._remote[fn] = self._ray.remote(num_cpus=1, max_retries=0)(fn)  # a failed unit is an error, not retried
    return self._remote[fn].remote(*args, **kwargs).future()


RAY_CONNECT_S = 5.0  # how long --ray-address's head is waited for before it is called unreachable


def check_ray_address(address: str, timeout_s: float = RAY_CONNECT_S) -> None:
  """A ConfigError at once where nothing answers at `address` (HOST:PORT or ray://HOST:PORT): Ray itself
  waits for a head that is not there for minutes. "auto" (Ray finds the local cluster) is left to Ray."""
  if address == "auto" or address == "local":
    return
  host, _, port = address.removeprefix("ray://").rpartition(":")
  if not host or not port.isdigit():
    raise ConfigError(f"--ray-address {address!r}: give HOST:PORT (ray start --head's), ray://HOST:PORT, or auto")
  try:
    socket.create_connection((host, int(port)), timeout=timeout_s).close()
  except OSError as error:
    raise ConfigError(
      f"--ray-address {address}: nothing answers there ({error.strerror or error}); start the cluster "
      f"(ray start --head --port {port}), or leave --ray-address out to run one here"
    ) from error


def convert_with_ray(
  inputs: Sequence[str],
  out_dir: str,
  name: str,
  options: ConvertOptions = ConvertOptions(),
  address: str | None = None,
  on_progress: Progress | None = None,
  *,
  overwrite: bool = False,
) -> Manifest:
  """`convert` with every unit and shard a Ray task (see the module docstring); `address`: the cluster
  (`ray.init`'s), None for one started here (and stopped after)."""
  if is_remote(out_dir) or any(is_remote(p) for p in inputs):
    raise ConfigError(
      "--runner ray: inputs and --out are paths every node mounts (a bucket: mount it, or use --runner beam)"
    )
  ray = optional_module("ray", "ray", "jaxdata convert --runner ray")
  started = not ray.is_initialized()
  if started:
    if address is not None:
      check_ray_address(address)
    ray.init(address=address, include_dashboard=False, log_to_driver=False, configure_logging=False)
  try:
    return convert(inputs, out_dir, name, options, on_progress, overwrite, executor=RayExecutor(ray))
  except ray.exceptions.RayTaskError as error:  # the task's own error (a bad record by file:line), not Ray's wrapping
    cause = getattr(error, "cause", None)
    if isinstance(cause, Exception):
      raise cause from None
    raise
  finally:
    if started:
      ray.shutdown()
