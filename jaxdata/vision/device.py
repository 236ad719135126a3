"""On the device: uint8 patches (as the read stage makes them, 4x smaller than float32) normalised with the
processor's mean and std, and laid out as the model's vision tower reads them.

    uint8 [..., n, 3 p p]  --normalize_patches-->  float [..., n, 3 p p]   (x / 255 - mean_c) / std_c
                           --temporal_patches-->   float [..., n, 3 t p p]  a still image repeated over t (Qwen)

>>> import numpy as np
>>> out = normalize_patches(np.full((1, 3 * 4), 255, np.uint8), QWEN_MEAN, QWEN_STD, patch=2)
>>> [round(float(v), 4) for v in out[0, ::4]]
[1.9303, 2.0749, 2.1459]
"""

from __future__ import annotations

from collections.abc import Sequence

import jax.numpy as jnp
from jax import Array

__all__ = ["normalize_patches", "temporal_patches"]

# The processors' defaults: Qwen2-VL (OpenAI CLIP's), Gemma 3 and SigLIP (0.5).
QWEN_MEAN = CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
QWEN_STD = CLIP_STD = (0.26862954, 0.26130258, 0.27577711)
HALF = (0.5, 0.5, 0.5)


def normalize_patches(
  patches: Array, mean: Sequence[float], std: Sequence[float], *, patch: int, dtype: jnp.dtype = jnp.float32
) -> Array:
  """uint8 patches [..., n, 3 p p] (channel-major within a patch) as the processor's normalised pixels:
  rescaled by 1/255, then (x - mean[c]) / std[c] for channel c."""
  if patches.shape[-1] != 3 * patch * patch:
    raise ValueError(f"patches: the last axis holds {patches.shape[-1]} values, not 3 x {patch} x {patch}")
  shape = patches.shape
  pixels = jnp.asarray(patches, jnp.float32).reshape(*shape[:-1], 3, patch * patch) * (1.0 / 255.0)
  mean_c = jnp.asarray(mean, jnp.float32)[:, None]
  std_c = jnp.asarray(std, jnp.float32)[:, None]
  return ((pixels - mean_c) / std_c).reshape(shape).astype(dtype)


def temporal_patches(patches: Array, *, patch: int, temporal: int) -> Array:
  """Patches [..., n, 3 p p] as Qwen-VL's vision tower reads a still image: [..., n, 3 t p p], each patch
  repeated over the temporal axis (the processor's own layout: channel, time, row, column)."""
  shape = patches.shape
  per_channel = patches.reshape(*shape[:-1], 3, 1, patch * patch)
  repeated = jnp.broadcast_to(per_channel, (*shape[:-1], 3, temporal, patch * patch))
  return repeated.reshape(*shape[:-1], 3 * temporal * patch * patch)
