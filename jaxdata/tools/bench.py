"""`bench`: throughput of a pipeline config on this host (NumPy output; in process, planner process or workers)."""

from __future__ import annotations

import dataclasses
import itertools
import time

import numpy as np

from jaxdata.config.pipeline_config import PipelineConfig
from jaxdata.pipeline.pipeline import Pipeline

__all__ = ["BenchResult", "bench"]


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


def bench(cfg: PipelineConfig, steps: int, prefetch: int = 2, workers: int = 0,
          planner_process: bool = False) -> BenchResult:
  """Times the first batch, then `steps` more; counts non-padding tokens."""
  started = time.perf_counter()
  with Pipeline(cfg, prefetch=prefetch, workers=workers, planner_process=planner_process) as pipe:
    next(pipe)
    first = time.perf_counter() - started
    started = time.perf_counter()
    real = done = 0
    for batch in itertools.islice(pipe, steps):
      real += int((np.asarray(batch["segment_ids"]) > 0).sum())
      done += 1
    seconds = time.perf_counter() - started
    stats = pipe.stats()
  per_step = {k: v / (done + 1) for k, v in stats["time_total_s"].items()}
  return BenchResult(done, stats["rows"], stats["seq_len"], seconds, first, real, per_step)
