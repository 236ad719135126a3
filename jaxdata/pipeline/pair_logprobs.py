"""Per-pair sequence log-probabilities from a batch of preference pairs (docs/preference.md).

A DPO-style loss needs, per pair, the sum of log p(target) over each
side's trained targets. With either layout of `packing.pairs` that is one
one-hot contraction over the row, no gather across rows::

    one_row:   token log-probs [rows, seq_len] x (pair_ids == k) x (pair_side == s) x loss_mask -> [rows, max_pairs]
    parallel:  each side's rows x (segment_ids == k) x loss_mask                              -> [rows, max_pairs]

>>> import numpy as np
>>> batch = {"pair_ids": np.array([[1, 1, 1, 1, 0]]), "pair_side": np.array([[0, 0, 1, 1, -1]]),
...          "loss_mask": np.array([[0, 1, 0, 1, 0]])}
>>> chosen, rejected, present = sequence_logprobs(batch, np.array([[-9.0, -1.0, -9.0, -2.0, -9.0]]), max_pairs=2)
>>> chosen.tolist(), rejected.tolist(), present.tolist()
([[-1.0, 0.0]], [[-2.0, 0.0]], [[True, False]])
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxdata.config.layout import PAIR_SIDES
from jaxdata.transforms.pairs import PROMPT_SIDE

__all__ = ["pair_attention_mask", "pair_references", "pair_sides", "sequence_logprobs"]


def sequence_logprobs(
  batch: Mapping[str, Any], token_logprobs: Any, max_pairs: int
) -> tuple[jax.Array, jax.Array, jax.Array]:
  """(chosen, rejected, present), each [rows, max_pairs]: column k is the row's pair k + 1, the sum
  of its side's trained targets' log-probabilities; `present` where the row holds both sides of it.

  `token_logprobs`: with `one_row`, the [rows, seq_len] log-probability of each slot's target; with
  `parallel`, {"chosen": [rows, seq_len], "rejected": [rows, seq_len]}. Works inside `jax.jit`
  (`max_pairs` static: `packing.max_segments_per_row`, or seq_len // 2 as a bound).
  """
  ids = _pair_ids(max_pairs)
  sums, present = [], []
  _check_layout(batch, token_logprobs)
  if "pair_ids" in batch:
    # where, not a product: a padding slot's log-prob may be -inf (and -inf x 0 is nan)
    logp = jnp.where(jnp.asarray(batch["loss_mask"]) == 1, jnp.asarray(token_logprobs), 0.0)
    pair, side = jnp.asarray(batch["pair_ids"]), jnp.asarray(batch["pair_side"])
    one_hot = pair[..., None] == ids
    for s in (0, 1):
      on_side = one_hot & (side == s)[..., None]
      sums.append(_masked_sum(logp, on_side))
      present.append(jnp.any(on_side, axis=1))
  else:
    for name in PAIR_SIDES:
      logp = jnp.where(jnp.asarray(batch[f"{name}_loss_mask"]) == 1, jnp.asarray(token_logprobs[name]), 0.0)
      one_hot = jnp.asarray(batch[f"{name}_segment_ids"])[..., None] == ids
      sums.append(_masked_sum(logp, one_hot))
      present.append(jnp.any(one_hot, axis=1))
  return sums[0], sums[1], present[0] & present[1]


def pair_sides(batch: Mapping[str, Any], max_pairs: int) -> tuple[jax.Array, jax.Array]:
  """(chosen, rejected), each bool [rows, max_pairs]: whether the row holds example k + 1's chosen side,
  and its rejected side. A pair has both; a KTO example one: the chosen side where it is labelled
  desirable, the rejected side where not (`sequence_logprobs`' `present` is both, for DPO-style losses).

  >>> batch = {"pair_ids": np.array([[1, 1, 2, 2, 0]]), "pair_side": np.array([[0, 1, 1, 1, -1]])}
  >>> chosen, rejected = pair_sides(batch, max_pairs=2)
  >>> chosen.tolist(), rejected.tolist()
  ([[True, False]], [[True, True]])
  """
  ids = _pair_ids(max_pairs)
  if "pair_ids" in batch:
    pair, side = jnp.asarray(batch["pair_ids"]), jnp.asarray(batch["pair_side"])
    # a shared prompt (pair_side 2) belongs to both sides of a pair, never to a KTO example alone
    held = [jnp.any((pair[..., None] == ids) & (side == s)[..., None], axis=1) for s in (0, 1)]
  elif "chosen_segment_ids" in batch:
    held = [jnp.any(jnp.asarray(batch[f"{name}_segment_ids"])[..., None] == ids, axis=1) for name in PAIR_SIDES]
  else:
    raise ValueError(f"batch: not a batch of preference pairs (packing.pairs); it holds {sorted(batch)}")
  return held[0], held[1]


def pair_references(batch: Mapping[str, Any], max_pairs: int) -> tuple[jax.Array, jax.Array]:
  """(chosen, rejected), each [rows, max_pairs]: the reference log-probabilities stored for pair k + 1 of
  each row (`packing.pairs.reference`), read off the tokens of its sides (0 where the row has no such pair)."""
  ids = _pair_ids(max_pairs)
  if not {"ref_logp", "chosen_ref_logp"} & set(batch):
    raise ValueError("batch: holds no reference log-probabilities (set packing.pairs.reference to a model id)")
  out = []
  for s, name in enumerate(PAIR_SIDES):
    if "pair_ids" in batch:
      values = jnp.asarray(batch["ref_logp"])
      on_side = (jnp.asarray(batch["pair_ids"])[..., None] == ids) & (jnp.asarray(batch["pair_side"]) == s)[..., None]
    else:
      values = jnp.asarray(batch[f"{name}_ref_logp"])
      on_side = jnp.asarray(batch[f"{name}_segment_ids"])[..., None] == ids
    # every token of a side carries its value: their mean is it, with no gather
    out.append(_masked_sum(values, on_side) / jnp.maximum(on_side.sum(axis=1), 1))
  return out[0], out[1]


def _pair_ids(max_pairs: Any) -> jax.Array:
  """1 .. max_pairs, for one-hot contractions; a ValueError for a count that is not a positive int."""
  if isinstance(max_pairs, bool) or not isinstance(max_pairs, (int, np.integer)) or max_pairs < 1:
    raise ValueError(
      f"max_pairs: {max_pairs!r}; give the most pairs a row can hold, an int >= 1 "
      "(packing.max_segments_per_row, or seq_len // 2)"
    )
  return jnp.arange(1, int(max_pairs) + 1)


def _masked_sum(values: jax.Array, where: jax.Array) -> jax.Array:
  """[rows, pairs]: the sum of `values` [rows, seq_len] over each pair's slots (`where` [rows, seq_len, pairs]).
  A select, not a product: -inf (a target of probability 0) stays in its own pair, where x 0 would be nan."""
  return jnp.where(where, values[..., None], 0.0).sum(axis=1)


def _check_layout(batch: Mapping[str, Any], token_logprobs: Any) -> None:
  """A ValueError naming what is missing: a batch of pairs, and log-probs shaped as its layout asks."""
  if "pair_ids" in batch:
    if isinstance(token_logprobs, Mapping):
      raise ValueError("token_logprobs: a one_row batch takes one [rows, seq_len] array (parallel takes a dict)")
    if jnp.shape(token_logprobs) != jnp.shape(batch["pair_ids"]):
      raise ValueError(f"token_logprobs: shape {jnp.shape(token_logprobs)}, the batch's {jnp.shape(batch['pair_ids'])}")
  elif "chosen_segment_ids" in batch:
    if not isinstance(token_logprobs, Mapping) or set(token_logprobs) != set(PAIR_SIDES):
      raise ValueError(
        'token_logprobs: a parallel batch takes {"chosen": [rows, seq_len], "rejected": [rows, seq_len]}'
      )
  else:
    raise ValueError(f"batch: not a batch of preference pairs (packing.pairs); it holds {sorted(batch)}")


def pair_attention_mask(batch: dict[str, np.ndarray]) -> np.ndarray:
  """bool [rows, seq_len, seq_len]: whether query i may attend key j, for the `one_row` layout.

  Causal, inside one pair, and within a side, where the shared prompt (pair_side 2) is seen by both
  answers. Without a shared prompt this is the usual packed mask (same segment, causal).

  >>> batch = {"pair_ids": np.array([[1, 1, 1, 1, 0]]), "pair_side": np.array([[2, 0, 1, 1, -1]]),
  ...          "segment_ids": np.array([[1, 2, 3, 3, 0]])}
  >>> pair_attention_mask(batch)[0].astype(int).tolist()
  [[1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [1, 0, 1, 0, 0], [1, 0, 1, 1, 0], [0, 0, 0, 0, 0]]
  """
  if "pair_ids" not in batch:
    raise ValueError("batch: pair_attention_mask is the one_row layout's mask (parallel rows use their segment ids)")
  pair, side, segment = (np.asarray(batch[k]) for k in ("pair_ids", "pair_side", "segment_ids"))
  seq_len = pair.shape[1]
  causal = np.tril(np.ones((seq_len, seq_len), bool))
  same_pair = (pair[:, :, None] == pair[:, None, :]) & (pair[:, :, None] > 0)
  visible = (segment[:, :, None] == segment[:, None, :]) | (side[:, None, :] == PROMPT_SIDE)
  return causal & same_pair & visible
