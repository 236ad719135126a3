"""`Pipeline`: packed global batches, sharded over a mesh, from a config.

Every process runs the same plan and reads only its own rows::

    DocumentStream --take--> Packer.plan(step)         same StepPlan on every host
        -> rows held here (from the sharding)           jaxdata.sharding.local_rows
        -> batched reads of those rows' documents       TokenDataset.read, one call per dataset
        -> assemble_rows (NumPy) -> jax.Array           make_array_from_callback
    a background thread runs this `prefetch` steps ahead; get_state() is the
    state after the last batch handed out, never the prefetcher's.

Usage::

    pipe = Pipeline(jaxdata.load_config("pipeline.yaml"), mesh=mesh, data_axes=("data",))
    batch = next(pipe)              # {"tokens": jax.Array [rows, seq_len], ...}
"""

from __future__ import annotations

import collections
import dataclasses
import json
import queue
import threading
import time
from typing import Any, Iterator, Mapping, Sequence

import jax
import numpy as np
from jax.sharding import Mesh

from jaxdata.config import PipelineConfig
from jaxdata.errors import CheckpointError
from jaxdata.fingerprint import describe_changes, order_fingerprint
from jaxdata.mixture import DatasetMeta, DocumentStream
from jaxdata.slices import load_slice, slice_mesh
from jaxdata.sharding import batch_sharding, data_parallel_size, host_row_blocks, local_rows
from jaxdata.sources.dataset import ReadOptions, TokenDataset
from jaxdata.transforms.assemble import FEATURES, assemble_rows, pad_tokens
from jaxdata.transforms.packing import Packer, StepPlan
from jaxdata.transforms.pieces import Pieces

__all__ = ["Pipeline", "pieces_for_hosts"]

STATE_VERSION = 1
_TIMERS = ("plan", "read", "assemble", "wait")
_MAX_WINDOW_STEPS = 64


@dataclasses.dataclass
class _Prepared:
  """One step, ready to hand out, with the state after it."""

  batch: dict[str, Any]
  state: dict[str, Any]
  stats: dict[str, Any]


class _End:
  """Queue marker: the stream is exhausted."""


@dataclasses.dataclass
class _Planned:
  """One step planned and read, not yet assembled (shares its window's tokens)."""

  plan: StepPlan
  rows_here: np.ndarray
  index: np.ndarray  # the plan's pieces in this host's rows
  doc_tokens: np.ndarray  # padded int32 tokens of the whole read window
  doc_start: np.ndarray  # per piece in `index`
  state: dict[str, Any]
  stats: dict[str, Any]


class Pipeline:
  """Iterates dicts of global batch arrays for a `PipelineConfig`.

  Args:
    cfg: the pipeline config.
    mesh: a `jax.sharding.Mesh`; None yields NumPy arrays of all rows.
    data_axes: mesh axes the rows are sharded over (others replicate).
    tpu: instead of mesh / data_axes, a slice config name ("v5e-8",
      "v5p-128", "cpu-8", ...; see `jaxdata.slices`): its default mesh over
      jax.devices() and its data axes.
    prefetch: steps planned and read ahead by a background thread; 0 reads
      in the calling thread. Output never depends on it.
    read_ahead_tokens: plan this many tokens (of this host's rows) ahead and
      read their documents in one batched call per dataset: larger calls read
      faster (at least one step, at most 64). Output never depends on it.
    read_threads: threads reading the shards of one dataset concurrently
      (the ArrayRecord reader holds the GIL, so more help only on slow storage).
    stats_path: append one JSON line of `stats()` per step handed out
      (default: the config's `stats_path`).
    read_log: if a list, (steps, dataset, records) of every read is appended:
      the steps (a range) whose documents one batched read fetched.
  """

  def __init__(
      self,
      cfg: PipelineConfig,
      mesh: Mesh | None = None,
      data_axes: Sequence[str] = ("data",),
      *,
      tpu: str | None = None,
      prefetch: int = 2,
      read_ahead_tokens: int = 1 << 22,
      read_threads: int = 1,
      stats_path: str | None = None,
      read_log: list[tuple[range, str, np.ndarray]] | None = None,
  ) -> None:
    if prefetch < 0:
      raise ValueError(f"prefetch: must be >= 0, got {prefetch}")
    if tpu is not None:
      if mesh is not None:
        raise ValueError("tpu: give a slice name or a mesh, not both")
      spec = load_slice(tpu)
      mesh, data_axes = slice_mesh(spec), spec.data_axes
    if read_ahead_tokens < 1:
      raise ValueError(f"read_ahead_tokens: must be >= 1, got {read_ahead_tokens}")
    self.sharding = batch_sharding(mesh, data_axes) if mesh is not None else None
    if mesh is not None:  # checked before any file is opened
      shards = data_parallel_size(mesh, data_axes)
      tokens_per_step = cfg.batch.global_batch_size * cfg.packing.seq_len
      for seq_len in sorted({cfg.packing.seq_len, *(p.seq_len for p in cfg.packing.warmup)}):
        rows = tokens_per_step // seq_len
        if rows % shards:
          raise ValueError(
              f"batch.global_batch_size: {rows} rows (at seq_len {seq_len}) do not divide over "
              f"the {shards} data-parallel shards of mesh axes {tuple(data_axes)}"
          )
    self.cfg = cfg
    self.names = cfg.names
    self.datasets = [TokenDataset(d.path, ReadOptions(num_threads=read_threads)) for d in cfg.datasets]
    metas = {d.name: DatasetMeta.from_dataset(ds) for d, ds in zip(cfg.datasets, self.datasets)}
    self.stream = DocumentStream(cfg, metas)
    self.packer = Packer(cfg.packing, cfg.batch, self.stream)
    self.fingerprint = order_fingerprint(
        cfg, [ds.manifest.fingerprint for ds in self.datasets], [c.order for c in self.stream.cursors]
    )
    self.mesh = mesh
    self.prefetch = prefetch
    self.read_ahead_tokens = read_ahead_tokens
    self._window: collections.deque[_Planned | _End] = collections.deque()
    self.stats_path = stats_path if stats_path is not None else cfg.stats_path
    self.read_log = read_log
    self._cumulative = [0] * len(self.names)
    self._state = self._snapshot()
    self._last_stats: dict[str, Any] = {}
    self._timers = dict.fromkeys(_TIMERS, 0.0)
    self._queue: queue.Queue | None = None
    self._thread: threading.Thread | None = None
    self._stop = threading.Event()
    self._exhausted = False

  # ------------------------------------------------------------- iteration

  def __iter__(self) -> Iterator[dict[str, Any]]:
    return self

  def __next__(self) -> dict[str, Any]:
    if self._exhausted:
      raise StopIteration
    started = time.perf_counter()
    if self.prefetch == 0:
      item = self._produce()
    else:
      if self._thread is None:
        self._start_thread()
      item = self._queue.get()
    waited = time.perf_counter() - started
    if isinstance(item, BaseException):
      self._exhausted = True
      raise item
    if isinstance(item, _End):
      self._exhausted = True
      raise StopIteration
    self._timers["wait"] += waited
    item.stats["time_s"]["wait"] = waited
    self._state = item.state
    self._last_stats = item.stats
    if self.stats_path is not None:
      with open(self.stats_path, "a") as f:
        f.write(json.dumps(item.stats) + "\n")
    return item.batch

  def close(self) -> None:
    self._stop_thread()
    for dataset in self.datasets:
      dataset.close()

  def __enter__(self) -> "Pipeline":
    return self

  def __exit__(self, *exc: object) -> None:
    self.close()

  # ----------------------------------------------------------------- state

  def get_state(self) -> dict[str, Any]:
    """State after the last batch handed out (JSON-able, the same on every host)."""
    return json.loads(json.dumps(self._materialize(self._state)))

  def set_state(self, state: Mapping[str, Any]) -> None:
    """Continues from `state`; the next batches equal the original run's,
    whatever the mesh, device count or host count of either run.

    Raises `CheckpointError` if anything that determines the order changed
    (the message lists what), or the state is malformed or newer than this
    jaxdata. Only mixture weights, schedules and pass policies may change.
    """
    if not isinstance(state, Mapping) or not isinstance(state.get("version"), int):
      raise CheckpointError(f"pipeline state: expected a mapping with an int version, got {state!r:.200}")
    if state["version"] > STATE_VERSION:
      raise CheckpointError(
          f"pipeline state: format version {state['version']} is newer than this jaxdata "
          f"reads ({STATE_VERSION}); upgrade jaxdata"
      )
    missing = [k for k in ("fingerprint", "stream", "packer", "tokens_per_source") if k not in state]
    if missing:
      raise CheckpointError(f"pipeline state: missing {', '.join(missing)}")
    changes = describe_changes(state["fingerprint"], self.fingerprint)
    if changes:
      raise CheckpointError(
          "pipeline state: the config or data changed in what determines the order: "
          + "; ".join(changes)
      )
    cumulative = state.get("tokens_per_source")
    if not isinstance(cumulative, Mapping) or set(cumulative) != set(self.names):
      raise CheckpointError(f"pipeline state: tokens_per_source must name {list(self.names)}")
    self._stop_thread()
    self._window.clear()
    try:
      self.stream.set_state(state["stream"])
      self.packer.set_state(state["packer"])
    except ValueError as e:
      previous = self._materialize(self._state)  # leave the pipeline as it was
      self.stream.set_state(previous["stream"])
      self.packer.set_state(previous["packer"])
      raise CheckpointError(f"pipeline state: {e}") from e
    self._cumulative = [int(cumulative[n]) for n in self.names]
    self._state = self._snapshot()
    self._exhausted = False

  def stats(self) -> dict[str, Any]:
    """The last batch's statistics plus cumulative timings."""
    return {**self._last_stats, "time_total_s": dict(self._timers)}

  # --------------------------------------------------------------- producing

  def _snapshot(self) -> dict[str, Any]:
    """The state right now, cheaply: the carry stays a Pieces object until
    `get_state` encodes it (snapshots are taken for every planned step)."""
    return {
        "version": STATE_VERSION,
        "step": self.packer.step,
        "fingerprint": self.fingerprint,
        "stream": self.stream.get_state(),
        "packer": self.packer.get_state(encode_carry=False),
        "tokens_per_source": dict(zip(self.names, self._cumulative)),
    }

  @staticmethod
  def _materialize(snapshot: dict[str, Any]) -> dict[str, Any]:
    packer = snapshot["packer"]
    if isinstance(packer.get("carry"), Pieces):
      packer = {**packer, "carry": packer["carry"].to_json()}
    return {**snapshot, "packer": packer}

  def _produce(self) -> _Prepared | _End:
    if not self._window:
      self._fill_window()
    item = self._window.popleft()
    if isinstance(item, _End):
      return item
    started = time.perf_counter()
    plan, index = item.plan, item.index
    arrays = assemble_rows(
        plan.pieces.take(index), np.searchsorted(item.rows_here, plan.row[index]), plan.column[index],
        item.rows_here.size, plan.seq_len, item.doc_tokens, item.doc_start, self.cfg.packing,
    )
    batch = self._to_global(arrays, plan, item.rows_here)
    item.stats["time_s"]["assemble"] = time.perf_counter() - started
    self._timers["assemble"] += item.stats["time_s"]["assemble"]
    return _Prepared(batch, item.state, item.stats)

  def _fill_window(self) -> None:
    """Plans steps until `read_ahead_tokens` of this host's tokens (1 to 64
    steps), reads all their documents at once; the state is snapshot after
    every planned step. Assembly waits until a step is handed out."""
    started = time.perf_counter()
    steps, local_tokens = [], 0
    while local_tokens < self.read_ahead_tokens and len(steps) < _MAX_WINDOW_STEPS:
      plan = self.packer.plan()
      if plan is None:
        break
      rows_here = self._rows_here(plan)
      steps.append((plan, rows_here, plan.in_rows(rows_here), self._snapshot(), self._step_stats(plan)))
      local_tokens += rows_here.size * plan.seq_len
    planned = time.perf_counter()
    pieces = Pieces.concatenate([plan.pieces.take(index) for plan, _, index, _, _ in steps])
    covered = range(steps[0][0].step, steps[-1][0].step + 1) if steps else range(0)
    doc_tokens, doc_start = self._read(covered, pieces)
    doc_tokens = pad_tokens(doc_tokens)
    read = time.perf_counter()
    first = 0
    for plan, rows_here, index, state, stats in steps:
      stats["time_s"] = {"plan": (planned - started) / len(steps), "read": (read - planned) / len(steps)}
      for key, value in stats["time_s"].items():
        self._timers[key] += value
      self._window.append(_Planned(
          plan, rows_here, index, doc_tokens, doc_start[first : first + index.size], state, stats
      ))
      first += index.size
    if not steps or self.packer.done:
      self._window.append(_End())

  def _rows_here(self, plan: StepPlan) -> np.ndarray:
    if self.sharding is None:
      return np.arange(plan.rows)
    return local_rows(self.sharding, (plan.rows, plan.seq_len))

  def _read(self, steps: range, pieces: Pieces) -> tuple[np.ndarray, np.ndarray]:
    """Tokens of the pieces' documents, read once each; (flat tokens, start per piece)."""
    parts, doc_start, base = [], np.zeros(len(pieces), np.int64), 0
    for d, dataset in enumerate(self.datasets):
      mine = np.flatnonzero(pieces.dataset == d)
      if not mine.size:
        continue
      records, inverse = np.unique(pieces.record[mine], return_inverse=True)
      if self.read_log is not None:
        self.read_log.append((steps, self.names[d], records))
      ragged = dataset.read(*dataset.locate(records))
      parts.append(ragged.tokens)
      doc_start[mine] = base + ragged.offsets[:-1][inverse]
      base += ragged.tokens.size
    tokens = np.concatenate(parts) if parts else np.zeros(0, np.int64)
    return tokens, doc_start

  def _to_global(self, arrays: dict[str, np.ndarray], plan: StepPlan, rows_here: np.ndarray) -> dict[str, Any]:
    if self.sharding is None:
      return arrays
    shape = (plan.rows, plan.seq_len)

    def make(name: str) -> jax.Array:
      local = arrays[name]

      def piece(index: tuple[slice, ...]) -> np.ndarray:
        rows = range(*index[0].indices(shape[0]))
        start = int(np.searchsorted(rows_here, rows.start))
        return local[start : start + len(rows)][:, index[1]]

      return jax.make_array_from_callback(shape, self.sharding, piece)

    return {name: make(name) for name in FEATURES}

  def _step_stats(self, plan: StepPlan) -> dict[str, Any]:
    per_source = np.bincount(plan.pieces.dataset, weights=plan.pieces.length, minlength=len(self.names))
    per_source = per_source.astype(np.int64)
    self._cumulative = [c + int(t) for c, t in zip(self._cumulative, per_source)]
    total = max(1, int(per_source.sum()))
    cumulative_total = max(1, sum(self._cumulative))
    return {
        "step": plan.step,
        "rows": plan.rows,
        "seq_len": plan.seq_len,
        "tokens_per_source": dict(zip(self.names, per_source.tolist())),
        "share_batch": dict(zip(self.names, (per_source / total).tolist())),
        "share_cumulative": dict(zip(self.names, [c / cumulative_total for c in self._cumulative])),
        "target_share": dict(zip(self.names, self.stream.schedule.weights_at(plan.step))),
        "unit": self.cfg.mixture.unit,
        "padding_fraction": plan.padding_fraction,
        "pieces_split": plan.split_pieces,
        "truncated_tokens": plan.truncated_tokens,
        "final": plan.final,
        "passes": self.stream.passes_completed(),
    }

  # ---------------------------------------------------------------- threads

  def _start_thread(self) -> None:
    self._stop.clear()
    self._queue = queue.Queue(maxsize=self.prefetch)
    self._thread = threading.Thread(target=self._run, name="jaxdata-prefetch", daemon=True)
    self._thread.start()

  def _run(self) -> None:
    while not self._stop.is_set():
      try:
        item: Any = self._produce()
      except Exception as error:  # noqa: BLE001 -- handed to the consumer, which re-raises it
        item = error
      while not self._stop.is_set():
        try:
          self._queue.put(item, timeout=0.1)
          break
        except queue.Full:
          continue
      if isinstance(item, (_End, BaseException)):
        return

  def _stop_thread(self) -> None:
    if self._thread is None:
      return
    self._stop.set()
    self._thread.join()
    self._thread = None
    self._queue = None


def pieces_for_hosts(
    cfg: PipelineConfig,
    step: int,
    num_hosts: int,
    metadata: Mapping[str, DatasetMeta] | None = None,
) -> list[Pieces]:
  """The document pieces each of `num_hosts` hosts reads at `step`.

  Hosts split the rows evenly and in order (`host_row_blocks`). The plan is
  replayed from step 0 from metadata alone: no tokens are read.
  """
  stream = DocumentStream(cfg, metadata)
  packer = Packer(cfg.packing, cfg.batch, stream)
  plan = None
  while packer.step <= step:
    plan = packer.plan()
    if plan is None:
      raise ValueError(f"step: the stream ends before step {step}")
  assert plan is not None
  return [plan.pieces.take(plan.in_rows(rows)) for rows in host_row_blocks(plan.rows, num_hosts)]
