"""Use a `Pipeline` where Grain expects an `IterDataset` / `DatasetIterator`.

Grain transforms chain on it, and Grain's own Orbax checkpoint handler saves
and restores it (the iterator state is the pipeline's JSON state)::

    dataset = PipelineDataset(cfg, mesh=mesh).map(lambda batch: batch["tokens"])
    iterator = iter(dataset)
    manager.save(step, args=ocp.args.Composite(data=grain.checkpoint.CheckpointSave(iterator)))
"""

from __future__ import annotations

from typing import Any

import grain

from jaxdata.config.pipeline_config import PipelineConfig
from jaxdata.pipeline.pipeline import Pipeline

__all__ = ["PipelineDataset", "PipelineDatasetIterator"]


class PipelineDatasetIterator(grain.DatasetIterator):
  """A Grain `DatasetIterator` over a `Pipeline`'s global batches."""

  def __init__(self, pipeline: Pipeline) -> None:
    super().__init__()
    self.pipeline = pipeline

  def __next__(self) -> dict[str, Any]:
    return next(self.pipeline)

  def get_state(self) -> dict[str, Any]:
    return self.pipeline.get_state()

  def set_state(self, state: dict[str, Any]) -> None:
    self.pipeline.set_state(state)

  def close(self) -> None:
    self.pipeline.close()


class PipelineDataset(grain.IterDataset):
  """A Grain `IterDataset` whose iterators are fresh `Pipeline`s."""

  def __init__(self, cfg: PipelineConfig, **pipeline_kwargs: Any) -> None:
    super().__init__()
    self.cfg = cfg
    self.pipeline_kwargs = pipeline_kwargs

  def __iter__(self) -> PipelineDatasetIterator:
    return PipelineDatasetIterator(Pipeline(self.cfg, **self.pipeline_kwargs))

  def __str__(self) -> str:
    return f"PipelineDataset(datasets={list(self.cfg.names)})"
