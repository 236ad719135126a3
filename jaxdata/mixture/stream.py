"""`DocumentStream`: the mixture of datasets as one deterministic stream of documents.

Every document of training is decided here from metadata alone (record
counts and lengths), and the state is a few integers per dataset::

    per dataset d:  DatasetOrder(pass p) -> records     DatasetCursor (pass, position, taken)
    per position:   pick d (an `Interleave`: exact or random), with the weights of the step
                    emit DocRef(d, pass, record, length) and advance d's cursor
    end:            a picked "stop" / last-pass "repeat" dataset has no next document, or
                    every stop_after_passes dataset completed its passes

>>> from jaxdata.config import PipelineConfig
>>> cfg = PipelineConfig.from_dict({"datasets": [{"name": "a"}, {"name": "b"}],
...     "mixture": {"weights": {"a": 1, "b": 1}, "unit": "documents"},
...     "shuffle_shards": False, "shuffle_block_size": None})
>>> meta = {"a": DatasetMeta.from_lengths([3, 3, 3]), "b": DatasetMeta.from_lengths([5])}
>>> [(r.dataset, r.pass_index, r.record) for r in DocumentStream(cfg, meta)]
[('a', 0, 0), ('b', 0, 0), ('a', 0, 1), ('b', 1, 0), ('a', 0, 2)]
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Iterator, Mapping
from fractions import Fraction
from typing import Any

import numpy as np

from jaxdata.config.pipeline_config import PipelineConfig
from jaxdata.config.resolve import DatasetSettings
from jaxdata.config.validate import is_int
from jaxdata.mixture.changes import ConfigChange
from jaxdata.mixture.documents import DocBatch, DocRef
from jaxdata.mixture.endless import check_can_end, check_some_kept
from jaxdata.mixture.interleave import StreamPosition, make_interleave
from jaxdata.mixture.metadata import DatasetMeta, checked_metadata, load_metadata, window_options
from jaxdata.mixture.pick_loops import PassMarks, PickLoop
from jaxdata.mixture.stream_state import CursorState, StreamState
from jaxdata.mixture.updates import MixtureUpdates
from jaxdata.mixture.weights import MixtureWeights
from jaxdata.order.cursor import DatasetCursor
from jaxdata.order.dataset_order import DatasetOrder, ShuffleOptions
from jaxdata.order.sampled import SampledOrder

__all__ = [
  "DatasetMeta",
  "DocumentStream",
  "load_metadata",
  "window_options",
]

# One pick loop takes at most this many documents / tokens: look-ahead buffers
# of either size can then never run dry inside it.
CALL_DOCS = 1 << 16
CALL_TOKENS = 1 << 26
_UNLIMITED = 1 << 62


class DocumentStream:
  """The mixture as one stream of documents, from metadata alone (no token is read).

  `take(step, max_docs=..., max_tokens=...)` returns the next documents for
  the step being built (the packer's call); iterating yields one `DocRef` at
  a time, with the step = tokens so far // (global_batch_size x seq_len).
  The output never depends on how it is cut into `take` calls.

  Args:
    cfg: the pipeline config (its datasets, mixture, schedule, pass policies).
    metadata: per dataset name, its `DatasetMeta` (`load_metadata(cfg)` reads
      the datasets' manifests and lengths indices; `DocumentStream.open(cfg)`
      does both).
    epoch: start every dataset at pass `epoch` of its keyed order.

  Raises:
    ConfigError: metadata missing for a dataset of the config.
    ValueError: `epoch` not an int >= 0.
    DatasetError: a dataset directory that cannot be opened (named).

  `get_state()` returns a JSON-able dict; `set_state(state)` continues
  exactly from it (a `ValueError` names what does not match).

  >>> import os, tempfile
  >>> from jaxdata import PipelineConfig, from_iterable
  >>> root = tempfile.mkdtemp()
  >>> _ = from_iterable([[1, 2, 3], [4, 5], [6]], out=os.path.join(root, "a"))
  >>> cfg = PipelineConfig.from_dict({"datasets": [{"name": "a", "path": os.path.join(root, "a"),
  ...                                               "shuffle_shards": False}], "mixture": {"weights": {"a": 1}}})
  >>> stream = DocumentStream.open(cfg)
  >>> sorted(stream.take(step=0, max_docs=3).length.tolist())
  [1, 2, 3]
  """

  @classmethod
  def open(cls, cfg: PipelineConfig, epoch: int = 0) -> DocumentStream:
    """The stream of `cfg`'s datasets, their metadata read from their manifests and lengths indices."""
    return cls(cfg, load_metadata(cfg), epoch)

  def __init__(self, cfg: PipelineConfig, metadata: Mapping[str, DatasetMeta] | None = None, epoch: int = 0) -> None:
    if not is_int(epoch) or epoch < 0:
      raise ValueError(f"epoch: expected an int >= 0, got {epoch!r}")
    if metadata is None:  # 0.3.0's spelling: the constructor read the datasets' files itself
      warnings.warn(
        "DocumentStream(cfg) without metadata: use DocumentStream.open(cfg) (the alias goes in jaxdata 0.5)",
        DeprecationWarning,
        stacklevel=2,
      )
      metadata = load_metadata(cfg)
    self.cfg = cfg
    self.epoch = epoch
    self.weights = MixtureWeights.of_config(cfg)  # the config's schedule, the loop's updates, the run's changes
    self.next_step = 0  # the first step no document has been taken for yet
    metas, self.shortest = checked_metadata(cfg, metadata)  # shortest: per dataset (long_docs: drop's check)
    largest_shard = max(int(m.shard_counts.max()) for m in metas)
    # What the mixture counts of a document: the tokens packing keeps of it (None: all of them).
    packing = cfg.packing
    kept = None if packing.keeps_every_token and not packing.special_tokens else packing.kept_tokens
    self.cursors: list[DatasetCursor] = []
    self._order_inputs: list[tuple[DatasetSettings, DatasetMeta, ShuffleOptions]] = []
    for settings, meta in zip(cfg.dataset_settings(), metas):
      num_records = int(meta.shard_counts.sum())
      options = ShuffleOptions(
        shuffle_shards=settings.shuffle_shards,
        shuffle_within_shard=settings.shuffle_within_shard,
        block_size=settings.resolve_block_size(largest_shard, num_records),
        reshuffle_on_repeat=settings.reshuffle_on_repeat,
        open_shards=settings.open_shards,
      )
      order = self._order(settings, meta, options, epoch)
      self.cursors.append(DatasetCursor(settings, order, meta.lengths, kept, cfg.packing.seq_len))
      self._order_inputs.append((settings, meta, options))
    self.emitted = 0  # documents
    self.tokens = 0
    self.ended = False
    self.ended_by: str | None = None  # the dataset that ended the stream (not part of the state)
    self.interleave = self._interleave(epoch)

  @property
  def names(self) -> tuple[str, ...]:
    return self.cfg.names

  @property
  def tokens_unit(self) -> bool:
    return self.cfg.mixture.unit == "tokens"

  @property
  def tokens_per_step(self) -> int:
    return self.cfg.tokens_per_step

  @property
  def updates(self) -> MixtureUpdates:
    """The weights the loop set (`update`), each from a step on."""
    return self.weights.updates

  @updates.setter
  def updates(self, updates: MixtureUpdates) -> None:
    self.weights = dataclasses.replace(self.weights, updates=updates)

  @property
  def changes(self) -> tuple[ConfigChange, ...]:
    """The configs this run changed from at restores (history, in the state)."""
    return self.weights.changes

  def _order(
    self, settings: DatasetSettings, meta: DatasetMeta, options: ShuffleOptions, epoch: int
  ) -> DatasetOrder | SampledOrder:
    if meta.pass_records is None:
      return DatasetOrder(settings.name, meta.shard_counts, options, self.cfg.seed, epoch)
    return SampledOrder(settings.name, int(meta.shard_counts.sum()), meta.pass_records, self.cfg.seed, epoch)

  def _interleave(self, epoch: int) -> Any:
    return make_interleave(
      self.cfg.mixture.interleave,
      self.cfg.seed,
      self.tokens_unit,
      self.exact_weights_at(0),
      [c.mean_length for c in self.cursors],
      epoch,
    )

  def _set_epoch(self, epoch: int) -> None:
    """Every dataset's order (and the random interleave) keyed for `epoch`; cursors are set after."""
    self.epoch = epoch
    for cursor, (settings, meta, options) in zip(self.cursors, self._order_inputs):
      cursor.order = self._order(settings, meta, options, epoch)
    self.interleave = self._interleave(epoch)

  @property
  def units(self) -> int:
    """Units emitted so far: tokens or documents, per the mixture's unit."""
    return self.tokens if self.tokens_unit else self.emitted

  def exact_weights_at(self, step: int) -> tuple[Fraction, ...]:
    """The weights in force at `step` (`MixtureWeights.exact_at`)."""
    return self.weights.exact_at(step)

  def weights_at(self, step: int) -> tuple[float, ...]:
    return self.weights.at(step)

  def drawn_through(self, step: int) -> None:
    """Documents for the steps up to `step` are drawn (a packer pulling several steps at once)."""
    self.next_step = max(self.next_step, step + 1)

  def update_starting_at(self, step: int) -> dict[str, float] | None:
    return self.weights.update_starting_at(step)

  def change_starting_at(self, step: int) -> ConfigChange | None:
    return self.weights.change_starting_at(step)

  def update(self, weights: Mapping[str, Any], at_step: int | None = None) -> int:
    """New weights from `at_step` on (default: the next step no document was taken for); returns the
    step. Steps already taken from are refused; on an error nothing changes."""
    step = self.next_step if at_step is None else at_step
    if not is_int(step) or step < 0:
      raise ValueError(f"at_step: must be an int >= 0, got {step!r}")
    if step < self.next_step:
      raise ValueError(f"at_step: {step} already has documents taken; the next step is {self.next_step}")
    self.weights = self.weights.with_update(step, weights)
    return step

  def taken(self) -> list[int]:
    """Per dataset, the mixture's units drawn so far (tokens counted, or documents): what the weights steer."""
    return [c.taken for c in self.cursors]

  def passes_completed(self) -> dict[str, int]:
    return {c.settings.name: c.completed_passes for c in self.cursors}

  def document_lengths(self, dataset: np.ndarray, record: np.ndarray) -> np.ndarray:
    """Token counts of documents (dataset index, record) from the lengths
    index; ValueError naming the first reference that does not exist."""
    if dataset.size and (dataset.min() < 0 or dataset.max() >= len(self.cursors)):
      raise ValueError(f"dataset index {int(dataset.max())} is not one of the config's {len(self.cursors)}")
    out = np.empty(dataset.size, np.int64)
    for d in np.unique(dataset).tolist():
      mine = dataset == d
      cursor = self.cursors[d]
      if record[mine].max() >= len(cursor.lengths):
        raise ValueError(f"record {int(record[mine].max())} of {self.names[d]}, which has {len(cursor.lengths)}")
      out[mine] = cursor.lengths[record[mine]]
    return out

  # ----------------------------------------------------------------- state

  def state(self) -> StreamState:
    """The state now, typed (cheap: taken for every planned step); its size does not grow with the
    data or the run's length."""
    return StreamState(
      epoch=self.epoch,
      unit=self.cfg.mixture.unit,
      interleave=self.cfg.mixture.interleave,
      emitted=self.emitted,
      tokens=self.tokens,
      ended=self.ended,
      datasets=tuple((c.settings.name, CursorState(c.pass_index, c.position, c.taken)) for c in self.cursors),
      segment=self.interleave.get_state(),
      next_step=self.next_step,
      updates=self.updates.pruned(self.next_step - 1),
      changes=self.changes,
    )

  def restore(self, state: StreamState) -> None:
    """Continues from `state` (`StreamState.from_json` checked its shape); the next documents equal
    the original run's. Only the mixture weights / schedule may differ from the run that saved it:
    cursors carry over, and the config's weights apply from now on. A `ValueError` names what does
    not fit this config; nothing changes then."""
    for key in ("unit", "interleave"):
      if getattr(state, key) != getattr(self.cfg.mixture, key):
        raise ValueError(
          f"stream state: mixture.{key} was {getattr(state, key)!r}, the config says {getattr(self.cfg.mixture, key)!r}"
        )
    if sorted(state.names) != sorted(self.names) or state.updates.names != tuple(self.names):
      raise ValueError(f"stream state: datasets {sorted(state.names)} do not match the config's {list(self.names)}")
    cursors = dict(state.datasets)
    for cursor in self.cursors:
      position = cursors[cursor.settings.name].position
      if position > cursor.num_records:
        raise ValueError(
          f"stream state: datasets.{cursor.settings.name}: position {position} beyond the {cursor.num_records} records"
        )
    exact = self.cfg.mixture.interleave == "exact"
    if exact and (state.segment is None or len(state.segment.weights) != len(self.names)):
      raise ValueError(f"stream state: the exact interleave needs a segment for {len(self.names)} datasets")
    if state.epoch != self.epoch:
      self._set_epoch(state.epoch)
    self.interleave.set_state(state.segment)
    for cursor in self.cursors:
      saved = cursors[cursor.settings.name]
      cursor.set(saved.pass_index, saved.position, saved.taken)
    self.emitted, self.tokens, self.ended = state.emitted, state.tokens, state.ended
    self.weights = dataclasses.replace(self.weights, updates=state.updates, changes=state.changes)
    self.next_step = state.next_step

  def get_state(self) -> dict[str, Any]:
    """The state as JSON (`StreamState.to_json`)."""
    return self.state().to_json()

  def set_state(self, state: Mapping[str, Any]) -> None:
    """Restores a `get_state()` (`restore`); a `ValueError` names what does not match."""
    self.restore(StreamState.from_json(state, self.names))

  # -------------------------------------------------------------- iteration

  def __iter__(self) -> Iterator[DocRef]:
    return self

  def __next__(self) -> DocRef:
    batch = self.take(self.tokens // self.tokens_per_step, max_docs=1)
    if not len(batch):
      raise StopIteration
    return batch.refs()[0]

  def take(self, step: int, max_docs: int | None = None, max_tokens: int | None = None) -> DocBatch:
    """The next documents, picked with the weights of `step`.

    Stops after `max_docs` documents, or once the documents reach
    `max_tokens` tokens (the one that crosses it included), or at the end
    of the stream (an empty batch from then on). Tokens are counted as
    packing keeps them at `step`'s row length (`PackingConfig.kept_tokens`:
    BOS / EOS added, `long_docs: truncate` cut, `drop` 0), in the limit as
    in the mixture's shares; the batch's `length` stays each document's own.
    """
    if max_docs is None and max_tokens is None:
      raise ValueError("take: give max_docs or max_tokens")
    for name, bound in (("max_docs", max_docs), ("max_tokens", max_tokens)):
      if bound is not None and (not is_int(bound) or bound < 1):
        raise ValueError(f"take: {name} must be an int >= 1, got {bound!r}")
    if self.ended:
      return DocBatch.concatenate(self.names, [])
    weights = self.exact_weights_at(step)
    self.next_step = max(self.next_step, step + 1)
    watch, _ = self._pass_watch()
    check_can_end(step, weights, self.weights.constant_from, self.cursors, watch)
    seq_len = self.cfg.packing.seq_len_at(step)
    check_some_kept(step, weights, seq_len, self.cfg.packing, self.shortest, self.names)
    self.interleave.begin(step, weights, self._position())
    eligible = [i for i, w in enumerate(weights) if w > 0]
    doc_limit = max_docs if max_docs is not None else _UNLIMITED
    token_limit = max_tokens if max_tokens is not None else _UNLIMITED
    batches = []
    while not self.ended and doc_limit > 0 and token_limit > 0:
      batch, counted = self._pick_once(eligible, min(doc_limit, CALL_DOCS), min(token_limit, CALL_TOKENS), seq_len)
      batches.append(batch)
      doc_limit -= len(batch)
      token_limit -= counted
    return batches[0] if len(batches) == 1 else DocBatch.concatenate(self.names, batches)

  # ---------------------------------------------------------------- picking

  def _position(self) -> StreamPosition:
    return StreamPosition(self.units, [c.taken for c in self.cursors], self.emitted)

  def _pick_once(self, eligible: list[int], doc_limit: int, token_limit: int, seq_len: int) -> tuple[DocBatch, int]:
    """One pick loop's documents, and the tokens counted for them."""
    for i in eligible:
      self.cursors[i].ensure(docs=doc_limit, tokens=token_limit, seq_len=seq_len)
    lengths: list[list[int]] = [[] for _ in self.cursors]  # an ineligible dataset's stays empty
    cursor = [0] * len(self.cursors)
    for i in eligible:
      lengths[i] = self.cursors[i].encoded_lengths(seq_len)
      cursor[i] = self.cursors[i].start
    loop = PickLoop(eligible, lengths, cursor, PassMarks(*self._pass_watch()), doc_limit, token_limit)
    result = self.interleave.pick(loop, self._position())
    self.ended = result.ended
    if result.ended:
      self.ended_by = self.names[result.ended_by]
    return self._emit(result.choices, seq_len)

  def _pass_watch(self) -> tuple[list[int], int]:
    """Per dataset, pass completions still needed (0 = none / not watched), and
    how many datasets still need some (-1: no stop_after_passes dataset)."""
    watch = [
      max(0, (c.settings.target_passes or 0) - c.completed_passes) if c.settings.policy == "passes" else 0
      for c in self.cursors
    ]
    if not any(c.settings.policy == "passes" for c in self.cursors):
      return watch, -1
    return watch, sum(1 for n in watch if n)

  def _emit(self, choices: list[int], seq_len: int) -> tuple[DocBatch, int]:
    picked = np.asarray(choices, dtype=np.int32)
    count = picked.size
    out_pass = np.empty(count, np.int64)
    out_record = np.empty(count, np.int64)
    out_length = np.empty(count, np.int64)
    counted_total = 0
    for i in np.unique(picked).tolist():
      cursor = self.cursors[i]
      mask = picked == i
      taken = int(mask.sum())
      passes, records, lengths = cursor.consume(cursor.start + taken)
      out_pass[mask], out_record[mask], out_length[mask] = passes, records, lengths
      counted = int(cursor.counted(lengths, seq_len).sum())
      cursor.taken += counted if self.tokens_unit else taken
      counted_total += counted
    self.emitted += count
    self.tokens += counted_total
    return DocBatch(self.names, picked, out_pass, out_record, out_length), counted_total
