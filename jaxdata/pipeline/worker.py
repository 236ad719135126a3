"""The body of a pipeline worker process: plan, read and assemble steps into shared memory.

A worker opens the config's datasets itself, plans every step (planning
is cheap and sequential), reads and assembles the steps it is given
(step % count == index) and writes each into a free slot of its shared
memory ring. Messages are JSON over a pipe (no pickle)::

    main -> worker   {"kind": "start", "generation": g, "state": S}    plan on from state S; every slot free
                     {"kind": "free", "generation": g, "slot": i}     the main process copied slot i out
                     {"kind": "stop"}
    worker -> main   {"kind": "ready", "fingerprint": F}              datasets open (or "error")
                     {"kind": "step", "generation": g, "step": s, "slot": i, "rows", "seq_len",
                      "local_rows", "state", "stats"}
                     {"kind": "end" | "error", "generation": g, ...}

A worker is `python -m jaxdata.pipeline.worker FD`, FD one end of a
socket pair; its first message is {"config": cfg.to_dict(), "spec": ...}.
It imports neither jax nor the training script, so it starts in about the
time it takes to import NumPy and open the files.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import sys
from multiprocessing import resource_tracker, shared_memory
from multiprocessing.connection import Connection
from typing import Any, Mapping

import numpy as np

from jaxdata.config.pipeline_config import PipelineConfig
from jaxdata.pipeline.parts import Parts, open_parts, state_snapshot
from jaxdata.pipeline.planner import encoded_state
from jaxdata.pipeline.stats import StatsRecorder
from jaxdata.pipeline.window import END, StepProducer
from jaxdata.transforms.assemble import FEATURES

__all__ = ["WorkerSpec", "main", "send", "serve", "slot_views"]


@dataclasses.dataclass(frozen=True)
class WorkerSpec:
  """What one worker needs besides the config."""

  index: int
  count: int
  memory_name: str
  slots: int
  slot_tokens: int  # the most tokens of this host's rows in any step
  rows_by_seq_len: dict[int, list[int]]  # the global rows this host holds, per sequence length
  read_ahead_tokens: int
  read_threads: int


def slot_views(buffer: memoryview, slot: int, slot_tokens: int, rows: int, seq_len: int) -> dict[str, np.ndarray]:
  """The int32 [rows, seq_len] arrays of every feature in `slot` of a ring."""
  views = {}
  for f, name in enumerate(FEATURES):
    offset = (slot * len(FEATURES) + f) * slot_tokens * 4
    views[name] = np.ndarray((rows, seq_len), np.int32, buffer=buffer, offset=offset)
  return views


def send(conn: Connection, message: Mapping[str, Any]) -> None:
  conn.send_bytes(json.dumps(message).encode())


def main(argv: list[str]) -> None:
  """`python -m jaxdata.pipeline.worker FD`."""
  conn = Connection(int(argv[1]))
  try:
    setup = json.loads(conn.recv_bytes())
    spec = WorkerSpec(**setup["spec"])
    cfg = PipelineConfig.from_dict(setup["config"])
  except EOFError:  # the main process went away before it sent anything
    return
  serve(conn, cfg, spec)


def serve(conn: Connection, cfg: PipelineConfig, spec: WorkerSpec) -> None:
  """Runs a worker until told to stop or the main process goes away."""
  try:
    parts = open_parts(cfg, spec.read_threads)
  except Exception as error:  # noqa: BLE001 -- handed to the main process, which raises it
    send(conn, _error_message(error, -1))
    return
  memory = shared_memory.SharedMemory(spec.memory_name)
  # The main process owns (and unlinks) the memory; this process's tracker must not.
  resource_tracker.unregister(memory._name, "shared_memory")  # noqa: SLF001 -- the name the tracker knows
  try:
    send(conn, {"kind": "ready", "fingerprint": parts.fingerprint})
    _Worker(conn, cfg, spec, parts, memory.buf).run()
  except (EOFError, BrokenPipeError, KeyboardInterrupt):  # the main process is gone or stopping
    pass
  finally:
    parts.reader.close()
    memory.close()


class _Worker:
  def __init__(self, conn: Connection, cfg: PipelineConfig, spec: WorkerSpec, parts: Parts, buffer: memoryview) -> None:
    self.conn, self.spec, self.buffer = conn, spec, buffer
    self.planner = parts.planner
    self.recorder = StatsRecorder(cfg.names, cfg.mixture.unit, cfg.schedule(), None)
    rows = {int(k): np.asarray(v, np.int64) for k, v in spec.rows_by_seq_len.items()}
    self.producer = StepProducer(
        cfg, parts.planner, parts.reader, self.recorder, lambda _rows, seq_len: rows[seq_len],
        spec.read_ahead_tokens, functools.partial(state_snapshot, parts.planner, parts.fingerprint, self.recorder),
        keep=lambda step: step % spec.count == spec.index,
    )
    self.generation = -1  # nothing to do until the first "start"
    self.free: set[int] = set()
    self.idle = True  # ended, failed or not started: wait for a message

  def run(self) -> None:
    while True:
      while self.idle or not self.free or self.conn.poll():
        if not self._handle(json.loads(self.conn.recv_bytes())):
          return
      slot = min(self.free)
      try:
        item = self.producer.produce(
            lambda rows, seq_len: slot_views(self.buffer, slot, self.spec.slot_tokens, rows, seq_len))
      except Exception as error:  # noqa: BLE001 -- handed to the main process, which raises it
        send(self.conn, _error_message(error, self.generation))
        self.idle = True
        continue
      if item is END:
        send(self.conn, {"kind": "end", "generation": self.generation})
        self.idle = True
        continue
      self.free.remove(slot)  # the step was assembled in it
      stats = item.stats
      rows, seq_len = stats["rows"], stats["seq_len"]
      local = item.batch["tokens"].shape[0]
      send(self.conn, {
          "kind": "step", "generation": self.generation, "step": stats["step"], "slot": slot, "rows": rows,
          "seq_len": seq_len, "local_rows": local, "state": encoded_state(item.state), "stats": stats,
      })

  def _handle(self, message: dict[str, Any]) -> bool:
    kind = message["kind"]
    if kind == "stop":
      return False
    if kind == "start":
      self.generation = message["generation"]
      state = message["state"]
      self.planner.set_state(state)  # checked by the main process already
      self.recorder.restore(state["tokens_per_source"])
      self.producer.restart(state)
      self.free = set(range(self.spec.slots))
      self.idle = False
    elif kind == "free" and message["generation"] == self.generation:
      self.free.add(message["slot"])
    return True


def _error_message(error: BaseException, generation: int) -> dict[str, Any]:
  return {"kind": "error", "generation": generation, "type": type(error).__name__, "message": str(error)}


if __name__ == "__main__":
  main(sys.argv)
