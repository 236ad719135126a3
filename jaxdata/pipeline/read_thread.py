"""`ReadThread`: a span's documents read on a thread of their own.

The prefetch thread plans and assembles, holding the GIL; a span's read
spends most of its time in ArrayRecord's native code, without it. Reading
the next span while this one is assembled overlaps the two::

    prefetch thread:  plan w+1 | assemble w, step by step ......... | plan w+2 | assemble w+1 ...
    read thread:               | read w+1 (one call per dataset)    |          | read w+2 ...

Reads run one at a time, in the order they were asked for, so the reader is
never used by two threads at once; a read whose span was dropped (a
restart) finishes unused, or is skipped if it had not begun. An error in a
read is raised by `result()` in the thread that needs the span.
"""

from __future__ import annotations

import concurrent.futures
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

__all__ = ["ReadThread"]


class ReadThread:
  """Runs `read(span)` calls on one daemon thread, in order.

  >>> reads = ReadThread(lambda span: [2 * x for x in span])
  >>> reads.submit([1, 2]).result()[0]
  [2, 4]
  >>> reads.close(timeout_s=5.0)
  True
  """

  def __init__(self, read: Callable[[Any], Any]) -> None:
    self._read = read
    self._jobs: queue.SimpleQueue[tuple[concurrent.futures.Future, Any] | None] = queue.SimpleQueue()
    self._thread: threading.Thread | None = None

  def submit(self, span: Any) -> concurrent.futures.Future:
    """A future of (`read(span)`, the seconds the read took)."""
    if self._thread is None:
      # A daemon thread: a read stalled on storage must not keep the process from exiting.
      self._thread = threading.Thread(target=self._run, name="jaxdata-read-ahead", daemon=True)
      self._thread.start()
    future: concurrent.futures.Future = concurrent.futures.Future()
    self._jobs.put((future, span))
    return future

  def close(self, timeout_s: float) -> bool:
    """Ends the thread after its current read; whether it ended within `timeout_s`."""
    if self._thread is None:
      return True
    self._jobs.put(None)
    self._thread.join(timeout_s)
    if self._thread.is_alive():
      return False
    self._thread = None
    return True

  def _run(self) -> None:
    while (job := self._jobs.get()) is not None:
      future, span = job
      if not future.set_running_or_notify_cancel():
        continue  # dropped before it began
      started = time.perf_counter()
      try:
        future.set_result((self._read(span), time.perf_counter() - started))
      except Exception as error:  # noqa: BLE001 -- raised by result() where the span is needed
        future.set_exception(error)
