"""Image policies against the processors they stand for: transformers' own image processors (their Pillow
backends, constructed from their defaults, no weights) give the grids, token counts and pixel values;
jaxdata computes the same from an image's stored size alone."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image
from transformers.models.gemma3.image_processing_pil_gemma3 import Gemma3ImageProcessorPil
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil
from transformers.models.siglip.image_processing_pil_siglip import SiglipImageProcessorPil

from jaxdata.vision import (
  FixedSize,
  NativeResolution,
  decode_image,
  image_patches,
  image_policy,
  normalize_patches,
  temporal_patches,
)

RNG_SEED = 20261207


def _random_sizes(count: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
  """Sizes from thumbnails to 8K frames, aspect ratios up to 1:150 (the processor refuses over 200)."""
  rng = np.random.default_rng(seed)
  heights = np.exp(rng.uniform(np.log(1), np.log(8000), count)).astype(np.int64) + 1
  aspect = np.exp(rng.uniform(-np.log(150), np.log(150), count))
  widths = np.clip((heights * aspect).astype(np.int64), 1, None)
  keep = np.maximum(heights, widths) / np.minimum(heights, widths) <= 150
  return heights[keep][:1000], widths[keep][:1000]


@pytest.mark.parametrize(("patch", "merge"), [(14, 2), (16, 2)])  # Qwen2-VL / 2.5-VL; Qwen3-VL
def test_native_grids_equal_the_qwen_processors_on_a_thousand_sizes(patch, merge):
  processor = Qwen2VLImageProcessorPil()
  kwargs = {"patch_size": patch, "merge_size": merge}
  heights, widths = _random_sizes(1100, RNG_SEED + patch)
  assert heights.size == 1000
  policy = NativeResolution(patch=patch, merge=merge)
  grids = policy.grids(heights, widths)
  expected = [processor.get_number_of_image_patches(int(h), int(w), kwargs) for h, w in zip(heights, widths)]
  assert grids.prod(-1).tolist() == expected
  assert (policy.tokens(heights, widths) * merge * merge == grids.prod(-1)).all()
  assert (grids[:, 1] % merge == 0).all() and (grids[:, 2] % merge == 0).all()


def _png(pixels: np.ndarray) -> bytes:
  buffer = io.BytesIO()
  Image.fromarray(pixels).save(buffer, "PNG")
  return buffer.getvalue()


def test_native_patches_equal_the_qwen_processors_pixel_values():
  """Patches before normalisation: the processor's pixel values (each patch repeated over the temporal
  axis) within one uint8 level, and the grid it reports."""
  processor = Qwen2VLImageProcessorPil()
  policy = NativeResolution()
  rng = np.random.default_rng(RNG_SEED)
  for height, width in [(300, 500), (57, 1203), (1024, 768), (29, 29), (1500, 2000)]:
    pixels = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
    out = processor(images=[Image.fromarray(pixels)], do_rescale=False, do_normalize=False, return_tensors="np")
    assert out["image_grid_thw"].tolist() == policy.grids(np.array([height]), np.array([width])).tolist()
    ours = image_patches(decode_image(_png(pixels), "test"), policy)  # [n, 3 p p]
    p, t = policy.patch, policy.temporal_patch
    theirs = out["pixel_values"].reshape(ours.shape[0], 3, t, p, p)
    repeated = np.broadcast_to(ours.reshape(-1, 3, 1, p, p), theirs.shape)
    assert np.abs(repeated.astype(np.float64) - theirs).max() <= 1


@pytest.mark.parametrize(
  ("processor_type", "policy"),
  [
    (Gemma3ImageProcessorPil, FixedSize(224, 224, patch=14, pool=1, resample="bilinear")),
    (SiglipImageProcessorPil, FixedSize(224, 224, patch=16, pool=1, resample="bicubic")),
  ],
)
def test_fixed_size_patches_equal_the_processors_pixel_values(processor_type, policy):
  """Gemma 3's and SigLIP's processors (defaults: 224², bilinear / bicubic): the same resize, cut in the
  same patches, row by row."""
  processor = processor_type()
  rng = np.random.default_rng(RNG_SEED + 1)
  for height, width in [(300, 500), (13, 900), (224, 224)]:
    pixels = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
    out = processor(images=[Image.fromarray(pixels)], do_rescale=False, do_normalize=False, return_tensors="np")
    image = out["pixel_values"][0]  # [3, H, W]
    p = policy.patch
    theirs = image.reshape(3, 224 // p, p, 224 // p, p).transpose(1, 3, 0, 2, 4).reshape(-1, 3 * p * p)
    ours = image_patches(pixels, policy)
    assert ours.shape == (policy.patches(np.array([height]), np.array([width]))[0], 3 * p * p)
    assert np.abs(ours.astype(np.float64) - theirs).max() <= 1


def test_gemma3_defaults_give_its_256_tokens_and_llava_its_576():
  assert FixedSize().tokens(np.array([37, 4000]), np.array([91, 3])).tolist() == [256, 256]
  assert FixedSize(336, 336, patch=14, pool=1).tokens(np.array([5]), np.array([5])).tolist() == [576]


def test_a_policy_from_config_names_a_bad_field_or_value():
  assert image_policy({"policy": "native", "patch": 16}) == NativeResolution(patch=16)
  with pytest.raises(ValueError, match="images.policy: 'tiles' is not one of"):
    image_policy({"policy": "tiles"})
  with pytest.raises(ValueError, match=r"images.policy: \['fixed'\] is not one of"):
    image_policy({"policy": ["fixed"]})
  with pytest.raises(ValueError, match="images.pach: not a field of the native policy"):
    image_policy({"policy": "native", "pach": 16})
  with pytest.raises(ValueError, match=r"FixedSize.height: 900 is not a multiple of patch x pool \(56\)"):
    FixedSize(height=900)
  with pytest.raises(ValueError, match="NativeResolution.min_pixels: 5000 is above max_pixels 4000"):
    NativeResolution(min_pixels=5000, max_pixels=4000)
  with pytest.raises(ValueError, match="NativeResolution.merge: a positive integer, got 0"):
    NativeResolution(merge=0)


def test_sizes_the_processor_refuses_are_refused_naming_the_image():
  policy = NativeResolution()
  with pytest.raises(ValueError, match="image 1 is 10 x 2500: its aspect ratio is over 200"):
    policy.grids(np.array([100, 10]), np.array([100, 2500]))
  with pytest.raises(ValueError, match="image 0 is 0 x 5 pixels"):
    policy.tokens(np.array([0]), np.array([5]))
  with pytest.raises(ValueError, match="aspect ratio must be smaller than 200"):
    Qwen2VLImageProcessorPil().get_number_of_image_patches(10, 2500, {})


def test_patches_normalised_on_the_device_equal_the_processors_pixel_values():
  """uint8 patches, normalised and laid out over time on the device: Qwen's processor's own pixel values
  (rescaled and normalised with its defaults) within float32 rounding."""
  processor = Qwen2VLImageProcessorPil()
  policy = NativeResolution()
  pixels = np.random.default_rng(RNG_SEED + 2).integers(0, 256, (230, 410, 3), dtype=np.uint8)
  theirs = processor(images=[Image.fromarray(pixels)], return_tensors="np")["pixel_values"]
  ours = image_patches(decode_image(_png(pixels), "test"), policy)
  normalised = normalize_patches(ours, processor.image_mean, processor.image_std, patch=policy.patch)
  laid_out = np.asarray(temporal_patches(normalised, patch=policy.patch, temporal=policy.temporal_patch))
  assert laid_out.shape == theirs.shape
  assert np.abs(laid_out - theirs).max() < 1e-5
  with pytest.raises(ValueError, match="the last axis holds 588 values, not 3 x 16 x 16"):
    normalize_patches(ours, processor.image_mean, processor.image_std, patch=16)
