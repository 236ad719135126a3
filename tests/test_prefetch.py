"""`Prefetcher.hold`: a batch handed out is dropped on the producer thread,
after the next one is handed out (freeing jax arrays releases the GIL; in
the training thread that cost a Python-bound loop a switch interval)."""

from __future__ import annotations

import threading
import time

from jaxdata.pipeline.prefetch import Prefetcher

WAIT_S = 60.0  # a safety bound for a failure, never reached when the test passes


class Batch:
  """Records the thread that drops its last reference."""

  freed_on: dict[int, str] = {}

  def __init__(self, number: int) -> None:
    self.number = number

  def __del__(self) -> None:
    Batch.freed_on[self.number] = threading.current_thread().name


def test_a_batch_handed_out_is_freed_on_the_producer_thread_after_the_next_one() -> None:
  Batch.freed_on.clear()
  counter = iter(range(10**6))
  prefetcher = Prefetcher(lambda: Batch(next(counter)), depth=2, last=lambda item: False)
  prefetcher.start()
  try:
    first = prefetcher.get()
    prefetcher.hold(first)
    assert first.number == 0
    del first  # the caller is done with it, but the prefetcher still holds it
    assert 0 not in Batch.freed_on
    for expected in range(1, 8):
      batch = prefetcher.get()
      prefetcher.hold(batch)
      assert batch.number == expected
      del batch
    # Batch n is retired when n + 1 is held; the producer drops what is retired after each
    # item it makes, and it makes one after every get(): so after get(7), 0 .. 5 go.
    deadline = time.monotonic() + WAIT_S
    while not all(n in Batch.freed_on for n in range(6)) and time.monotonic() < deadline:
      time.sleep(0.01)
    assert [Batch.freed_on.get(n) for n in range(6)] == ["jaxdata-prefetch"] * 6
    assert 7 not in Batch.freed_on  # the one handed out last is still held
  finally:
    prefetcher.stop()
