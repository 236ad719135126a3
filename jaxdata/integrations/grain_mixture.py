"""`MixtureDataset`: jaxdata's mixture stage as a Grain `IterDataset` of documents.

The documents come in the exact order jaxdata's packer would take them (the
config's datasets, weights, schedule, shuffles and pass policies), one
element per document, so that Grain transforms and Grain's own packers can
follow::

    DocumentStream.take (chunks that never cross a step's token boundary)
      -> DocumentReader.read (one batched read per dataset, vocabulary checked)
      -> {"tokens": ids}  (+ "dataset_ids": the dataset's index for every token)

A step is `tokens so far // (global_batch_size x seq_len)`: the schedule's
weights at that step pick the next document, whatever the chunking. The state
is the stream's state at the start of the chunk being handed out and the
documents of it handed out already; it is JSON-able and carries the order's
fingerprint, so a state of other data or another order is refused::

    dataset = MixtureDataset(cfg).map(drop_short).pipe(
        grain.experimental.FirstFitPackIterDataset, length_struct={"tokens": 2048}, num_packing_bins=8)
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Mapping
from typing import Any

import grain
import numpy as np

from jaxdata.checkpoint.fingerprint import describe_changes
from jaxdata.checkpoint.state import seal, state_digest
from jaxdata.config.pipeline_config import PipelineConfig
from jaxdata.config.validate import is_int
from jaxdata.errors import CheckpointError, ConfigError
from jaxdata.integrations.grain import GlobalStreamDataset
from jaxdata.mixture.documents import DocBatch
from jaxdata.pipeline.pipeline_parts import open_parts
from jaxdata.pipeline.spec import PipelineSpec

__all__ = ["MixtureDataset", "MixtureDatasetIterator"]

MIXTURE_STATE_VERSION = 1
_CHUNK_DOCS = 1024  # documents read per batched read


class MixtureDatasetIterator(grain.DatasetIterator):
  """The documents of a config's mixture, in order, with a JSON-able state."""

  def __init__(self, spec: PipelineSpec, dataset_ids: bool, chunk_docs: int = _CHUNK_DOCS) -> None:
    super().__init__()
    self.parts = open_parts(spec)
    self.stream = self.parts.planner.stream
    self.dataset_ids = dataset_ids
    self.chunk_docs = chunk_docs
    self._chunk_start = self.stream.state()
    self._offset = 0
    self._chunk: list[dict[str, np.ndarray]] = []
    self._chunk_step = 0  # the step the chunk's documents start in

  def __next__(self) -> dict[str, np.ndarray]:
    if self._offset == len(self._chunk):
      self._read_chunk()
      if not self._chunk:
        raise StopIteration
    element = self._chunk[self._offset]
    self._offset += 1
    return element

  def _read_chunk(self) -> None:
    self._chunk_start, self._offset = self.stream.state(), 0
    step_tokens = self.stream.tokens_per_step
    step = self.stream.tokens // step_tokens
    # The chunk ends with the document that crosses the step's boundary: every document
    # is picked with the weights of the step it starts in, as one at a time would be.
    self._chunk_step = step
    batch = self.stream.take(step, max_docs=self.chunk_docs, max_tokens=(step + 1) * step_tokens - self.stream.tokens)
    self._chunk = self._documents(step, batch) if len(batch) else []

  def _documents(self, step: int, batch: DocBatch) -> list[dict[str, np.ndarray]]:
    parts, doc_start, _ = self.parts.reader.read(range(step, step + 1), batch)
    tokens = np.concatenate(parts) if len(parts) > 1 else parts[0]
    ends = doc_start + batch.length
    documents = []
    for start, end, dataset in zip(doc_start.tolist(), ends.tolist(), batch.dataset.tolist()):
      element = {"tokens": tokens[start:end]}
      if self.dataset_ids:
        element["dataset_ids"] = np.full(end - start, dataset, np.int32)
      documents.append(element)
    return documents

  def update_mixture(self, weights: Mapping[str, float], at_step: int | None = None) -> int:
    """New mixture weights from `at_step` on, as `Pipeline.update_mixture`; returns that step.

    A step is the document's start in tokens // (global_batch_size x seq_len). Default: the step of
    the next document handed out plus `mixture.update_lag_steps`. Documents already drawn (the chunk
    being handed out) stay as drawn; the update is in the state, and a restore replays it. Refused
    with a `ValueError` once the stream has ended; bad weights are a `ConfigError`; nothing changes.
    """
    if self._offset == len(self._chunk) and self.stream.ended:
      raise ValueError("update_mixture: the stream ended; an update would never take effect")
    if at_step is not None and (isinstance(at_step, bool) or not isinstance(at_step, (int, np.integer))):
      raise ValueError(f"at_step: must be an int, got {at_step!r}")
    here = self.stream.tokens // self.stream.tokens_per_step if self._offset == len(self._chunk) else self._chunk_step
    default = max(here + self.stream.cfg.mixture.update_lag_steps, self.stream.next_step)
    return self.stream.update(weights, default if at_step is None else int(at_step))

  def get_state(self) -> dict[str, Any]:
    """JSON-able, sealed with a digest of its content (an edited copy is refused, as a Pipeline's)."""
    # The chunk's start, with the updates made since: re-drawing the chunk with them gives the same
    # documents (an update takes effect after every step the chunk was drawn for).
    start = self._chunk_start
    stream = dataclasses.replace(start, updates=self.stream.updates.pruned(start.next_step - 1))
    return seal(
      {
        "version": MIXTURE_STATE_VERSION,
        "stream": stream.to_json(),
        "offset": self._offset,
        "fingerprint": self.parts.fingerprint.to_json(),
      }
    )

  def set_state(self, state: Mapping[str, Any]) -> None:
    """Continues from a `get_state()`; a `CheckpointError` names what does not match."""
    if not isinstance(state, Mapping) or state.get("version") != MIXTURE_STATE_VERSION:
      raise CheckpointError(f"mixture state: expected version {MIXTURE_STATE_VERSION}, got {str(state)[:200]}")
    if state.get("digest") != state_digest(state):
      raise CheckpointError(
        "mixture state: its digest does not match its content: the state was edited or damaged after it was saved"
      )
    offset, saved = state.get("offset"), state.get("fingerprint")
    if not is_int(offset) or offset < 0 or not isinstance(saved, Mapping):
      raise CheckpointError(f"mixture state: offset must be an int >= 0 and fingerprint a mapping, got {offset!r}")
    changes = describe_changes(saved, self.parts.fingerprint.to_json())
    if changes:
      raise CheckpointError(
        "mixture state: the config or data changed in what determines the order: " + "; ".join(changes)
      )
    try:
      self.stream.set_state(state["stream"])
    except (KeyError, ValueError) as e:
      raise CheckpointError(f"mixture state: {e}") from e
    self._chunk_start, self._chunk, self._offset = self.stream.state(), [], 0
    if offset:
      self._read_chunk()
      if offset > len(self._chunk):
        raise CheckpointError(f"mixture state: offset {offset} beyond the {len(self._chunk)} documents of its chunk")
      self._offset = offset

  def close(self) -> None:
    self.parts.reader.close()


class MixtureDataset(GlobalStreamDataset):
  """A Grain `IterDataset` of the mixture's documents: ``{"tokens": ids}``.

  Args:
    cfg: the pipeline config; its packing and batch settings only define
      the step (global_batch_size x seq_len tokens) at which a schedule's
      weights apply.
    dataset_ids: add ``"dataset_ids"``, the dataset's index in
      ``cfg.names`` for every token (it packs along with the tokens).
    split: "train", or "eval" (each dataset's held-out documents).

  >>> import os, tempfile
  >>> from jaxdata import PipelineConfig, from_iterable
  >>> root = tempfile.mkdtemp()
  >>> _ = from_iterable([[1, 2], [3], [4, 5, 6]], out=os.path.join(root, "a"))
  >>> cfg = PipelineConfig.from_dict({"datasets": [{"name": "a", "path": os.path.join(root, "a"),
  ...   "shuffle_shards": False, "shuffle_block_size": None}], "mixture": {"weights": {"a": 1}}})
  >>> [doc["tokens"].tolist() for doc in MixtureDataset(cfg)]
  [[1, 2], [3], [4, 5, 6]]
  """

  def __init__(self, cfg: PipelineConfig, dataset_ids: bool = False, split: str = "train") -> None:
    super().__init__()
    processes = _process_count()
    if processes > 1:
      raise ConfigError(
        f"MixtureDataset: this is one of {processes} jax.distributed processes, and a MixtureDataset is one "
        "stream of documents that every process would read whole (it is not sharded by host); on several "
        "hosts use Pipeline(cfg, mesh=mesh) or PipelineDataset(cfg, mesh=mesh): each host reads only the "
        "documents of its rows, every document once"
      )
    self.spec = PipelineSpec(cfg, split)
    self.dataset_ids = dataset_ids

  def __iter__(self) -> MixtureDatasetIterator:
    return MixtureDatasetIterator(self.spec, self.dataset_ids)

  def __str__(self) -> str:
    return f"MixtureDataset(datasets={list(self.spec.config.names)})"


def _process_count() -> int:
  """jax's process count where jax is in use already (jax.distributed needs it imported), else 1."""
  jax = sys.modules.get("jax")
  return int(jax.process_count()) if jax is not None else 1
