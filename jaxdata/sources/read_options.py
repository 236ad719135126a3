"""`ReadOptions`: how a `TokenDataset` reads (threads, ArrayRecord reader options, flat files' reader)."""

from __future__ import annotations

import dataclasses

__all__ = ["ReadOptions"]

FLAT_READERS = ("mmap", "tensorstore")


@dataclasses.dataclass(frozen=True)
class ReadOptions:
  """How `TokenDataset.read` reads.

  Attributes:
    num_threads: shards read concurrently within one `read` call; 1 reads in
      the calling thread. (The ArrayRecord reader holds the GIL while it
      reads, so more Python threads help little; its own C++ threads do.)
    reader_options: ArrayRecord reader options; the default tunes for random
      access: no read-ahead, and the reader's own parallelism within a call.
    flat_reader: how local megatron / flat token files are read: "mmap"
      (memory maps, the fastest here) or "tensorstore" (its file kvstore).
      Files in gs:// or s3:// are always read through tensorstore.
  """

  num_threads: int = 2
  reader_options: str = "readahead_buffer_size:0"
  flat_reader: str = "mmap"

  def __post_init__(self) -> None:
    if not isinstance(self.num_threads, int) or self.num_threads < 1:
      raise ValueError(f"num_threads: must be an int >= 1, got {self.num_threads!r}")
    if self.flat_reader not in FLAT_READERS:
      raise ValueError(f"flat_reader: {self.flat_reader!r} is not one of {FLAT_READERS}")
