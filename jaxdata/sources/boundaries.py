"""`DocumentBoundaries`: where documents begin in a flat token file, one rule of five.

A flat token file (OLMo / Dolma style raw ids, or a 1-D `.npy`) is one run
of ids; one rule says where its documents begin::

    rule             a document ...                                    given as
    eos              ends with (and includes) each `token_id`          DocumentBoundaries.eos(0)
    bos              begins with each `token_id`                       DocumentBoundaries.bos(1)
    offsets          begins at each start in FILE.offsets.npy          DocumentBoundaries.offsets()
    dolma_metadata   is a row of Dolma's FILE's .csv.gz (start, end)   DocumentBoundaries.dolma_metadata()
    whole_file       is the whole file (the default; a Megatron .idx   DocumentBoundaries()
                     says its own)

>>> DocumentBoundaries.eos(0)
DocumentBoundaries(rule='eos', token_id=0)
>>> DocumentBoundaries(rule="offsets", token_id=3)
Traceback (most recent call last):
...
ValueError: token_id: the offsets rule takes no token id, got 3
"""

from __future__ import annotations

import dataclasses
from typing import Literal, get_args

import numpy as np

__all__ = ["BoundaryRule", "DocumentBoundaries"]

BoundaryRule = Literal["whole_file", "eos", "bos", "offsets", "dolma_metadata"]
_RULES: tuple[str, ...] = get_args(BoundaryRule)
_WITH_TOKEN = ("eos", "bos")


@dataclasses.dataclass(frozen=True)
class DocumentBoundaries:
  """Where documents begin: `rule`, and for `eos` / `bos` the `token_id` that marks them."""

  rule: BoundaryRule = "whole_file"
  token_id: int | None = None

  def __post_init__(self) -> None:
    if self.rule not in _RULES:
      raise ValueError(f"rule: {self.rule!r} is not one of {_RULES}")
    if self.rule in _WITH_TOKEN:
      value = self.token_id
      if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"token_id: the {self.rule} rule needs an int id, got {value!r}")
    elif self.token_id is not None:
      raise ValueError(f"token_id: the {self.rule} rule takes no token id, got {self.token_id!r}")

  @classmethod
  def eos(cls, token_id: int) -> DocumentBoundaries:
    """A document ends with (and includes) each `token_id`."""
    return cls("eos", token_id)

  @classmethod
  def bos(cls, token_id: int) -> DocumentBoundaries:
    """A document begins with each `token_id`."""
    return cls("bos", token_id)

  @classmethod
  def offsets(cls) -> DocumentBoundaries:
    """Document starts from `FILE.offsets.npy` beside each token file."""
    return cls("offsets")

  @classmethod
  def dolma_metadata(cls) -> DocumentBoundaries:
    """Documents from Dolma's metadata beside each memmap (rows of start, end, id, src, loc)."""
    return cls("dolma_metadata")

  def check_id_fits(self, dtype: np.dtype) -> None:
    """A `ValueError` where `token_id` is no `dtype` id (else no id equals it: the file is one document)."""
    if self.token_id is None:
      return
    top, digits = int(np.iinfo(dtype).max), str(int(self.token_id))
    if not 0 <= int(self.token_id) <= top:
      shown = digits if len(digits) <= 40 else f"an int of {len(digits)} digits"
      raise ValueError(f"token_id: {self.rule} id {shown} is not a {dtype.name} id (0..{top})")
