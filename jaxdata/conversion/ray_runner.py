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


def convert_with_ray(
  inputs: Sequence[str],
  out_dir: str,
  name: str,
  options: ConvertOptions = ConvertOptions(),
  address: str | None = None,
  on_progress: Progress | None = None,
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
