"""`DatasetCursor`: one dataset's place in the stream and its look-ahead buffer.

The cursor is three integers (pass, position in the pass, units taken); the
buffer holds the next documents in order (pass, position, record, length),
computed in vectorised chunks from `DatasetOrder`, across pass boundaries
when the dataset may repeat::

    cursor (pass 1, position 7)
    buffer  [p1:7 p1:8 ... p1:N-1 | p2:0 p2:1 ...]   (pass-completing document marked)
             ^ start                                 END_OF_DATASET after the last allowed
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from jaxdata.config.resolve import DatasetSettings
from jaxdata.order.dataset_order import DatasetOrder
from jaxdata.order.sampled import SampledOrder


class RecordLengths(Protocol):
  """Per record, its length: an array, or the sources' memory-mapped or constant lengths."""

  def __getitem__(self, index: Any) -> Any: ...

  def mean(self) -> Any: ...

  def max(self) -> Any: ...


__all__ = ["DatasetCursor", "END_OF_BUFFER", "END_OF_DATASET", "KeptTokens"]

# Per document (stream lengths) and row length, the tokens packing keeps (`PackingConfig.kept_tokens`).
KeptTokens = Callable[[np.ndarray, int], np.ndarray]

_MEAN_SAMPLE = 1 << 20  # records the mean kept length is taken over (evenly spaced; all of a smaller set)

# Marks in the length lists the pick loops read (see `encoded_lengths`); a
# document that completes a watched pass is stored as ~length (negative).
END_OF_DATASET = -(1 << 62)  # after the last document the dataset may still supply
END_OF_BUFFER = -(1 << 61)  # after a look-ahead buffer that can still grow

_CHUNK = 4096  # documents per refill


class DatasetCursor:
  """Where one dataset stands (`pass_index`, `position`, `taken`) plus look-ahead.

  `kept` gives what packing keeps of each document at a row length; the pick
  loops read those counts (`encoded_lengths(seq_len)`), so a mixture counts
  the tokens that reach the batches. None: every token of every document.
  """

  def __init__(
    self,
    settings: DatasetSettings,
    order: DatasetOrder | SampledOrder,
    lengths: RecordLengths,
    kept: KeptTokens | None = None,
    seq_len: int = 0,
  ) -> None:
    self.settings = settings
    self.order = order
    self.lengths = lengths
    self.kept = kept
    self.num_records = order.num_records
    if kept is None:
      self.mean_length = float(lengths.mean())
    else:  # the kept mean at the final row length (the random interleave's draw scale)
      sample = np.unique(np.linspace(0, self.num_records - 1, min(self.num_records, _MEAN_SAMPLE)).astype(np.int64))
      self.mean_length = float(kept(np.asarray(lengths[sample], np.int64), seq_len).mean())
    self.set(0, 0, 0)

  def set(self, pass_index: int, position: int, taken: int) -> None:
    """Moves the cursor (the next document is `position` of pass `pass_index`)."""
    self.pass_index, self.position, self.taken = pass_index, position, taken
    empty = np.zeros(0, np.int64)
    self.buf_pass = self.buf_pos = self.buf_record = self.buf_len = empty
    self.start = 0  # buffer items before `start` are emitted
    self.final = False  # the buffer holds all the dataset may still supply
    self._encoded: list[int] | None = None
    self._encoded_for = -1  # the row length `_encoded` was counted at

  def counted(self, lengths: np.ndarray, seq_len: int) -> np.ndarray:
    """The tokens the mixture counts for documents of these lengths: what packing keeps."""
    return lengths if self.kept is None else self.kept(lengths, seq_len)

  @property
  def completed_passes(self) -> int:
    return self.pass_index + (1 if self.position == self.num_records else 0)

  def ensure(self, docs: int, tokens: int, seq_len: int = 0) -> None:
    """Extends the buffer to >= `docs` documents or >= `tokens` counted tokens ahead
    (at rows of `seq_len`), or to everything the dataset may still supply."""
    have_docs = self.buf_len.size - self.start
    if self.final or have_docs >= docs or int(self.counted(self.buf_len[self.start :], seq_len).sum()) >= tokens:
      return
    self._compact()
    have_tokens = int(self.counted(self.buf_len, seq_len).sum())
    pieces = [(self.buf_pass, self.buf_pos, self.buf_record, self.buf_len)]
    if have_docs:
      next_pass, next_pos = int(self.buf_pass[-1]), int(self.buf_pos[-1]) + 1
    else:
      next_pass, next_pos = self.pass_index, self.position
    max_passes = self.settings.max_passes
    while have_docs < docs and have_tokens < tokens:
      if next_pos == self.num_records:
        next_pass, next_pos = next_pass + 1, 0
      if max_passes is not None and next_pass >= max_passes:
        self.final = True
        break
      stop = min(self.num_records, next_pos + max(_CHUNK, docs - have_docs))
      positions = np.arange(next_pos, stop, dtype=np.int64)
      records = self.order.records(next_pass, positions)
      lengths = self.lengths[records].astype(np.int64)
      pieces.append((np.full(positions.size, next_pass, np.int64), positions, records, lengths))
      have_docs += positions.size
      have_tokens += int(self.counted(lengths, seq_len).sum())
      next_pos = stop
    self.buf_pass, self.buf_pos, self.buf_record, self.buf_len = (
      np.concatenate([p[i] for p in pieces]) for i in range(4)
    )
    self._encoded = None

  def encoded_lengths(self, seq_len: int = 0) -> list[int]:
    """The buffer's counted lengths (rows of `seq_len`) as a list for the pick loop, with marks.

    A document completing a pass of a stop_after_passes dataset is stored as
    ~length (negative); the list ends with END_OF_DATASET (final buffer) or
    END_OF_BUFFER. The loop then tests one sign per document.
    """
    if self._encoded is None or (self.kept is not None and self._encoded_for != seq_len):
      self._encoded_for = seq_len
      encoded = self.counted(self.buf_len, seq_len).copy()
      if self.settings.policy == "passes":
        last = self.buf_pos == self.num_records - 1
        encoded[last] = ~encoded[last]
      self._encoded = encoded.tolist()
      self._encoded.append(END_OF_DATASET if self.final else END_OF_BUFFER)
    return self._encoded

  def consume(self, stop: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Emits buffer items [start, stop); returns their pass, record and length."""
    part = slice(self.start, stop)
    out = (self.buf_pass[part], self.buf_record[part], self.buf_len[part])
    if stop > self.start:
      self.pass_index = int(self.buf_pass[stop - 1])
      self.position = int(self.buf_pos[stop - 1]) + 1
    self.start = stop
    return out

  def _compact(self) -> None:
    if self.start:
      self.buf_pass, self.buf_pos, self.buf_record, self.buf_len = (
        a[self.start :] for a in (self.buf_pass, self.buf_pos, self.buf_record, self.buf_len)
      )
      self.start = 0
      self._encoded = None
