"""Refusals of a stream that could never end: a dataset that must finish its passes but is never drawn,
or one none of whose documents fits a row under `long_docs: drop`. Each names the dataset and the step."""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction

from jaxdata.config.packing_config import PackingConfig
from jaxdata.errors import ConfigError
from jaxdata.order.cursor import DatasetCursor

__all__ = ["check_can_end", "check_some_kept"]


def check_can_end(
  step: int, weights: Sequence[Fraction], constant_from: int, cursors: Sequence[DatasetCursor], watch: Sequence[int]
) -> None:
  """In the final phase (from `constant_from`, the weights never change again), an unfinished
  stop_after_passes dataset (`watch`: passes still needed) with weight 0, and nothing else that can end
  the stream, is a `ConfigError`."""
  if step < constant_from:
    return
  starved = [i for i, need in enumerate(watch) if need and weights[i] == 0]
  can_stop = any(c.settings.max_passes is not None and weights[i] > 0 for i, c in enumerate(cursors))
  if starved and not can_stop:
    cursor = cursors[starved[0]]
    raise ConfigError(
      f"datasets.{cursor.settings.name}: weight 0 from step {constant_from} on, "
      f"but only {cursor.completed_passes} of its {cursor.settings.target_passes} passes are "
      "done; the stream could never end"
    )


def check_some_kept(
  step: int,
  weights: Sequence[Fraction],
  seq_len: int,
  packing: PackingConfig,
  shortest: Sequence[int],
  names: Sequence[str],
) -> None:
  """Under `long_docs: drop`, a drawn dataset whose every document (its `shortest`, with BOS / EOS) is
  longer than the step's rows would be pulled forever: a `ConfigError`."""
  if packing.long_docs != "drop":
    return
  extra = packing.special_tokens
  for i, weight in enumerate(weights):
    if weight > 0 and shortest[i] + extra > seq_len:
      if packing.images is not None:  # over-budget examples are planned as one token longer than a row
        raise ConfigError(
          f"datasets.{names[i]}: every example exceeds a row's budgets at step {step} (rows hold {seq_len} "
          f"tokens, {packing.images.max_patches} patches and {packing.images.max_images} images), so none of it "
          "could reach a batch: raise packing.seq_len or packing.images' budgets, or weight 0 for it at this step"
        )
      raise ConfigError(
        f"datasets.{names[i]}: every document is longer than the rows of step {step} "
        f"(the shortest has {shortest[i] + extra} tokens with BOS / EOS, rows hold {seq_len}), "
        "and packing.long_docs: drop leaves them all out; nothing of it could reach a batch. "
        + (
          "A pair is never cut: raise packing.seq_len, or weight 0 for it at this step"
          if packing.pairs is not None
          else "Use long_docs: split or truncate, longer rows, or weight 0 for it at this step"
        )
      )
