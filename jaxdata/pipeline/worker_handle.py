"""`WorkerHandle`: one worker process of a pipeline, its pipe and (a reader's) slot ring.

The main process talks to a worker through a socket pair (JSON messages, a
span's pieces as raw bytes after their header; `jaxdata.pipeline.worker_process`
is the other end). A worker that dies is named in the error its handle
raises and can be started again on the same shared memory (`respawned`).
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import subprocess
import sys
import threading
from multiprocessing.connection import Connection

from jaxdata.errors import CheckpointError, ConfigError, DatasetError, InputFormatError, WorkerStartError
from jaxdata.pipeline.messages import (
  Message,
  Setup,
  SpanPlanned,
  Stop,
  WorkerError,
  WorkerSpec,
  message_from_json,
  send,
)
from jaxdata.pipeline.shared_buffer import SharedBuffer
from jaxdata.pipeline.spec import PipelineSpec

__all__ = ["WorkerGone", "WorkerHandle", "close_all", "raised"]

POLL_S = 0.1  # how often a wait checks that the worker is alive (and lets Ctrl-C in)

_ERRORS: dict[str, type[Exception]] = {
  e.__name__: e
  for e in (
    DatasetError,
    ConfigError,
    CheckpointError,
    InputFormatError,
    ValueError,
    IndexError,
    KeyError,
    OSError,
    RuntimeError,
    MemoryError,
  )
}


class WorkerGone(RuntimeError):
  """A worker process exited or closed its pipe (the message names it, its pid and its exit code)."""


def raised(message: WorkerError) -> Exception:
  """A worker's error as the exception it was (of a kind jaxdata raises; else a RuntimeError), with the
  worker's traceback as a note (printed under the main process's own)."""
  error = _ERRORS.get(message.type, RuntimeError)(message.message)
  if message.trace:
    error.add_note(f"in the worker process:\n{message.trace.rstrip()}")
  return error


class WorkerHandle:
  """One worker process, its pipe and (a reader's) shared memory ring."""

  def __init__(self, pipeline: PipelineSpec, spec: WorkerSpec, memory: SharedBuffer | None) -> None:
    self.pipeline, self.memory = pipeline, memory
    if memory is not None:  # the ring's descriptor, as the process inherits it
      spec = dataclasses.replace(spec, memory_fd=memory.fd)
    self.spec = spec
    self.name = spec.name
    try:
      ours, theirs = socket.socketpair()
    except OSError as e:  # no descriptor left
      raise WorkerStartError(f"{self.name} could not be started: {e}") from e
    # Blocking, whatever socket.setdefaulttimeout says (Beam's GCP auth sets 60 s): a socket with a timeout is
    # non-blocking underneath, and the worker reads its descriptor raw (EAGAIN: it died at its first read).
    ours.setblocking(True)
    theirs.setblocking(True)
    inherited = [theirs.fileno()] + ([memory.fd] if memory is not None else [])
    try:
      with theirs:
        self.process = subprocess.Popen(
          [sys.executable, "-m", "jaxdata.pipeline.worker_process", str(theirs.fileno())],
          pass_fds=inherited,
          env=_child_environment(),
          # A session (and process group) of its own: a terminal's Ctrl-C reaches the training process,
          # which stops or restarts its workers; reaching them too, it killed them mid-message.
          start_new_session=True,
        )
    except OSError as e:  # no process left, an interpreter that cannot be run
      ours.close()
      raise WorkerStartError(f"{self.name} could not be started: {e}") from e
    self.conn = Connection(ours.detach())
    self._sending = threading.Lock()  # the pipeline's thread and its prefetch thread both send to a planner
    try:
      send(self.conn, Setup(pipeline.to_dict(), dataclasses.asdict(spec)))
    except OSError:  # BrokenPipeError: it exited before reading its config; the next receive says how
      pass
    self.ready = False
    self.failed = False  # it sent an error instead of "ready" (and exits)

  def receive(self) -> Message:
    """The next message, waiting for it (in POLL_S slices: Ctrl-C gets in)."""
    while not self.conn.poll(POLL_S):
      if self.process.poll() is not None:
        raise self.gone()
    return self._read()

  def receive_ready(self) -> Message | None:
    """The next message if one has arrived, else None."""
    return self._read() if self.conn.poll(0) else None

  def receive_current(self, generation: int, wait: bool) -> tuple[Message, bytes] | None:
    """The next message of `generation` and the pieces that follow a span (b"" after any other), waiting
    for it if `wait` (else None if none has arrived). Messages of an older generation are dropped."""
    while True:
      message = self.receive() if wait else self.receive_ready()
      if message is None:
        return None
      try:
        payload = self.payload() if isinstance(message, SpanPlanned) else b""
      except KeyboardInterrupt:
        self.abandon()
        raise
      if getattr(message, "generation", None) == generation:
        return message, payload

  def payload(self) -> bytes:
    """The raw bytes that follow a span's header (already sent with it)."""
    try:
      return self.conn.recv_bytes()
    except (EOFError, OSError):
      raise self.gone() from None

  def _read(self) -> Message:
    try:
      return message_from_json(json.loads(self.conn.recv_bytes()))
    except (EOFError, OSError):  # OSError: reset by a process that was killed
      raise self.gone() from None
    except KeyboardInterrupt:
      self.abandon()
      raise

  def send(self, message: Message, payload: bytes | None = None) -> None:
    try:
      with self._sending:
        send(self.conn, message, payload)
    except OSError:  # BrokenPipeError, ConnectionResetError: the process was killed
      raise self.gone() from None
    except KeyboardInterrupt:
      self.abandon()
      raise

  def abandon(self) -> None:
    """A Ctrl-C inside a message (between its header and its payload, or within either) leaves the pipe
    out of step: the process is killed, and replaced like any dead worker when the steps start again."""
    self.process.kill()

  def gone(self) -> WorkerGone:
    try:
      code = self.process.wait(timeout=1)
    except subprocess.TimeoutExpired:
      return WorkerGone(f"{self.name} (pid {self.process.pid}) closed its pipe")
    return WorkerGone(f"{self.name} (pid {self.process.pid}) exited with code {code}")

  def respawned(self) -> WorkerHandle:
    """A new process in place of a dead one, on the same shared memory."""
    self.conn.close()
    return WorkerHandle(self.pipeline, self.spec, self.memory)

  def stop(self) -> None:
    """Asks the process to exit (`close` waits for it)."""
    try:
      send(self.conn, Stop())
    except (BrokenPipeError, OSError):
      pass

  def close(self) -> None:
    self.stop()
    try:
      self.process.wait(timeout=5)
    except subprocess.TimeoutExpired:
      self.process.kill()
      self.process.wait()
    self.conn.close()
    if self.memory is not None:
      self.memory.close()


def _child_environment() -> dict[str, str]:
  """This environment, with this interpreter's import path first: the worker
  imports the jaxdata this process runs, also one found through `sys.path`
  changes a script made (as `multiprocessing`'s spawn does)."""
  env = dict(os.environ)
  path = [entry for entry in sys.path if entry]
  if env.get("PYTHONPATH"):
    path.append(env["PYTHONPATH"])
  env["PYTHONPATH"] = os.pathsep.join(path)
  return env


def close_all(handles: list[WorkerHandle]) -> None:
  """Closes every handle, all told to stop first: they exit side by side, not one after another."""
  for handle in handles:
    handle.stop()
  while handles:
    handles.pop().close()
