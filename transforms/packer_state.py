"""`PackerState`: the packer's state, typed and frozen: whether it is done, and its `Carry`.

The carry (pieces that wait for the next step) is the `Pieces` the packer
planned, or the text a saved state holds; each form is made from the other
at most once, when asked::

    packer.state()                 PackerState(done, Carry.of_pieces(pieces))    nothing encoded
    state.to_json()                {"done": false, "carry": "eNqL..."}            encoded once
    PackerState.from_json(raw)     PackerState(done, Carry.of_text(text))         decoded by `Packer.restore`

>>> PackerState.from_json({"done": False, "carry": "eNqLjgUAARUAuQ=="}).to_json()
{'done': False, 'carry': 'eNqLjgUAARUAuQ=='}
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from typing import Any

from jaxdata.transforms.pieces import Pieces

__all__ = ["Carry", "PackerState"]


@dataclasses.dataclass(frozen=True, eq=False)
class Carry:
  """The packer's carry: the planner's `Pieces`, or the text a saved state holds; encoded at most once.

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


@dataclasses.dataclass(frozen=True)
class PackerState:
  """done: the packer handed out its last row; carry: the pieces waiting for the next step."""

  done: bool
  carry: Carry

  def to_json(self) -> dict[str, Any]:
    return {"done": self.done, "carry": self.carry.text}

  @classmethod
  def from_json(cls, raw: Any) -> PackerState:
    """A `ValueError` naming what is malformed."""
    if not isinstance(raw, Mapping) or not isinstance(raw.get("carry"), str):
      raise ValueError(f"packer state: expected a mapping with a carry string, got {raw!r:.200}")
    done = raw.get("done", False)
    if not isinstance(done, bool):
      raise ValueError(f"packer state: done must be true or false, got {str(done)[:100]!r}")
    return cls(done, Carry.of_text(raw["carry"]))
