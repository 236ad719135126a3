"""`mesh_report`: what each host of a slice reads per step, planned from metadata."""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from jaxdata.config.loading import load_config
from jaxdata.config.pipeline_config import PipelineConfig
from jaxdata.config.schema import BatchConfig
from jaxdata.pipeline.planner import StepPlanner, host_row_blocks
from jaxdata.pipeline.raw_inputs import with_built_inputs
from jaxdata.pipeline.slices import SliceSpec

__all__ = ["MeshReport", "mesh_report"]


SPREAD_WARNING = 1.25  # hosts wait for the slowest: warn when max / mean documents exceed this


@dataclasses.dataclass(frozen=True)
class MeshReport:
  documents_per_host: list[float] | None  # mean distinct documents read per step
  plan_seconds: float | None  # mean time to plan one global step here
  planned_steps: int | None = None  # of the steps asked for: fewer when the data ends first

  def warnings(self, steps: int) -> list[str]:
    """Degenerate inputs said in plain words."""
    out = []
    if self.planned_steps is not None and self.planned_steps < steps:
      if self.planned_steps == 0:
        out.append(
          f"the data ends after 0 of the {steps} steps asked for: it is smaller than one step, so there are no "
          "documents per host to show (smaller batches or rows, more data, or exhausted_policy: repeat)"
        )
      else:
        out.append(
          f"the data ends after {self.planned_steps} of the {steps} steps asked for: the figures cover "
          "only those (set exhausted_policy: repeat to keep going)"
        )
    if self.documents_per_host is not None and min(self.documents_per_host, default=0) == 0:
      out.append(
        "some hosts read no document at all in the planned steps (their rows are padding): the batch "
        "has more rows than the data fills"
      )
    return out

  @property
  def spread(self) -> float | None:
    """max / mean documents read per host and step (1.0: perfectly even)."""
    if not self.documents_per_host:
      return None
    mean = float(np.mean(self.documents_per_host))
    return max(self.documents_per_host) / mean if mean > 0 else 1.0


def mesh_report(
  spec: SliceSpec, global_batch: int, seq_len: int, config: str | PipelineConfig | None, steps: int = 5
) -> MeshReport:
  """Plans `steps` global steps of `config` (a path or a config) at this
  batch shape (no tokens read)."""
  spec.rows_per_host(global_batch)
  if config is None:
    return MeshReport(None, None)
  cfg = with_built_inputs(load_config(config) if isinstance(config, str) else config)
  cfg = dataclasses.replace(
    cfg,
    packing=dataclasses.replace(cfg.packing, seq_len=seq_len, warmup=()),
    batch=BatchConfig(global_batch_size=global_batch, drop_remainder=cfg.batch.drop_remainder),
  )
  planner = StepPlanner(cfg)
  documents = np.zeros(spec.hosts)
  elapsed, planned = 0.0, 0
  started = time.perf_counter()
  for plan in planner.plans(steps):
    elapsed += time.perf_counter() - started
    planned += 1
    for host, rows in enumerate(host_row_blocks(plan.rows, spec.hosts)):
      mine = plan.pieces.take(plan.in_rows(rows))
      documents[host] += len(set(zip(mine.dataset.tolist(), mine.record.tolist())))
    started = time.perf_counter()
  if planned == 0:  # smaller than one step: no documents per host to show (not 0.0 each, nor a spread of 1.00)
    return MeshReport(None, None, 0)
  return MeshReport((documents / planned).tolist(), elapsed / planned, planned)
