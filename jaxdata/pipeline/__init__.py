"""Stage 6 of the data flow: global batches on a mesh. Names load lazily: planning needs no jax.

Its modules::

    pipeline.py         `Pipeline`: wires the modules below, hands out batches, saves and restores state
    pipeline_parts.py   `open_parts`: the datasets, planner and reader a pipeline opens from its config
    spec.py             `PipelineSpec`: everything that decides the batches (what worker processes get)
    planner.py          `StepPlanner`: the plan of every step, from metadata (used by everything that plans)
    read_spans.py       consecutive steps planned together, read together, then assembled one by one
    reader.py           `DocumentReader`: a span's documents, one batched read per dataset
    read_thread.py      `ReadThread`: a span read on a thread of its own
    producing.py        `StepMaker`: the contract of every way of making steps; `Prepared`, `END`
    step_producer.py    `StepProducer`: steps made in this process
    worker_producer.py  `WorkerProducer`: the same steps from a planner process or worker processes (`Phase`)
    worker_process.py   the body of a worker process (planner or reader)
    messages.py         the messages between the pipeline and its worker processes, one dataclass each
    worker_handle.py    `WorkerHandle`: one worker process, its pipe and slot ring
    shared_buffer.py    `SharedBuffer`: memory shared with a worker process
    execution.py        `Execution`: where the steps are made now
    prefetch.py         `Prefetcher`: the background thread
    switch_interval.py  the GIL switch interval lowered while the background thread runs
    sharding.py         which rows this process holds; the global `jax.Array`s
    slices.py           TPU slice configs and their meshes
    stats.py            `StatsRecorder`: per-step statistics
    wait_warning.py     the one-line warning when `next()` waits long for a step
    step_stats.py       `StepStats`: one step's statistics as a typed record (the stats file's lines)
    vocabulary.py       token ids checked against the datasets' vocabulary
"""

from jaxdata._lazy import lazy_exports

__all__ = ["Pipeline", "StepPlanner", "host_row_blocks", "pieces_for_hosts"]

__getattr__, __dir__ = lazy_exports(
  __name__,
  {
    "Pipeline": "jaxdata.pipeline.pipeline",
    "StepPlanner": "jaxdata.pipeline.planner",
    "host_row_blocks": "jaxdata.pipeline.planner",
    "pieces_for_hosts": "jaxdata.pipeline.planner",
  },
  package_globals=globals(),
)
