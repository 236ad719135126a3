"""`mesh_report`: what each host of a slice reads per step, planned from metadata."""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from jaxdata.config import BatchConfig, load_config
from jaxdata.mixture import DocumentStream
from jaxdata.sharding import host_row_blocks
from jaxdata.slices import SliceSpec
from jaxdata.transforms.packing import Packer

__all__ = ["MeshReport", "mesh_report"]


@dataclasses.dataclass(frozen=True)
class MeshReport:
  documents_per_host: list[float] | None  # mean distinct documents read per step
  plan_seconds: float | None  # mean time to plan one global step here


def mesh_report(
    spec: SliceSpec, global_batch: int, seq_len: int, config_path: str | None, steps: int = 5
) -> MeshReport:
  """Plans `steps` global steps of `config_path` at this batch shape (no tokens read)."""
  spec.rows_per_host(global_batch)
  if config_path is None:
    return MeshReport(None, None)
  cfg = load_config(config_path)
  cfg = dataclasses.replace(
      cfg,
      packing=dataclasses.replace(cfg.packing, seq_len=seq_len, warmup=()),
      batch=BatchConfig(global_batch_size=global_batch, drop_remainder=cfg.batch.drop_remainder),
  )
  packer = Packer(cfg.packing, cfg.batch, DocumentStream(cfg))
  documents = np.zeros(spec.hosts)
  elapsed, planned = 0.0, 0
  for _ in range(steps):
    started = time.perf_counter()
    plan = packer.plan()
    elapsed += time.perf_counter() - started
    if plan is None:
      break
    planned += 1
    for host, rows in enumerate(host_row_blocks(plan.rows, spec.hosts)):
      mine = plan.pieces.take(plan.in_rows(rows))
      documents[host] += len(set(zip(mine.dataset.tolist(), mine.record.tolist())))
  planned = max(planned, 1)
  return MeshReport((documents / planned).tolist(), elapsed / planned)
