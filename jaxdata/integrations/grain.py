"""Use a `Pipeline` where Grain expects an `IterDataset` / `DatasetIterator`.

Grain transforms chain on it in the training process, and Grain's own Orbax
checkpoint handler saves and restores it (the iterator state is the
pipeline's JSON state). Grain's worker processes (`mp_prefetch`) cannot
run it: they slice a dataset by worker, while a Pipeline is already one
global stream of batches, each host reading its own rows; it is refused, naming jaxdata's own worker
option (`Pipeline(..., making=StepMaking("process", reader_processes=n))`, same output, same state)::

    dataset = PipelineDataset(cfg, mesh=mesh).map(lambda batch: batch["tokens"])
    iterator = iter(dataset)
    manager.save(step, args=ocp.args.Composite(data=grain.checkpoint.CheckpointSave(iterator)))
"""

from __future__ import annotations

from typing import Any

import grain

from jaxdata.config.pipeline_config import PipelineConfig
from jaxdata.pipeline.pipeline import Pipeline

__all__ = ["GlobalStreamDataset", "PipelineDataset", "PipelineDatasetIterator"]


def mp_prefetch_refused(kind: str) -> str:
  """The one line that refuses Grain's worker processes for a global-stream dataset."""
  what = (
    "one global stream of documents in the mixture's order"
    if kind == "MixtureDataset"
    else "one global stream of batches, each host reading its own rows"
  )
  return (
    f"{kind}.mp_prefetch: Grain's worker processes slice a dataset per worker, but a jaxdata {kind} is "
    f"{what}; use PipelineDataset(cfg, making=StepMaking('process', reader_processes=n)) (or the same Pipeline): "
    "n processes read and assemble with output and state identical to one"
  )


MP_PREFETCH_REFUSED = mp_prefetch_refused("PipelineDataset")


class GlobalStreamDataset(grain.IterDataset):
  """A Grain `IterDataset` that is one global stream: Grain's workers are refused.

  Grain builds `mp_prefetch` lazily: it calls `mp_prefetch` on this dataset
  only when it is the last node; after a transform (``ds.map(f).mp_prefetch()``)
  the first `next()` pickles the chain for the workers, which is refused here,
  in the caller, before any worker process starts.
  """

  def mp_prefetch(self, *args: Any, **kwargs: Any) -> grain.IterDataset:
    """Refused: Grain's workers would each slice the stream; use jaxdata's workers instead."""
    raise ValueError(mp_prefetch_refused(type(self).__name__))

  def set_slice(self, sl: slice, sequential_slice: bool = False) -> None:
    """What Grain's workers call to take their slice."""
    raise ValueError(mp_prefetch_refused(type(self).__name__))

  def __reduce__(self) -> Any:
    raise ValueError(mp_prefetch_refused(type(self).__name__))


class PipelineDatasetIterator(grain.DatasetIterator):
  """A Grain `DatasetIterator` over a `Pipeline`'s global batches."""

  def __init__(self, pipeline: Pipeline, reconfigure_on_restore: bool = False) -> None:
    super().__init__()
    self.pipeline = pipeline
    self.reconfigure_on_restore = reconfigure_on_restore

  def __next__(self) -> dict[str, Any]:
    return next(self.pipeline)

  def get_state(self) -> dict[str, Any]:
    return self.pipeline.get_state()

  def set_state(self, state: dict[str, Any]) -> None:
    """Grain's checkpoint handler calls this; with `reconfigure_on_restore`, a state saved under another
    config of the run continues under this one (`Pipeline.set_state(..., reconfigure=True)`)."""
    self.pipeline.set_state(state, reconfigure=self.reconfigure_on_restore)

  def close(self) -> None:
    self.pipeline.close()


class PipelineDataset(GlobalStreamDataset):
  """A Grain `IterDataset` whose iterators are fresh `Pipeline`s."""

  def __init__(self, cfg: PipelineConfig, reconfigure_on_restore: bool = False, **pipeline_kwargs: Any) -> None:
    super().__init__()
    self.cfg = cfg
    self.reconfigure_on_restore = reconfigure_on_restore  # restores continue states of another config of the run
    self.pipeline_kwargs = pipeline_kwargs

  def __iter__(self) -> PipelineDatasetIterator:
    return PipelineDatasetIterator(Pipeline(self.cfg, **self.pipeline_kwargs), self.reconfigure_on_restore)

  def __str__(self) -> str:
    return f"PipelineDataset(datasets={list(self.cfg.names)})"
