"""`PipelineState`: the state after a step, typed and frozen all the way down; its JSON is the checkpoint's.

A pipeline state is JSON, the same on every host, a few KB at most::

    {"version": 2, "step": 120,                        the next step to hand out
     "fingerprint": {...},                             `OrderFingerprint`: what determines the order
     "stream": {...},                                  `StreamState`: cursors, interleave, updates, changes
     "packer": {"done": false, "carry": "eJy..."},     `PackerState`: pieces waiting for the next step
     "tokens_per_source": {"web": 1234, ...},          cumulative, for statistics
     "digest": "9f2c..."}                              sha256 of all of the above

Each part is the type of the piece that owns it (`jaxdata.mixture.stream_state`,
`jaxdata.transforms.packer_state`); this module composes them. A saved
state is decoded and checked once (`PipelineState.read`: format, version,
digest, then every part's shape); what a pipeline adds to that is whether
its order is the state's (`check_continues`). The JSON is byte for byte what
jaxdata 0.3.0 wrote (tests/test_pipeline_state.py). Version 1 (jaxdata 0.1)
is refused with a clear error: its shuffles and mixture arithmetic differ.
docs/state.md describes every field.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping
from typing import Any

from jaxdata.checkpoint.fingerprint import OrderFingerprint
from jaxdata.config.batch import BatchConfig
from jaxdata.config.validate import check_state_header, is_int
from jaxdata.errors import CheckpointError, ConfigError
from jaxdata.mixture.stream_state import StreamState
from jaxdata.mixture.updates import MixtureUpdates
from jaxdata.transforms.packer_state import Carry, PackerState

__all__ = ["STATE_VERSION", "PipelineState", "seal", "state_digest"]

STATE_VERSION = 2
_KEYS = ("step", "fingerprint", "stream", "packer", "tokens_per_source", "digest")


def state_digest(state: Mapping[str, Any]) -> str:
  """sha256 over the state's canonical JSON, its "digest" field left out."""
  content = {k: v for k, v in state.items() if k != "digest"}
  blob = json.dumps(content, sort_keys=True, separators=(",", ":"), allow_nan=False)
  return hashlib.sha256(blob.encode()).hexdigest()


def seal(state: dict[str, Any]) -> dict[str, Any]:
  """The state with its digest: an edited or damaged copy is refused on restore."""
  return {**state, "digest": state_digest(state)}


@dataclasses.dataclass(frozen=True)
class PipelineState:
  """The state after step `step - 1`: the next step handed out is `step`.

  Attributes:
    step: the next step to hand out.
    fingerprint: what determines the order.
    stream: the mixture's stream (its cursors, interleave, updates and config changes).
    packer: whether the packer is done, and its carry.
    tokens_per_source: cumulative tokens per dataset (for statistics).
  """

  step: int
  fingerprint: OrderFingerprint
  stream: StreamState
  packer: PackerState
  tokens_per_source: Mapping[str, int]

  @property
  def next_step(self) -> int:
    """The first step whose documents are not drawn yet."""
    return self.stream.next_step

  @property
  def updates(self) -> MixtureUpdates:
    """The mixture updates the next steps see."""
    return self.stream.updates

  @property
  def carry(self) -> Carry:
    return self.packer.carry

  def to_json(self) -> dict[str, Any]:
    """The checkpoint's JSON (without its digest: `sealed` adds it)."""
    return {
      "version": STATE_VERSION,
      "step": self.step,
      "fingerprint": self.fingerprint.to_json(),
      "stream": self.stream.to_json(),
      "packer": self.packer.to_json(),
      "tokens_per_source": dict(self.tokens_per_source),
    }

  def sealed(self) -> dict[str, Any]:
    """The JSON with its digest, as `Pipeline.get_state` returns it."""
    return seal(self.to_json())

  @classmethod
  def from_json(cls, raw: Mapping[str, Any]) -> PipelineState:
    """A state of the current format whose digest is checked already (`read`) or not needed (one this
    jaxdata made, across a pipe); `CheckpointError` naming the field that is malformed."""
    step = raw.get("step")
    if not is_int(step) or step < 0:
      raise CheckpointError(f"pipeline state: step must be an int >= 0, got {step!r}")
    fingerprint = OrderFingerprint.from_json(raw.get("fingerprint"))
    names = fingerprint.datasets
    tokens = raw.get("tokens_per_source")
    if not isinstance(tokens, Mapping) or set(tokens) != set(names):
      raise CheckpointError(f"pipeline state: tokens_per_source must name the fingerprint's datasets {list(names)}")
    if any(not is_int(v) or v < 0 for v in tokens.values()):
      raise CheckpointError(f"pipeline state: tokens_per_source must hold ints >= 0, got {dict(tokens)!r:.200}")
    try:
      stream, packer = StreamState.from_json(raw.get("stream"), names), PackerState.from_json(raw.get("packer"))
    except ValueError as e:
      raise CheckpointError(f"pipeline state: {e}") from e
    return cls(step, fingerprint, stream, packer, {str(n): int(v) for n, v in tokens.items()})

  @classmethod
  def read(cls, raw: Any) -> PipelineState:
    """A saved state, decoded and checked once (format, version, digest, every part); not yet compared
    with any pipeline. `CheckpointError` naming what is wrong."""
    if isinstance(raw, Mapping) and "offset" in raw and "packer" not in raw and "stream" in raw:
      raise CheckpointError(
        "pipeline state: this is the state of a document iterator (jaxdata.integrations.MixtureDataset's: a "
        "stream and an offset), not of a Pipeline; restore it with that iterator's set_state, or give a state "
        "a Pipeline's get_state() returned"
      )
    try:
      check_state_header(raw, "pipeline state", STATE_VERSION, _KEYS)
    except ConfigError as e:
      raise CheckpointError(str(e)) from e
    for key, kind in (("fingerprint", Mapping), ("stream", Mapping), ("packer", Mapping), ("digest", str)):
      if not isinstance(raw[key], kind):
        raise CheckpointError(
          f"pipeline state: {key} must be a {'mapping' if kind is Mapping else 'string'}, got {type(raw[key]).__name__}"
        )
    try:
      digest = state_digest(raw)
    except (TypeError, ValueError) as e:  # not JSON: NaN, a set, ...
      raise CheckpointError(f"pipeline state: not plain JSON ({str(e)[:200]})") from e
    if digest != raw["digest"]:
      raise CheckpointError(
        "pipeline state: its digest does not match its content: the state was edited or damaged after it was saved"
      )
    return cls.from_json(raw)

  def check_continues(self, fingerprint: OrderFingerprint) -> None:
    """A `CheckpointError` listing each change if this state's order is not `fingerprint`'s (a batch-size
    schedule may change from the state's step on: the steps before it are kept)."""
    changes = fingerprint.changes_from(self.fingerprint)
    if any(c.startswith("global_batch_size:") for c in changes) and _batch_sizes_agree(
      self.fingerprint.global_batch_size, fingerprint.global_batch_size, self.step
    ):
      changes = [c for c in changes if not c.startswith("global_batch_size:")]
    if changes:
      raise CheckpointError(
        "pipeline state: the config or data changed in what determines the order: "
        + "; ".join(changes)
        + "; restore with reconfigure=True to continue with the new config from this state's step"
      )

  def with_updates(self, updates: MixtureUpdates) -> PipelineState:
    """This state with `updates` (those its next steps see): a step made ahead before an update was
    adopted gets the state the same step has when made after it."""
    stream = dataclasses.replace(self.stream, updates=updates.pruned(self.next_step - 1))
    return dataclasses.replace(self, stream=stream)

  def at_epoch(self, epoch: int) -> PipelineState:
    """This state (step 0's) moved to `epoch`."""
    if not is_int(epoch) or epoch < 0:
      raise ValueError(f"epoch: expected an int >= 0, got {epoch!r}")
    return dataclasses.replace(self, stream=dataclasses.replace(self.stream, epoch=epoch))


def _batch_sizes_agree(saved: int | str, current: int | str, step: int) -> bool:
  try:
    return BatchConfig.from_description(saved).agrees_before(BatchConfig.from_description(current), step)
  except (ValueError, IndexError, ConfigError):
    return False
