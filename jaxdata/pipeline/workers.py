"""`WorkerProducer`: steps from worker processes, through shared memory.

Planning, reading, decompression and assembly leave the training process:
`count` workers (spawned, so they hold no copy of jax or the caller's
state) each take every count-th step. The main process only copies a
step's rows out of shared memory and makes the batch (global `jax.Array`s
or NumPy), so the training thread keeps its GIL::

    worker w (steps s with s % count == w):  plan all, read + assemble its own -> slot of its ring
    main:  step s from worker s % count -> copy out of the slot (free it) -> Prepared (NumPy rows)

Until every worker has opened its files, steps are made in process (the
first batch does not wait for process start-up). Then the workers start from
the state after the last step made, and a restart (`set_state`, an error)
starts them again from the given state: outputs and states are exactly
those of the in-process path.
"""

from __future__ import annotations

import dataclasses
import json
import socket
import subprocess
import sys
import time
import weakref
from multiprocessing import shared_memory
from multiprocessing.connection import Connection
from typing import Any

import numpy as np

from jaxdata.config.pipeline_config import PipelineConfig
from jaxdata.errors import CheckpointError, ConfigError, DatasetError, InputFormatError
from jaxdata.pipeline.planner import encoded_state
from jaxdata.pipeline.stats import StatsRecorder
from jaxdata.pipeline.window import END, Prepared, RowsHere, StepProducer
from jaxdata.pipeline.worker import WorkerSpec, send, slot_views
from jaxdata.transforms.assemble import FEATURES

__all__ = ["WorkerProducer"]

POLL_S = 0.1  # how often a wait checks that the worker is alive (and lets Ctrl-C in)
_ERRORS: dict[str, type[Exception]] = {
    e.__name__: e for e in (DatasetError, ConfigError, CheckpointError, InputFormatError, ValueError,
                            IndexError, KeyError, OSError, RuntimeError, MemoryError)
}


class _Handle:
  """One worker process, its pipe and its shared memory ring."""

  def __init__(self, cfg: PipelineConfig, spec: WorkerSpec, memory: shared_memory.SharedMemory) -> None:
    self.cfg, self.spec, self.memory = cfg, spec, memory
    self.name = f"jaxdata worker {spec.index}"
    ours, theirs = socket.socketpair()
    with theirs:
      self.process = subprocess.Popen(
          [sys.executable, "-m", "jaxdata.pipeline.worker", str(theirs.fileno())], pass_fds=[theirs.fileno()]
      )
    self.conn = Connection(ours.detach())
    send(self.conn, {"config": cfg.to_dict(), "spec": dataclasses.asdict(spec)})
    self.ready = False

  def receive(self) -> dict[str, Any]:
    """The next message, waiting for it (in POLL_S slices: Ctrl-C gets in)."""
    while not self.conn.poll(POLL_S):
      if self.process.poll() is not None:
        raise self.gone()
    return self._read()

  def receive_ready(self) -> dict[str, Any] | None:
    """The next message if one has arrived, else None."""
    return self._read() if self.conn.poll(0) else None

  def _read(self) -> dict[str, Any]:
    try:
      return json.loads(self.conn.recv_bytes())
    except (EOFError, OSError):  # OSError: reset by a process that was killed
      raise self.gone() from None

  def send(self, message: dict[str, Any]) -> None:
    try:
      send(self.conn, message)
    except OSError:  # BrokenPipeError, ConnectionResetError: the process was killed
      raise self.gone() from None

  def gone(self) -> RuntimeError:
    try:
      code = self.process.wait(timeout=1)
    except subprocess.TimeoutExpired:
      return RuntimeError(f"{self.name} (pid {self.process.pid}) closed its pipe")
    return RuntimeError(f"{self.name} (pid {self.process.pid}) exited with code {code}")

  def respawned(self) -> "_Handle":
    """A new process in place of a dead one, on the same shared memory."""
    self.conn.close()
    return _Handle(self.cfg, self.spec, self.memory)

  def close(self) -> None:
    try:
      send(self.conn, {"kind": "stop"})
    except (BrokenPipeError, OSError):
      pass
    try:
      self.process.wait(timeout=5)
    except subprocess.TimeoutExpired:
      self.process.kill()
      self.process.wait()
    self.conn.close()
    self.memory.close()
    self.memory.unlink()


class WorkerProducer:
  """Produces `Prepared` steps like `StepProducer`, from `count` worker processes.

  `local` makes the steps until the workers are ready; it shares the
  pipeline's planner, so its states are the pipeline's.
  """

  def __init__(
      self, cfg: PipelineConfig, count: int, local: StepProducer, recorder: StatsRecorder,
      fingerprint: dict[str, Any], rows_here: RowsHere, slots: int,
      read_ahead_tokens: int, read_threads: int, start_state: dict[str, Any],
  ) -> None:
    if count < 1:
      raise ValueError(f"workers: must be >= 1, got {count}")
    slots = max(slots, 2)  # one being copied out, one being made
    self.local, self.recorder, self.fingerprint = local, recorder, fingerprint
    rows_by_seq_len = {}
    for seq_len in cfg.packing.seq_lens():
      rows = cfg.tokens_per_step // seq_len
      rows_by_seq_len[seq_len] = rows_here(rows, seq_len).tolist()
    slot_tokens = max(len(r) * seq_len for seq_len, r in rows_by_seq_len.items())
    self.slot_tokens = slot_tokens
    self.handles: list[_Handle] = []
    try:
      for index in range(count):
        memory = shared_memory.SharedMemory(create=True, size=max(1, slots * len(FEATURES) * slot_tokens * 4))
        spec = WorkerSpec(index, count, memory.name, slots, slot_tokens, rows_by_seq_len,
                          read_ahead_tokens, read_threads)
        self.handles.append(_Handle(cfg, spec, memory))
    except BaseException:  # re-raised: the workers started so far are stopped
      _close_all(self.handles)
      raise
    # At exit too: the workers stop and the shared memory is unlinked.
    self._finalizer = weakref.finalize(self, _close_all, self.handles)
    self.generation = 0
    self.next_step = start_state["step"]
    self.last_state = start_state  # after the last step made: where workers start from
    self.started = False
    self.from_workers = 0  # steps handed out that workers made

  def wait_ready(self, timeout_s: float = 60.0) -> None:
    """Blocks until every worker has opened its files (or raises its error)."""
    deadline = time.monotonic() + timeout_s
    while not self._workers_ready():
      for handle in self.handles:
        if handle.process.poll() is not None:
          raise handle.gone()
      if time.monotonic() > deadline:
        raise TimeoutError(f"workers: not ready after {timeout_s} s")
      time.sleep(0.01)

  def produce(self) -> Prepared | Any:
    if not self.started and not self._workers_ready():
      item = self.local.produce()
      if isinstance(item, Prepared):
        self.last_state, self.next_step = item.state, item.stats["step"] + 1
      return item
    if not self.started:
      self._start(self.last_state)
    handle = self.handles[self.next_step % len(self.handles)]
    while True:
      message = handle.receive()
      if message.get("generation") != self.generation:
        continue  # from before the last (re)start: its slots were freed by it
      if message["kind"] == "error":
        raise _ERRORS.get(message["type"], RuntimeError)(message["message"])
      if message["kind"] == "end":
        return END
      if message["step"] == self.next_step:
        break
      handle.send({"kind": "free", "generation": self.generation, "slot": message["slot"]})
    views = slot_views(handle.memory.buf, message["slot"], self.slot_tokens, message["local_rows"], message["seq_len"])
    # A copy, then the slot is free: on CPU a jax.Array may alias the NumPy memory it was made from.
    started = time.perf_counter()
    arrays = {name: np.array(view) for name, view in views.items()}
    handle.send({"kind": "free", "generation": self.generation, "slot": message["slot"]})
    stats = message["stats"]
    for timer, seconds in stats["time_s"].items():
      if timer != "assemble":  # added below, with this process's share
        self.recorder.timers[timer] += seconds
    self.recorder.time(stats, "assemble", stats["time_s"].get("assemble", 0.0) + time.perf_counter() - started)
    self.next_step += 1
    self.from_workers += 1
    return Prepared(arrays, message["state"], stats)

  def restart(self, state: dict[str, Any]) -> None:
    """Continue from `state` (the pipeline's planner is already set to it)."""
    self.local.restart(state)
    self.last_state, self.next_step = state, state["step"]
    if self.started:
      self._start(state)

  def close(self) -> None:
    self._finalizer()

  def _workers_ready(self) -> bool:
    """Whether every worker has opened its files; raises a worker's error
    (once: a worker that exited is started again on the next call)."""
    for i, handle in enumerate(self.handles):
      while not handle.ready:
        try:
          message = handle.receive_ready()
        except RuntimeError:  # it exited (after its error was raised): start it again
          self.handles[i] = handle.respawned()
          return False
        if message is None:
          return False
        if message["kind"] == "error":
          raise _ERRORS.get(message["type"], RuntimeError)(message["message"])
        if message["kind"] == "ready":
          if message["fingerprint"] != json.loads(json.dumps(self.fingerprint)):
            raise DatasetError("a dataset changed while the pipeline started: its worker process "
                               "opened files that order batches differently")
          handle.ready = True
    return True

  def _start(self, state: dict[str, Any]) -> None:
    dead = [i for i, handle in enumerate(self.handles) if handle.process.poll() is not None]
    for i in dead:  # a worker that died (killed, out of memory) is replaced; until it is ready, steps are local
      self.handles[i] = self.handles[i].respawned()
      self.started = False
    if dead:
      return
    self.generation += 1
    self.local.restart(state)
    portable = json.loads(json.dumps(encoded_state(state)))
    for handle in self.handles:
      handle.send({"kind": "start", "generation": self.generation, "state": portable})
    self.started = True


def _close_all(handles: list[_Handle]) -> None:
  while handles:
    handles.pop().close()
