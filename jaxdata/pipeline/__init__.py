"""Stage 6 of the data flow: global batches on a mesh.

`planner` (`StepPlanner`: the plan of every step, from metadata; used by
everything that plans), `reader` (batched document reads), `window`
(planned, read and assembled steps), `prefetch` (the background thread),
`workers` / `worker` (the same steps made in worker processes), `parts`
(what a pipeline opens),
`sharding` (which rows this process holds; the global arrays), `slices`
(TPU slice configs and meshes), `stats` (per-step statistics), `pipeline`
(`Pipeline`, which wires them) and `grain` (`PipelineDataset`, a Grain
`IterDataset`). Names load lazily: planning needs no jax.
"""

from jaxdata._lazy import lazy_exports

__all__ = ["Pipeline", "PipelineDataset", "StepPlanner", "host_row_blocks", "pieces_for_hosts"]

__getattr__, __dir__ = lazy_exports(
  __name__,
  {
    "Pipeline": "jaxdata.pipeline.pipeline",
    "PipelineDataset": "jaxdata.pipeline.grain",
    "StepPlanner": "jaxdata.pipeline.planner",
    "host_row_blocks": "jaxdata.pipeline.planner",
    "pieces_for_hosts": "jaxdata.pipeline.planner",
  },
  package_globals=globals(),
)
