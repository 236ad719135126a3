"""`SharedBuffer`: memory shared with a worker process through an inherited descriptor.

The buffer is an anonymous file (`memfd_create` on Linux; elsewhere an
unlinked temporary file) mapped by both processes. It has no name, so
nothing needs unlinking and nothing outlives the processes however they
end, and no `multiprocessing` resource-tracker process is started::

    main:    SharedBuffer.create(size)  -> fd, mapping
             Popen(..., pass_fds=[fd])   the worker gets the same descriptor number
    worker:  SharedBuffer(fd, size)            the same size, from the worker's spec
    both:    close() when done; the memory goes with the last mapping
"""

from __future__ import annotations

import mmap
import os
import tempfile

__all__ = ["SharedBuffer"]


class SharedBuffer:
  """A shared, writable mapping of `size` bytes; `buf` is its memoryview."""

  def __init__(self, fd: int, size: int) -> None:
    self.fd, self.size = fd, size
    self._mapping = mmap.mmap(fd, size)
    self.buf = memoryview(self._mapping)

  @classmethod
  def create(cls, size: int) -> SharedBuffer:
    """A new buffer of `size` >= 1 bytes (zeros)."""
    if hasattr(os, "memfd_create"):
      fd = os.memfd_create("jaxdata-slots")
    else:  # not Linux: an unlinked temporary file serves the same purpose
      fd, path = tempfile.mkstemp(prefix="jaxdata-slots-")
      os.unlink(path)
    os.ftruncate(fd, size)
    return cls(fd, size)

  def close(self) -> None:
    """Unmaps and closes the descriptor (views into `buf` must be gone)."""
    if self._mapping.closed:
      return
    self.buf.release()
    self._mapping.close()
    os.close(self.fd)
