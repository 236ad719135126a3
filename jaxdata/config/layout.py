"""`StepLayout`: what a step holds, built once from the config, read by every stage.

One `FeatureSpec` per array: its name, dtype, its per-row shape (aligned with
the tokens, `[seq_len]`, or an extent of its own such as `[P, D]`), its fill
value, and whether the batch keeps it (`batch.features`). Every array is
sharded by rows over the data axes and replicated along its other axes. The
stages that allocate, carry and hand out a step (the reader processes'
slots, the assembly's output, the handout, the global arrays) read the
layout; none names a feature::

    PipelineConfig -> step_layout(cfg) -> StepLayout
        tokens, targets, segment_ids, positions, loss_mask, source_ids    int32 [S]   (docs/training-loop.md §9)
        pairs (one_row): + pair_ids, pair_side (int32 [S]), ref_logp (float32 [S])
        pairs (parallel): chosen_* and rejected_* of each, ref_logp as float32
        batch.extra_features: anything else, made by a function the entry names

An extra feature is one entry (`{name, dtype, extent, fill, assemble: "module:function"}`) and one
function, `assemble(batch, pieces, host_row, column) -> ndarray [rows, *extent]`, called after the
built-in features are assembled (its module is imported where the step is made: this process or a
reader process).

>>> layout = StepLayout.of_features(("tokens", "loss_mask"))
>>> layout.names, layout.step_bytes(2, 8)
(('tokens', 'loss_mask'), 128)
>>> extra = FeatureSpec("patch_count", "uint8", (4,))
>>> extra.shape(2, 8), StepLayout((*layout.features, extra)).step_bytes(2, 8)
((2, 4), 192)
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from jaxdata._lazy import user_function
from jaxdata.config.validate import short
from jaxdata.errors import ConfigError

__all__ = ["FEATURES", "PAIR_SIDES", "FeatureSpec", "StepLayout", "pair_features"]

# What a step of documents holds, in this order: int32 [rows, seq_len] each (docs/training-loop.md §9).
FEATURES = ("tokens", "targets", "segment_ids", "positions", "loss_mask", "source_ids")
PAIR_SIDES = ("chosen", "rejected")
ALIGNMENT = 64  # each array of a step starts on this boundary: jax uses such host memory in place
_DTYPES = ("int32", "uint8", "uint16", "uint32", "int64", "float32", "bfloat16")


def pair_features(layout: str, reference: bool = False) -> tuple[str, ...]:
  """What a step of preference pairs holds (docs/preference.md): with `one_row`, `FEATURES` and
  each token's pair and side; with `parallel`, `FEATURES` of the chosen rows, then of the rejected.
  With `reference`, each side's tokens also carry its reference log-probability (float32).

  >>> pair_features("one_row")[-2:], pair_features("parallel", reference=True)[-1]
  (('pair_ids', 'pair_side'), 'rejected_ref_logp')
  """
  if layout == "one_row":
    return (*FEATURES, "pair_ids", "pair_side", *(("ref_logp",) if reference else ()))
  sides = tuple(f"{side}_{name}" for side in PAIR_SIDES for name in FEATURES)
  return sides + (tuple(f"{side}_ref_logp" for side in PAIR_SIDES) if reference else ())


@dataclasses.dataclass(frozen=True)
class FeatureSpec:
  """One array of a step: [rows, seq_len] of `dtype` (`extent` empty), or [rows, *extent] (an axis of 0 in
  `extent` is the row's length, seq_len), or [rows] (`scalar`: one value a row).

  `fill`: its value where nothing is written (padding). `kept`: in the batch handed out.
  `assemble`: "module:function" that makes it (extra features only; the built-in ones are made by
  the packing's assembly).
  """

  name: str
  dtype: str = "int32"
  extent: tuple[int, ...] = ()
  fill: int | float = 0
  kept: bool = True
  assemble: str = ""
  scalar: bool = False

  def __post_init__(self) -> None:
    where = f"batch.extra_features.{self.name}"
    if not isinstance(self.name, str) or not self.name.isidentifier():
      raise ConfigError(f"batch.extra_features: a feature's name is an identifier, got {short(self.name)}")
    if self.dtype not in _DTYPES:
      raise ConfigError(f"{where}.dtype: {short(self.dtype)} is not one of {', '.join(_DTYPES)}")
    extent = tuple(self.extent) if isinstance(self.extent, (list, tuple)) else self.extent
    if not isinstance(extent, tuple) or any(isinstance(n, bool) or not isinstance(n, int) or n < 0 for n in extent):
      raise ConfigError(
        f"{where}.extent: a per-row shape of ints >= 0 (0: the row's length; [] for one per token), got "
        f"{short(self.extent)}"
      )
    if self.scalar and extent:
      raise ConfigError(f"{where}.scalar: one value a row has no extent, got {short(self.extent)}")
    object.__setattr__(self, "extent", extent)
    if isinstance(self.fill, bool) or not isinstance(self.fill, (int, float)):
      raise ConfigError(f"{where}.fill: a number, got {short(self.fill)}")
    if self.assemble and (not isinstance(self.assemble, str) or self.assemble.count(":") != 1):
      raise ConfigError(f"{where}.assemble: 'module:function', got {short(self.assemble)}")

  @property
  def numpy_dtype(self) -> np.dtype:
    if self.dtype == "bfloat16":
      import ml_dtypes  # noqa: PLC0415 -- jax's own dependency, needed for this dtype alone

      return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(self.dtype)

  def row_shape(self, seq_len: int) -> tuple[int, ...]:
    """One row's shape: [seq_len] for a per-token feature, [] for a scalar, else its extent (0: seq_len)."""
    if self.scalar:
      return ()
    return tuple(n or seq_len for n in self.extent) if self.extent else (seq_len,)

  def shape(self, rows: int, seq_len: int) -> tuple[int, ...]:
    return (rows, *self.row_shape(seq_len))

  def nbytes(self, rows: int, seq_len: int) -> int:
    return int(np.prod(self.shape(rows, seq_len))) * self.numpy_dtype.itemsize

  def maker(self) -> Callable[..., np.ndarray]:
    """The function `assemble` names (imported now)."""
    return _imported(self.assemble)

  def to_json(self) -> dict[str, Any]:
    return {**dataclasses.asdict(self), "extent": list(self.extent)}

  @classmethod
  def from_json(cls, raw: Mapping[str, Any]) -> FeatureSpec:
    if not isinstance(raw, Mapping):
      raise ConfigError(f"batch.extra_features: each entry is a mapping, got {short(raw)}")
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(raw) - known)
    if unknown:
      raise ConfigError(f"batch.extra_features: unknown key {unknown[0]!r} (the keys: {', '.join(sorted(known))})")
    if not raw.get("assemble"):
      raise ConfigError(
        f"batch.extra_features.{raw.get('name')}: assemble: the 'module:function' that makes it is needed"
      )
    return cls(**{**raw, "extent": tuple(raw.get("extent", ()))})


@functools.cache
def _imported(path: str) -> Callable[..., np.ndarray]:
  try:
    return user_function(path)
  except ValueError as e:
    raise ConfigError(f"batch.extra_features: assemble {path!r} cannot be imported ({e})") from e


@dataclasses.dataclass(frozen=True)
class StepLayout:
  """The arrays of a step, in order (see the module docstring)."""

  features: tuple[FeatureSpec, ...]

  @classmethod
  def of_features(
    cls, names: Sequence[str], kept: Sequence[str] | None = None, floats: Sequence[str] = ()
  ) -> StepLayout:
    """Per-token features of `names` (int32, float32 where in `floats`); `kept` (default all) handed out."""
    keep = set(names if kept is None else kept)
    return cls(tuple(FeatureSpec(n, "float32" if n in floats else "int32", kept=n in keep) for n in names))

  @property
  def names(self) -> tuple[str, ...]:
    return tuple(f.name for f in self.features)

  @property
  def kept(self) -> tuple[str, ...]:
    """The features the batch hands out, in order."""
    return tuple(f.name for f in self.features if f.kept)

  @property
  def extras(self) -> tuple[FeatureSpec, ...]:
    """The features made by a function of their own (`batch.extra_features`)."""
    return tuple(f for f in self.features if f.assemble)

  def spec(self, name: str) -> FeatureSpec:
    return next(f for f in self.features if f.name == name)

  def step_bytes(self, rows: int, seq_len: int) -> int:
    """The bytes of a step's arrays laid out one after another, each aligned."""
    return _placed(self, rows, seq_len)[1]

  def views(self, buffer: Any, offset: int, rows: int, seq_len: int) -> dict[str, np.ndarray]:
    """The step's arrays as views of `buffer` from `offset` (which must be ALIGNMENT-aligned for aligned arrays)."""
    return {
      name: np.ndarray(shape, dtype, buffer=buffer, offset=offset + start)
      for name, shape, dtype, start in _placed(self, rows, seq_len)[0]
    }

  def arrays(self, rows: int, seq_len: int, aligned: bool = False) -> dict[str, np.ndarray]:
    """Fresh arrays of every feature; with `aligned`, one allocation, each on an ALIGNMENT boundary (on
    CPU devices jax then uses the host memory in place instead of copying it)."""
    if not aligned:
      return {f.name: np.empty(f.shape(rows, seq_len), f.numpy_dtype) for f in self.features}
    block = np.empty(self.step_bytes(rows, seq_len) + ALIGNMENT, np.uint8)
    first = -block.ctypes.data % ALIGNMENT
    return self.views(block.data, first, rows, seq_len)

  def to_json(self) -> list[dict[str, Any]]:
    return [f.to_json() for f in self.features]

  @classmethod
  def from_json(cls, raw: Sequence[Mapping[str, Any]]) -> StepLayout:
    return cls(tuple(FeatureSpec(**{**f, "extent": tuple(f["extent"])}) for f in raw))


@functools.lru_cache(maxsize=64)
def _placed(
  layout: StepLayout, rows: int, seq_len: int
) -> tuple[tuple[tuple[str, tuple[int, ...], np.dtype, int], ...], int]:
  """((name, shape, dtype, byte offset) per feature, the step's bytes), each offset ALIGNMENT-aligned: worked
  out once per step shape (a step asks for them on every step)."""
  placed, at = [], 0
  for f in layout.features:
    placed.append((f.name, f.shape(rows, seq_len), f.numpy_dtype, at))
    at += -(-f.nbytes(rows, seq_len) // ALIGNMENT) * ALIGNMENT
  return tuple(placed), at
