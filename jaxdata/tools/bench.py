"""`bench`: throughput of a pipeline config on this host (NumPy output; planned here or in a process, read here or in reader processes)."""

from __future__ import annotations

import dataclasses
import itertools
import time

from jaxdata.config.pipeline_config import PipelineConfig
from jaxdata.mixture import pick_loops
from jaxdata.pipeline.execution import StepMaking
from jaxdata.pipeline.pipeline import Pipeline
from jaxdata.transforms import kernels

__all__ = ["BenchResult", "bench", "c_loops"]


def c_loops() -> str:
  """Which of jaxdata's loops run in C here (a bench figure depends on it), as
  the modules decided at import.

  >>> c_loops().startswith(("in C:", "off", "not built"))
  True
  """
  modules = (("assembly and first-fit placement", kernels), ("exact interleave picks", pick_loops))
  if any(module.BUILT and not module.NATIVE for _, module in modules):
    return "off (JAXDATA_NATIVE=0): every loop runs in Python / NumPy"
  missing = [name for name, module in modules if not module.BUILT]
  if not missing:
    return "in C: assembly, first-fit placement, exact interleave picks"
  return (
    f"not built: {', '.join(missing)} run in Python / NumPy, a step ~0.5 ms slower "
    "(reinstall jaxdata where a C compiler and the Python headers are found)"
  )


@dataclasses.dataclass(frozen=True)
class BenchResult:
  steps: int
  rows: int
  seq_len: int
  seconds: float  # for `steps` steps after the first
  first_batch_seconds: float
  real_tokens: int  # non-padding tokens in those steps
  time_per_step_s: dict[str, float]  # plan / read / assemble / wait / output, averaged over all steps

  @property
  def tokens_per_second(self) -> float:
    return self.real_tokens / self.seconds if self.seconds > 0 else 0.0

  @property
  def efficiency(self) -> float:
    return self.real_tokens / max(self.steps * self.rows * self.seq_len, 1)


def bench(cfg: PipelineConfig, steps: int, prefetch: int = 2, making: StepMaking | None = None) -> BenchResult:
  """Times the first batch, then `steps` more; counts non-padding tokens (`making`: where steps are made,
  by default here)."""
  started = time.perf_counter()
  with Pipeline(cfg, prefetch=prefetch, making=making or StepMaking("here")) as pipe:
    next(pipe)
    first = time.perf_counter() - started
    started = time.perf_counter()
    real = done = 0
    for _ in itertools.islice(pipe, steps):
      real += sum(pipe.stats()["tokens_per_source"].values())  # whatever features the config keeps
      done += 1
    seconds = time.perf_counter() - started
    stats = pipe.stats()
  per_step = {k: v / (done + 1) for k, v in stats["time_total_s"].items()}
  return BenchResult(done, stats["rows"], stats["seq_len"], seconds, first, real, per_step)
