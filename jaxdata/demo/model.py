"""A tiny causal language model for `jaxdata demo`, attention kept inside segments.

Every row packs several documents; `segment_ids` keep them apart::

    attend(i, j) = j <= i  and  segment_ids[i] == segment_ids[j] != 0

and the loss is the mean over positions with `loss_mask` = 1 of
-log p(targets | tokens so far in the same document).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

__all__ = ["init_params", "loss_fn", "train_step"]

Params = dict[str, Any]


def init_params(key: jax.Array, vocab: int, seq_len: int, width: int = 64, layers: int = 2) -> Params:
  keys = iter(jax.random.split(key, 4 + 4 * layers))

  def dense(shape: tuple[int, int]) -> jax.Array:
    return jax.random.normal(next(keys), shape) / jnp.sqrt(shape[0])

  return {
    "embed": jax.random.normal(next(keys), (vocab, width)) * 0.02,
    "position": jax.random.normal(next(keys), (seq_len, width)) * 0.02,
    "layers": [
      {
        "qkv": dense((width, 3 * width)),
        "out": dense((width, width)),
        "up": dense((width, 4 * width)),
        "down": dense((4 * width, width)),
      }
      for _ in range(layers)
    ],
  }


def _norm(x: jax.Array) -> jax.Array:
  return (x - x.mean(-1, keepdims=True)) * jax.lax.rsqrt(x.var(-1, keepdims=True) + 1e-5)


def logits_fn(
  params: Params, batch: dict[str, jax.Array], heads: int = 4, extra_embedding: jax.Array | None = None
) -> jax.Array:
  """Next-token logits; `extra_embedding` [rows, seq_len, width] is added to the tokens' (image features)."""
  tokens, positions, segments = batch["tokens"], batch["positions"], batch["segment_ids"]
  x = params["embed"][tokens] + params["position"][positions]
  if extra_embedding is not None:
    x = x + extra_embedding
  length = tokens.shape[1]
  causal = jnp.tril(jnp.ones((length, length), bool))
  same = (segments[:, :, None] == segments[:, None, :]) & (segments[:, :, None] > 0)
  mask = (causal[None] & same)[:, None]  # [batch, 1, query, key]
  for layer in params["layers"]:
    q, k, v = jnp.split(_norm(x) @ layer["qkv"], 3, axis=-1)
    split = lambda t: t.reshape(t.shape[0], length, heads, -1).transpose(0, 2, 1, 3)
    q, k, v = split(q), split(k), split(v)
    scores = jnp.where(mask, q @ k.transpose(0, 1, 3, 2) / jnp.sqrt(q.shape[-1]), -1e9)
    attended = (jax.nn.softmax(scores, axis=-1) @ v).transpose(0, 2, 1, 3).reshape(x.shape)
    x = x + attended @ layer["out"]
    x = x + jax.nn.gelu(_norm(x) @ layer["up"]) @ layer["down"]
  return _norm(x) @ params["embed"].T


def loss_fn(params: Params, batch: dict[str, jax.Array], extra_embedding: jax.Array | None = None) -> jax.Array:
  logits = logits_fn(params, batch, extra_embedding=extra_embedding)
  log_probs = jax.nn.log_softmax(logits)
  nll = -jnp.take_along_axis(log_probs, batch["targets"][..., None], axis=-1)[..., 0]
  mask = batch["loss_mask"].astype(jnp.float32)
  return (nll * mask).sum() / jnp.maximum(mask.sum(), 1.0)


def adam_update(
  params: Params, grads: Params, state: dict[str, Any], lr: float = 3e-3
) -> tuple[Params, dict[str, Any]]:
  step = state["step"] + 1
  mu = jax.tree.map(lambda m, g: 0.9 * m + 0.1 * g, state["mu"], grads)
  nu = jax.tree.map(lambda n, g: 0.999 * n + 0.001 * g * g, state["nu"], grads)
  scale = lr * jnp.sqrt(1 - 0.999**step) / (1 - 0.9**step)
  params = jax.tree.map(lambda p, m, n: p - scale * m / (jnp.sqrt(n) + 1e-8), params, mu, nu)
  return params, {"step": step, "mu": mu, "nu": nu}


@jax.jit
def train_step(
  params: Params, state: dict[str, Any], batch: dict[str, jax.Array]
) -> tuple[Params, dict[str, Any], jax.Array]:
  loss, grads = jax.value_and_grad(loss_fn)(params, batch)
  params, state = adam_update(params, grads, state)
  return params, state, loss
