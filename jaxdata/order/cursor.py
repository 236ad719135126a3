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


class LookAhead:
  """A cursor's look-ahead buffer: the next documents in order as (pass, position, record, length)
  arrays, `start` the first not yet emitted, `final` once they are all the dataset may still supply,
  and the pick loop's encoded lengths (`DatasetCursor.encoded_lengths`) cached for one row length."""

  def __init__(self) -> None:
    empty = np.zeros(0, np.int64)
    self.passes = self.positions = self.records = self.lengths = empty
    self.start = 0
    self.final = False
    self.encoded: list[int] | None = None
    self.encoded_for = -1  # the row length `encoded` was counted at

  def compact(self) -> None:
    """Drops the emitted documents (before `start`)."""
    if self.start:
      self.passes, self.positions, self.records, self.lengths = (
        a[self.start :] for a in (self.passes, self.positions, self.records, self.lengths)
      )
      self.start = 0
      self.encoded = None


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
    self.ahead = LookAhead()

  @property
  def start(self) -> int:
    """The look-ahead's first document not yet emitted (the pick loop's index 0 is there)."""
    return self.ahead.start

  def counted(self, lengths: np.ndarray, seq_len: int) -> np.ndarray:
    """The tokens the mixture counts for documents of these lengths: what packing keeps."""
    return lengths if self.kept is None else self.kept(lengths, seq_len)

  @property
  def completed_passes(self) -> int:
    return self.pass_index + (1 if self.position == self.num_records else 0)

  def ensure(self, docs: int, tokens: int, seq_len: int = 0) -> None:
    """Extends the buffer to >= `docs` documents or >= `tokens` counted tokens ahead
    (at rows of `seq_len`), or to everything the dataset may still supply."""
    ahead = self.ahead
    have_docs = ahead.lengths.size - ahead.start
    if ahead.final or have_docs >= docs or int(self.counted(ahead.lengths[ahead.start :], seq_len).sum()) >= tokens:
      return
    self.ahead.compact()
    have_tokens = int(self.counted(ahead.lengths, seq_len).sum())
    pieces = [(ahead.passes, ahead.positions, ahead.records, ahead.lengths)]
    if have_docs:
      next_pass, next_pos = int(ahead.passes[-1]), int(ahead.positions[-1]) + 1
    else:
      next_pass, next_pos = self.pass_index, self.position
    max_passes = self.settings.max_passes
    while have_docs < docs and have_tokens < tokens:
      if next_pos == self.num_records:
        next_pass, next_pos = next_pass + 1, 0
      if max_passes is not None and next_pass >= max_passes:
        ahead.final = True
        break
      stop = min(self.num_records, next_pos + max(_CHUNK, docs - have_docs))
      positions = np.arange(next_pos, stop, dtype=np.int64)
      records = self.order.records(next_pass, positions)
      lengths = self.lengths[records].astype(np.int64)
      pieces.append((np.full(positions.size, next_pass, np.int64), positions, records, lengths))
      have_docs += positions.size
      have_tokens += int(self.counted(lengths, seq_len).sum())
      next_pos = stop
    ahead.passes, ahead.positions, ahead.records, ahead.lengths = (
      np.concatenate([p[i] for p in pieces]) for i in range(4)
    )
    ahead.encoded = None

  def encoded_lengths(self, seq_len: int = 0) -> list[int]:
    """The buffer's counted lengths (rows of `seq_len`) as a list for the pick loop, with marks.

    A document completing a pass of a stop_after_passes dataset is stored as
    ~length (negative); the list ends with END_OF_DATASET (final buffer) or
    END_OF_BUFFER. The loop then tests one sign per document.
    """
    ahead = self.ahead
    if ahead.encoded is None or (self.kept is not None and ahead.encoded_for != seq_len):
      ahead.encoded_for = seq_len
      encoded = self.counted(ahead.lengths, seq_len).copy()
      if self.settings.policy == "passes":
        last = ahead.positions == self.num_records - 1
        encoded[last] = ~encoded[last]
      ahead.encoded = [*encoded.tolist(), END_OF_DATASET if ahead.final else END_OF_BUFFER]
    return ahead.encoded

  def consume(self, stop: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Emits buffer items [start, stop); returns their pass, record and length."""
    ahead = self.ahead
    part = slice(ahead.start, stop)
    out = (ahead.passes[part], ahead.records[part], ahead.lengths[part])
    if stop > ahead.start:
      self.pass_index = int(ahead.passes[stop - 1])
      self.position = int(ahead.positions[stop - 1]) + 1
    ahead.start = stop
    return out
