"""`PipelineState`: the state after a step, typed and frozen; its JSON is the checkpoint's.

Every piece of the pipeline that holds or passes a state holds this type
(the steps handed out, the planner process's messages, `get_state` /
`set_state`). It has one form: the carry is a `Carry` and the mixture
updates a `MixtureUpdates`, each encoded when the JSON is asked for, so a
snapshot per planned step stays cheap::

    PipelineState.of_planner(planner, fingerprint, tokens)  after each planned step (nothing encoded)
    state.to_json()            -> {"version", "step", "fingerprint", "stream", "packer", "tokens_per_source"}
    PipelineState.from_json(json, names)                    a checked state (`read_pipeline_state`) or the pipe's
    state.planner_state()      -> what `StepPlanner.set_state` takes

The JSON is byte for byte what jaxdata 0.3.0 wrote (tests/test_pipeline_state.py).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping, Sequence
from typing import Any

from jaxdata.checkpoint.state import STATE_VERSION
from jaxdata.errors import CheckpointError
from jaxdata.mixture.updates import MixtureUpdates
from jaxdata.pipeline.planner import StepPlanner
from jaxdata.transforms.pieces import Pieces

__all__ = ["Carry", "PipelineState"]


@dataclasses.dataclass(frozen=True, eq=False)
class Carry:
  """The packer's carry (pieces that wait for the next step): the planner's `Pieces`, or the text a saved
  state holds; encoded at most once.

  >>> Carry.of_text("eNqLjgUAARUAuQ==").text
  'eNqLjgUAARUAuQ=='
  """

  pieces: Pieces | None
  saved: str | None  # the text a saved state holds (None: encoded from `pieces` when asked)

  @classmethod
  def of_pieces(cls, pieces: Pieces) -> Carry:
    return cls(pieces, None)

  @classmethod
  def of_text(cls, text: str) -> Carry:
    return cls(None, text)

  @functools.cached_property
  def text(self) -> str:
    """As the checkpoint stores it (`Pieces.to_json`); computed once."""
    if self.saved is not None:
      return self.saved
    assert self.pieces is not None  # one of the two is always there
    return self.pieces.to_json()

  def __eq__(self, other: object) -> bool:
    return isinstance(other, Carry) and self.text == other.text

  def __hash__(self) -> int:
    return hash(self.text)

  def for_packer(self) -> Pieces | str:
    """What `Packer.set_state` takes: the pieces themselves when this process planned them."""
    return self.pieces if self.pieces is not None else self.text


@dataclasses.dataclass(frozen=True)
class PipelineState:
  """The state after step `step - 1`: the next step handed out is `step`.

  Attributes:
    step: the next step to hand out.
    fingerprint: what determines the order (`jaxdata.checkpoint.fingerprint`).
    stream: `DocumentStream.get_state()`, its mixture updates apart.
    updates: the mixture updates the next steps see.
    packer_done: the packer handed out its last row.
    carry: pieces waiting for the next step.
    tokens_per_source: cumulative tokens per dataset (for statistics).
  """

  step: int
  fingerprint: Mapping[str, Any]
  stream: Mapping[str, Any]
  updates: MixtureUpdates
  packer_done: bool
  carry: Carry
  tokens_per_source: Mapping[str, int]

  @classmethod
  def of_planner(
    cls, planner: StepPlanner, fingerprint: Mapping[str, Any], tokens_per_source: Mapping[str, int]
  ) -> PipelineState:
    """The state now, cheaply: nothing is encoded (snapshots are taken for every planned step)."""
    stream = planner.stream.get_state(encode_updates=False)
    updates = stream.pop("updates")
    return cls(
      planner.step,
      fingerprint,
      stream,
      updates,
      planner.packer.done,
      Carry.of_pieces(planner.packer.carry),
      dict(tokens_per_source),
    )

  @classmethod
  def from_json(cls, raw: Mapping[str, Any], names: Sequence[str]) -> PipelineState:
    """A state in the current format (`read_pipeline_state` checked it; the pipe's are this process's own).
    `CheckpointError` naming the field where a mixture update or a flag is malformed."""
    stream = {k: v for k, v in raw["stream"].items() if k != "updates"}
    packer = raw["packer"]
    for field, value in (("stream.ended", stream.get("ended", False)), ("packer.done", packer.get("done", False))):
      if not isinstance(value, bool):
        raise CheckpointError(f"pipeline state: {field} must be true or false, got {str(value)[:100]!r}")
    try:
      updates = MixtureUpdates.from_json(raw["stream"].get("updates", []), names)
    except ValueError as e:
      raise CheckpointError(f"pipeline state: {e}") from e
    return cls(
      raw["step"],
      raw["fingerprint"],
      stream,
      updates,
      packer.get("done", False),
      Carry.of_text(packer["carry"]),
      dict(raw["tokens_per_source"]),
    )

  @property
  def next_step(self) -> int:
    """The first step whose documents are not drawn yet."""
    return int(self.stream.get("next_step", 0))

  def to_json(self) -> dict[str, Any]:
    """The checkpoint's JSON (without its digest: `jaxdata.checkpoint.state.seal` adds it)."""
    return {
      "version": STATE_VERSION,
      "step": self.step,
      "fingerprint": self.fingerprint,
      "stream": {**self.stream, "updates": self.updates.to_json()},
      "packer": {"done": self.packer_done, "carry": self.carry.text},
      "tokens_per_source": dict(self.tokens_per_source),
    }

  def planner_state(self) -> dict[str, Any]:
    """What `StepPlanner.set_state` restores (the live carry and updates, where this process has them)."""
    return {
      "step": self.step,
      "stream": {**self.stream, "updates": self.updates},
      "packer": {"done": self.packer_done, "carry": self.carry.for_packer()},
    }

  def with_updates(self, updates: MixtureUpdates) -> PipelineState:
    """This state with `updates` (those its next steps see): a step made ahead before an update was
    adopted gets the state the same step has when made after it."""
    return dataclasses.replace(self, updates=updates.pruned(self.next_step - 1))
