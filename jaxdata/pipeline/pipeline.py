"""`Pipeline`: packed global batches, sharded over a mesh, from a config.

Every process runs the same plan and reads only its own rows::

    StepPlanner.plan()                        same StepPlan on every host      planner.py
      -> rows held here (from the sharding)                                    sharding.py
      -> batched reads of those rows' documents, many steps per call           reader.py, read_spans.py
      -> assemble_rows (NumPy), step by step                                   assembly.py
      -> jax.Array (one batched transfer per feature)                          sharding.py
    a background thread runs this `prefetch` steps ahead (prefetch.py). Where the
    steps are planned and read is one choice, `StepMaking` (makers.py): with a
    mesh (on >= 4 cores) the planning runs in a process of its own and this
    process reads, assembles and makes the arrays from its read spans; with
    reader processes they read and assemble too (pooled_steps.py) and the
    global arrays are made in the caller's thread. Mixture updates: steering.py. get_state()
    is the state after the last batch, never the prefetcher's; a change of config: reconfigure.py.

Failure semantics (docs/state.md): an exception while producing step s, or
while writing its statistics, leaves the pipeline at step s (everything
planned or read ahead is dropped) and is raised; the next `next()` retries
step s. Nothing is skipped and the stream never ends because of an error.
An unreferenced pipeline stops its thread and closes its files.

Usage::

    pipe = Pipeline(jaxdata.load_config("pipeline.yaml"), mesh=mesh, data_axes=("data",))
    batch = next(pipe)              # {"tokens": jax.Array [rows, seq_len], ...}
"""

from __future__ import annotations

import dataclasses
import functools
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar, cast

import numpy as np

from jaxdata.checkpoint.state import PipelineState
from jaxdata.config.pipeline_config import PipelineConfig
from jaxdata.config.validate import check_bool
from jaxdata.errors import CheckpointError, PipelineClosedError
from jaxdata.pipeline.execution import Execution, StepMaking, asked_making
from jaxdata.pipeline.handout import HandedOut, Handout, producing
from jaxdata.pipeline.makers import sharded_maker
from jaxdata.pipeline.pipeline_parts import check_pipeline_arguments, log_stored_orders, open_parts, state_snapshot
from jaxdata.pipeline.producing import END, Prepared
from jaxdata.pipeline.raw_inputs import with_built_inputs
from jaxdata.pipeline.read_spans import READ_AHEAD
from jaxdata.pipeline.reconfigure import reconfigured
from jaxdata.pipeline.sharding import mesh_sharding
from jaxdata.pipeline.slices import SliceSpec, mesh_and_axes
from jaxdata.pipeline.spec import PipelineSpec
from jaxdata.pipeline.stats import StatsRecorder
from jaxdata.pipeline.steering import MixtureSteering
from jaxdata.pipeline.switch_interval import check_switch_interval_s
from jaxdata.pipeline.wait_warning import (
  WAIT_WARNING_S,
  check_wait_warning_s,
  warn_ended,
  warn_if_no_step,
  warn_if_waited,
)

if TYPE_CHECKING:  # jax is imported when a mesh is used (NumPy output starts without it)
  from jax.sharding import Mesh

__all__ = ["Pipeline"]


_Method = TypeVar("_Method", bound=Callable[..., Any])


def _one_call_at_a_time(method: _Method) -> _Method:
  """Holds the pipeline's call lock around `method`: calls from several threads run one after another,
  so a batch is handed out once and `get_state()` is the state after a batch some `next()` returned."""

  @functools.wraps(method)
  def serialized(self: Pipeline, *args: Any, **kwargs: Any) -> Any:
    with self._calls:
      return method(self, *args, **kwargs)

  return cast(_Method, serialized)


class Pipeline:
  """Iterates dicts of global batch arrays for a `PipelineConfig`.

  Args:
    cfg: the pipeline config.
    mesh: a `jax.sharding.Mesh`; None yields NumPy arrays of all rows.
    data_axes: mesh axes the rows are sharded over (others replicate).
    tpu: instead of mesh / data_axes, a slice ("v5e-8", "v5p-128", a slice
      YAML path, or `explicit_slice(shape, axes, data_axes)`; see
      `jaxdata.pipeline.slices`): its default mesh over jax.devices().
    prefetch: steps planned and read ahead by a background thread; 0 reads
      in the calling thread. Output never depends on it.
    making: where the steps are planned and read, a `StepMaking` (or its planning alone: "auto",
      "here", "process"): a planner process of its own, reader processes that read and assemble
      into shared memory. The default plans in a process with a mesh on >= 4 usable cores. Output
      and state never depend on it.
    read_ahead_tokens: plan this many tokens (of this host's rows) ahead and
      read their documents in one batched call per dataset: larger calls read
      faster (at least one step, at most 64). Output never depends on it.
    read_threads: threads reading one dataset's shards at once (help only on slow storage).
    stats_path: append a JSON line of `stats()` per step (default: the config's).
    epoch: start at pass `epoch` of every dataset's keyed order (the random
      interleave keyed by it too): a fresh, reproducible order per epoch.
    split: "train", or "eval": each dataset's held-out documents (`holdout`) once.
    wait_warning_s: a `next()` that waits longer than this for its step logs one line on the
      "jaxdata" logger (the step, the wait, the steps that were ready ahead); None: never.
    switch_interval_s: while the prefetch thread runs, the interpreter's GIL switch interval is
      at most this (`jaxdata.pipeline.switch_interval`; e.g. `SWITCH_INTERVAL_S`, 1 ms: a
      Python-bound loop then does not starve the thread); the program's own value comes back
      after. None (the default): leave it alone.
    workers, planner_process: deprecated spellings of `making` (`StepMaking(reader_processes=n)`,
      `StepMaking("process")` / `StepMaking("here")`); they warn and keep working for a release.
  """

  def __init__(
    self,
    cfg: PipelineConfig,
    mesh: Mesh | None = None,
    data_axes: Sequence[str] = ("data",),
    *,
    tpu: str | SliceSpec | None = None,
    prefetch: int = 2,
    making: StepMaking | str = "auto",
    read_ahead_tokens: int = READ_AHEAD,
    read_threads: int = 1,
    stats_path: str | None = None,
    epoch: int = 0,
    split: str = "train",
    wait_warning_s: float | None = WAIT_WARNING_S,
    switch_interval_s: float | None = None,
    workers: int | None = None,
    planner_process: bool | None = None,
  ) -> None:
    self._calls = threading.RLock()  # next(), get_state(), ... from several threads: one at a time
    making = asked_making(making, workers, planner_process)
    check_pipeline_arguments(prefetch, making, read_ahead_tokens)
    check_wait_warning_s(wait_warning_s)
    check_switch_interval_s(switch_interval_s)
    self.wait_warning_s = wait_warning_s
    mesh, sharding = mesh_sharding(cfg, mesh_and_axes(tpu, mesh, data_axes))  # checked before any file is opened
    cfg = with_built_inputs(cfg)  # raw inputs: their caches, built here once (workers get plain paths)
    spec = PipelineSpec(cfg, split=split, epoch=epoch, read_threads=read_threads)  # what worker processes get too
    parts = open_parts(spec)
    cfg = parts.cfg
    self.cfg, self.mesh = cfg, mesh
    self._recorder = StatsRecorder(
      cfg.names,
      cfg.mixture.unit,
      parts.planner.stream,
      stats_path if stats_path is not None else cfg.stats_path,
      parts.record_starts,
      parts.pair_slots,
    )
    self._planner = parts.planner
    # The maker and its thread hold no reference to the pipeline, so an
    # unreferenced pipeline is collected and its finalizer releases them.
    snapshot = functools.partial(state_snapshot, parts.planner, parts.fingerprint, self._recorder)
    maker, rows_here, output = sharded_maker(
      making, spec, parts, self._recorder, snapshot, sharding=sharding, prefetch=prefetch, read_ahead=read_ahead_tokens
    )
    produce = producing(maker, output, rows_here, self._recorder, parts.reader.masked, cfg.names, layout=cfg.layout)
    self._handout = Handout(maker, produce, parts.reader, prefetch, switch_interval_s)
    # Runs at exit too: a daemon thread still inside a native read when the
    # interpreter finalizes aborts the process ("terminate called ..."), so it is stopped first.
    self._finalizer = weakref.finalize(self, self._handout.release)
    self._state: PipelineState = snapshot()
    self._start = self._state  # step 0, for set_epoch
    self._exhausted = ""  # once the data ended: why next() raises StopIteration
    lag = cfg.mixture.update_lag_steps
    self._steering = MixtureSteering(
      maker, f"update_mixture on {cfg.names}", lag, self._planner.draw_reach, self._handout.depth
    )
    log_stored_orders(cfg)

  def __iter__(self) -> Iterator[dict[str, Any]]:
    return self

  def __next__(self) -> dict[str, Any]:
    # A Ctrl-C can land after the step was handed out, as the call lock is let go: that step is kept
    # and the state goes back before it, so the next call hands it out (only stores in between: no
    # call, so no other Ctrl-C can land there).
    handout = self._handout
    try:
      with self._calls:
        batch = self._next_batch()
    except KeyboardInterrupt:
      if handout.returning is not None:
        handout.kept, self._state, handout.returning = handout.returning, handout.returning.before, None
      raise
    handout.returning = None
    return batch

  def _next_batch(self) -> dict[str, Any]:
    self._check_open("next()")
    handout = self._handout
    if handout.kept is not None:  # cut off on its way out by a Ctrl-C: this call hands it out
      step, handout.kept = handout.kept, None
      handout.returning, self._state = step, step.after
      return step.batch
    if handout.interrupted:
      self._restart_at(self._state)
    if self._exhausted:
      raise StopIteration(self._exhausted)
    started = time.perf_counter()
    ready = handout.ready()
    handout.interrupted = True  # until this call hands its step out: cut off anywhere, the next call restarts
    try:
      item = handout.take()
      if isinstance(item, Prepared):
        waited = time.perf_counter() - started
        self._recorder.time(item.stats, "wait", waited)
        warn_if_waited(self.wait_warning_s, self._state.step, waited, ready, handout.ahead())
        after = self._steering.handed_out(item.state)  # tells the planning (it may wait): a Ctrl-C retries
        self._recorder.handed_out(item.stats)  # before the state advances: a failure retries the step
        step = HandedOut(item.batch, self._state, after)
    except KeyboardInterrupt:  # at once, even during a stalled read: the next call restarts
      handout.stop_prefetch(wait=False)
      raise
    except BaseException:  # re-raised: first go back to just after the last batch handed out
      self._restart_at(self._state)
      raise
    if item is END:
      handout.interrupted = False
      warn_if_no_step(self._state.step, self.cfg.tokens_per_step)
      self._exhausted = warn_ended(self._state.step, self._planner.stream.passes_completed())
      raise StopIteration(self._exhausted)
    handout.returning, self._state, handout.interrupted = step, after, False
    return step.batch

  def _restart_at(self, state: PipelineState) -> None:
    """Stops the prefetch thread and plans on from `state`; until that is done, the next call does it
    again (a Ctrl-C or an error inside leaves nothing half restarted)."""
    self._handout.interrupted = True
    self._handout.kept = None
    self._handout.stop_prefetch()
    with self._handout.making:  # a thread told to stop but not joined (cut off as it started) waits
      self._continue_from(state)
    self._handout.interrupted = False

  def close(self) -> None:
    """Stops the threads and processes and closes the files; `get_state()` still answers,
    every call that would make a batch raises `PipelineClosedError`."""
    self._finalizer()

  def _check_open(self, call: str) -> None:
    if not self._finalizer.alive:
      raise PipelineClosedError(
        f"{call}: the pipeline is closed (its state is still that after step {self._state.step}); "
        "build a new Pipeline and set_state(...) to go on"
      )

  def __enter__(self) -> Pipeline:
    return self

  def __exit__(self, *exc: object) -> None:
    self.close()

  @_one_call_at_a_time
  def get_state(self) -> dict[str, Any]:
    """State after the last batch handed out (JSON-able, the same on every host)."""
    return self._state.sealed()

  @_one_call_at_a_time
  def set_state(self, state: Mapping[str, Any] | PipelineState, reconfigure: bool = False) -> None:
    """Continues from `state` (the next batches equal the original run's, on any mesh or host count).
    `CheckpointError` (listing what changed) if anything that determines the order changed or the state
    is malformed; the pipeline is then left as it was. Weights, schedules and pass policies may change;
    with `reconfigure=True`, datasets and rows too, from the state's step on (docs/state.md)."""
    self._check_open("set_state()")
    check_bool(reconfigure, "reconfigure")
    checked = state if isinstance(state, PipelineState) else PipelineState.read(state)  # decoded once
    if reconfigure:
      checked = reconfigured(checked, self._start.fingerprint, self.cfg)
    checked.check_continues(self._start.fingerprint)
    try:
      self._restart_at(checked)
    except ValueError as e:
      self._restart_at(self._state)  # back to just after the last batch handed out
      raise CheckpointError(f"pipeline state: {e}") from e

  @_one_call_at_a_time
  def update_mixture(self, weights: Mapping[str, float], at_step: int | None = None) -> int:
    """New mixture weights from `at_step` on; returns that step.

    Default: the next step handed out plus `mixture.update_lag_steps` (32), a step fixed by the loop's
    calls, never by timing. Steps handed out never change. While the loop updates, the pipeline plans
    no step that the next default update could change, so an update at the default step reaches
    where planning runs (this process, the planner process, the workers) as it is and nothing made
    ahead is dropped; an earlier `at_step` plans the steps made ahead again. The update is part of
    the state: a restore replays it. Every host must make the same update at the same point (checked
    every UPDATE_CHECK_EVERY updates and at every checkpoint: a difference is a `ValueError` on
    every host naming the first that differed). Bad weights (NaN, negative, all zero, a dataset
    missing or unknown) are a `ConfigError` and change nothing.
    """
    self._check_open("update_mixture()")
    if self._exhausted:
      raise ValueError(
        f"update_mixture: the stream ended after step {self._state.step}; an update would never take effect "
        "(set_epoch or set_state start it again)"
      )
    if at_step is not None:
      if isinstance(at_step, bool) or not isinstance(at_step, (int, np.integer)):
        raise ValueError(f"at_step: must be an int, got {at_step!r}")
      at_step = int(at_step)
      earliest = self._steering.earliest(self._state)
      if at_step < earliest:
        raise ValueError(
          f"at_step: {at_step} is already planned; the earliest step an update can start at is {earliest}"
        )
    try:
      steered = self._steering.update(self._state, weights, at_step)
    except BaseException:  # re-raised: cut off before the planning had it, the update is not made
      self._handout.interrupted = True  # the next call plans again from the last state
      raise
    self._state = steered.state
    if not steered.adopted:  # a step from its step on is planned already: planned again, from the last handed out
      self._restart_at(self._state)
    return steered.at_step

  @_one_call_at_a_time
  def check_hosts_agree(self) -> None:
    """Checks now that every host made the same mixture updates at the same points (a collective:
    every host calls it together; the checkpoint save does). `ValueError` naming the first update
    that differed; a no-op on one process."""
    self._steering.agreement.check()

  @_one_call_at_a_time
  def set_epoch(self, epoch: int) -> None:
    """Starts over at step 0 of `epoch`, like `DistributedSampler.set_epoch` (before each epoch)."""
    self.set_state(self._start.at_epoch(epoch))

  @property
  def fingerprint(self) -> dict[str, Any]:
    """What determines this pipeline's order (the fingerprint every state it saves holds)."""
    return self._start.fingerprint.to_json()

  @property
  def prefetch(self) -> int:
    """The steps the prefetch thread makes ahead (the `prefetch` argument)."""
    return self._handout.prefetch

  @property
  def epoch(self) -> int:
    return self._planner.stream.epoch

  @_one_call_at_a_time
  def stats(self) -> dict[str, Any]:
    """The last batch's statistics plus cumulative timings."""
    return self._recorder.stats()

  def execution(self) -> Execution:
    """Where the steps are made now: worker processes, a fall back to this process, a read thread;
    how many mixture updates reached the planning as they were, and how many planned steps again."""
    return dataclasses.replace(
      self._handout.maker.execution(),
      updates_adopted=self._steering.adopted,
      updates_replanned=self._steering.replanned,
    )

  def _continue_from(self, state: PipelineState) -> None:
    self._planner.restore(state.step, state.stream, state.packer)
    self._recorder.restore(state.tokens_per_source)
    self._state = state_snapshot(self._planner, self._start.fingerprint, self._recorder)
    self._exhausted = ""
    self._steering.restarted(self._state.step)  # before the restart: a planner process starts with it
    self._handout.maker.restart(self._state)
