"""Stage 6 of the data flow: global batches on a mesh. Names load lazily: planning needs no jax.

Where steps are made is two axes and one seam (docs/architecture.md): a
`Steps` is a planning (here, or in a planner process) and an assembly
(reading here, or in reader processes); `StepMaking` picks the pair.

Its modules::

    pipeline.py          `Pipeline`: wires the modules below, hands out batches, saves and restores state
    handout.py           `Handout`: steps from the maker to `next()` as batches (the prefetch thread), and their release
    raw_inputs.py        `with_built_inputs`: a config's raw inputs, converted into their caches before opening
    pipeline_parts.py    `open_parts`: the datasets, planner and reader a pipeline opens from its config
    spec.py              `PipelineSpec`: everything that decides the batches (what worker processes get)
    reconfigure.py       `reconfigured`: a state of one config made another's at its step (a change of course)
    planner.py           `StepPlanner`: the plan of every step, from metadata (used by everything that plans)
    read_spans.py        consecutive steps planned together, read together, then assembled one by one
    reader.py            `DocumentReader`: a span's documents, one batched read per dataset
    read_thread.py       `ReadThread`: a span read on a thread of its own
    producing.py         `StepMaker`: the contract of every way of making steps; `Prepared`, `ComingStep`, `END`
    steps.py             `Steps`: a step maker made of a planning and an assembly
    planning.py          `Planning`, and `LocalPlanning`: spans planned in this process (or in the planner process)
    assembly.py          `Assembly`, and `LocalAssembly`: spans read and assembled in this process
    planning_process.py  `ProcessPlanning`: spans from the planner process, by message
    reader_processes.py  `ReaderProcesses`: spans read and assembled by reader processes into shared memory
    worker_pool.py       `WorkerPool`: the worker processes and their `Lifecycle` (spawn, ready, respawn, fall back)
    pooled_steps.py      `PooledSteps`: process steps, made here until the processes run
    makers.py            `step_maker`: the `StepMaker` a `StepMaking` choice asks for
    execution.py         `StepMaking` (where steps are to be made) and `Execution` (where they are made now)
    steering.py          `MixtureSteering`: mixture updates to the planning, on time, the same on every host
    worker_process.py    the body of a worker process (planner or reader)
    messages.py          the messages between the pipeline and its worker processes, and the wire's shared parts
    worker_handle.py     `WorkerHandle`: one worker process, its pipe and slot ring
    shared_buffer.py     `SharedBuffer`: memory shared with a worker process
    prefetch.py          `Prefetcher`: the background thread
    switch_interval.py   the GIL switch interval lowered while the background thread runs
    sharding.py          which rows this process holds; the global `jax.Array`s
    slices.py            TPU slice configs and their meshes
    stats.py             `StatsRecorder`: per-step statistics
    wait_warning.py      the one-line warnings of `next()`: a long wait for a step, a stream without a whole step
    step_stats.py        `StepStats`: one step's statistics as a typed record (the stats file's lines)
    vocabulary.py        token ids checked against the datasets' vocabulary
    pair_logprobs.py     `sequence_logprobs`: per-pair sums of a batch of preference pairs (for a DPO-style loss)
"""

from jaxdata._lazy import lazy_exports

__all__ = [
  "Pipeline",
  "StepPlanner",
  "host_row_blocks",
  "pair_attention_mask",
  "pair_references",
  "pair_sides",
  "pieces_for_hosts",
  "sequence_logprobs",
]

__getattr__, __dir__ = lazy_exports(
  __name__,
  {
    "Pipeline": "jaxdata.pipeline.pipeline",
    "StepPlanner": "jaxdata.pipeline.planner",
    "host_row_blocks": "jaxdata.pipeline.planner",
    "pieces_for_hosts": "jaxdata.pipeline.planner",
    **dict.fromkeys(
      ("pair_attention_mask", "pair_references", "pair_sides", "sequence_logprobs"), "jaxdata.pipeline.pair_logprobs"
    ),
  },
  package_globals=globals(),
)
