"""Image policies: how big an image is once the model's processor has resized it, its patch grid, and how
many tokens stand for it in the text. Computed from the image's stored size alone (planning never decodes
an image), vectorised over many images::

    policy               resize to                                      grid (t, h, w)         tokens
    FixedSize            height x width (Gemma 3 896², SigLIP, LLaVA)   (1, H/p, W/p)          (H/p/pool)(W/p/pool)
    NativeResolution     multiples of patch x merge within min / max    (1, h'/p, w'/p)        t h w / merge²
                         pixels, aspect kept (Qwen2-VL, 2.5-VL, 3-VL)

The native policy is Qwen2-VL's `smart_resize`, computed with the same float operations in NumPy, so its
grids equal the processor's exactly (tests compare with transformers' own processor on 1,000 sizes).
Stored patches are p x p x C each, the temporal copy a Qwen processor makes of a still image left to the
device (`temporal_patch` says how many).

>>> NativeResolution().grids(np.array([300]), np.array([500])).tolist()
[[1, 22, 36]]
>>> int(NativeResolution().tokens(np.array([300]), np.array([500]))[0]), int(FixedSize().tokens(np.array([5]), np.array([7]))[0])
(198, 256)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar, Protocol

import numpy as np

__all__ = ["MAX_PIXELS", "FixedSize", "ImagePolicy", "NativeResolution", "image_policy"]

MAX_PIXELS = 1 << 27  # 134M pixels (11,585²), below Pillow's own refusal (2x its 89M): ours decides, by name
RESAMPLING = ("bilinear", "bicubic")  # what the processors use (Gemma 3: bilinear; SigLIP, Qwen: bicubic)


class ImagePolicy(Protocol):
  """What planning and reading ask of a policy, per image, from its stored (height, width)."""

  name: ClassVar[str]
  patch: int
  resample: str

  def resized(self, heights: np.ndarray, widths: np.ndarray) -> tuple[np.ndarray, np.ndarray]: ...

  def grids(self, heights: np.ndarray, widths: np.ndarray) -> np.ndarray: ...

  def tokens(self, heights: np.ndarray, widths: np.ndarray) -> np.ndarray: ...

  def patches(self, heights: np.ndarray, widths: np.ndarray) -> np.ndarray: ...


def _sizes(heights: Any, widths: Any) -> tuple[np.ndarray, np.ndarray]:
  """Heights and widths as int64 arrays of one shape, each at least 1, or a `ValueError` naming the first bad one."""
  h, w = np.asarray(heights, np.int64), np.asarray(widths, np.int64)
  if h.shape != w.shape:
    raise ValueError(f"image sizes: {h.shape} heights for {w.shape} widths")
  bad = np.flatnonzero((h < 1) | (w < 1))
  if bad.size:
    i = int(bad[0])
    raise ValueError(f"image sizes: image {i} is {int(h.flat[i])} x {int(w.flat[i])} pixels; an image has at least one")
  return h, w


def _positive(owner: str, **values: int) -> None:
  for name, value in values.items():
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
      raise ValueError(f"{owner}.{name}: a positive integer, got {value!r}")


@dataclasses.dataclass(frozen=True)
class FixedSize:
  """Every image resized to `height` x `width`, cut in `patch` x `patch` patches, `pool` x `pool` of them one
  token. Defaults: Gemma 3 (896², patch 14, pooled to 256 tokens). LLaVA-1.5: 336², patch 14, pool 1 (576)."""

  name: ClassVar[str] = "fixed"
  height: int = 896
  width: int = 896
  patch: int = 14
  pool: int = 4
  resample: str = "bilinear"

  def __post_init__(self) -> None:
    _positive("FixedSize", height=self.height, width=self.width, patch=self.patch, pool=self.pool)
    for side in ("height", "width"):
      if getattr(self, side) % (self.patch * self.pool):
        raise ValueError(
          f"FixedSize.{side}: {getattr(self, side)} is not a multiple of patch x pool ({self.patch * self.pool})"
        )
    if self.resample not in RESAMPLING:
      raise ValueError(f"FixedSize.resample: {self.resample!r} is not one of {RESAMPLING}")

  def resized(self, heights: np.ndarray, widths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    h, _ = _sizes(heights, widths)
    return np.full_like(h, self.height), np.full_like(h, self.width)

  def grids(self, heights: np.ndarray, widths: np.ndarray) -> np.ndarray:
    h, _ = _sizes(heights, widths)
    grid = np.array([1, self.height // self.patch, self.width // self.patch], np.int64)
    return np.broadcast_to(grid, (*h.shape, 3)).copy()

  def tokens(self, heights: np.ndarray, widths: np.ndarray) -> np.ndarray:
    h, _ = _sizes(heights, widths)
    per_image = (self.height // self.patch // self.pool) * (self.width // self.patch // self.pool)
    return np.full_like(h, per_image)

  def patches(self, heights: np.ndarray, widths: np.ndarray) -> np.ndarray:
    h, _ = _sizes(heights, widths)
    return np.full_like(h, (self.height // self.patch) * (self.width // self.patch))


@dataclasses.dataclass(frozen=True)
class NativeResolution:
  """Each image resized to multiples of `patch` x `merge`, its pixels within [min_pixels, max_pixels], its
  aspect kept (Qwen2-VL's `smart_resize`); `merge` x `merge` patches are one token. Defaults: Qwen2-VL and
  2.5-VL (patch 14, merge 2, 3,136 to 1,003,520 pixels). Qwen3-VL: patch 16."""

  name: ClassVar[str] = "native"
  patch: int = 14
  merge: int = 2
  temporal_patch: int = 2
  min_pixels: int = 56 * 56
  max_pixels: int = 28 * 28 * 1280
  max_aspect: int = 200  # the processor refuses a longer side over 200 times the shorter
  resample: str = "bicubic"

  def __post_init__(self) -> None:
    _positive(
      "NativeResolution",
      patch=self.patch,
      merge=self.merge,
      temporal_patch=self.temporal_patch,
      min_pixels=self.min_pixels,
      max_pixels=self.max_pixels,
      max_aspect=self.max_aspect,
    )
    if self.min_pixels > self.max_pixels:
      raise ValueError(f"NativeResolution.min_pixels: {self.min_pixels} is above max_pixels {self.max_pixels}")
    if self.resample not in RESAMPLING:
      raise ValueError(f"NativeResolution.resample: {self.resample!r} is not one of {RESAMPLING}")

  def resized(self, heights: np.ndarray, widths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Qwen2-VL's `smart_resize`, vectorised: the same float operations in the same order."""
    h, w = _sizes(heights, widths)
    long = np.flatnonzero(np.maximum(h, w) / np.minimum(h, w) > self.max_aspect)
    if long.size:
      i = int(long[0])
      raise ValueError(
        f"image sizes: image {i} is {int(h.flat[i])} x {int(w.flat[i])}: its aspect ratio is over {self.max_aspect}"
      )
    factor = self.patch * self.merge
    h_bar, w_bar = np.round(h / factor) * factor, np.round(w / factor) * factor
    over = h_bar * w_bar > self.max_pixels
    under = ~over & (h_bar * w_bar < self.min_pixels)
    shrink = np.sqrt((h * w) / self.max_pixels)
    grow = np.sqrt(self.min_pixels / (h * w))
    h_bar = np.where(over, np.maximum(factor, np.floor(h / shrink / factor) * factor), h_bar)
    w_bar = np.where(over, np.maximum(factor, np.floor(w / shrink / factor) * factor), w_bar)
    h_bar = np.where(under, np.ceil(h * grow / factor) * factor, h_bar)
    w_bar = np.where(under, np.ceil(w * grow / factor) * factor, w_bar)
    return h_bar.astype(np.int64), w_bar.astype(np.int64)

  def grids(self, heights: np.ndarray, widths: np.ndarray) -> np.ndarray:
    rh, rw = self.resized(heights, widths)
    return np.stack([np.ones_like(rh), rh // self.patch, rw // self.patch], -1)

  def tokens(self, heights: np.ndarray, widths: np.ndarray) -> np.ndarray:
    grid = self.grids(heights, widths)
    return grid.prod(-1) // (self.merge * self.merge)

  def patches(self, heights: np.ndarray, widths: np.ndarray) -> np.ndarray:
    return self.grids(heights, widths).prod(-1)


_POLICIES: dict[str, type[FixedSize] | type[NativeResolution]] = {"fixed": FixedSize, "native": NativeResolution}


def image_policy(spec: Mapping[str, Any]) -> FixedSize | NativeResolution:
  """A policy from its config mapping: `{"policy": "fixed" | "native", ...its fields}`; a `ValueError`
  names an unknown policy or field.

  >>> image_policy({"policy": "fixed", "height": 336, "width": 336, "pool": 1}).tokens(np.array([9]), np.array([9])).tolist()
  [576]
  """
  values = dict(spec)
  kind = values.pop("policy", None)
  if not isinstance(kind, str) or kind not in _POLICIES:
    raise ValueError(f"images.policy: {kind!r} is not one of {sorted(_POLICIES)}")
  cls = _POLICIES[kind]
  fields = {f.name for f in dataclasses.fields(cls)}
  unknown = sorted(set(values) - fields)
  if unknown:
    raise ValueError(f"images.{unknown[0]}: not a field of the {kind} policy (its fields: {sorted(fields)})")
  return cls(**values)
