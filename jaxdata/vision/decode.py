"""Image bytes to RGB pixels and patches: read in the read stage (never in the planner), with one stated
behaviour for each kind of awkward image::

    bytes --image_size-->  (height, width)       the header only, EXIF orientation applied (planning, conversion)
    bytes --decode_image-> uint8 [H, W, 3]        RGB, as transformers' processors convert
          --image_patches(policy)-> uint8 [n, C p p]  resized as the processor resizes, patches in its order
    bytes --decoded_patches(policy)-> the same, in one pass (the read stage's)

    input                       behaviour
    JPEG, PNG, WebP, GIF, BMP   decoded by Pillow
    grayscale, palette, CMYK    converted to RGB (Pillow's conversion, as the processors do)
    alpha (RGBA, LA, palette    composited onto white (as transformers' `convert_to_rgb`)
      with transparency)
    16-bit (I;16, I)            the high 8 bits of each sample (value >> 8): the processors' clip would
                                make most pixels white
    EXIF orientation            applied (as transformers' `load_image`): size and pixels are upright
    animated (GIF, WebP)        the first frame
    over `max_pixels` (a        refused from the header, before any decode (default 2^27, below Pillow's
      decompression bomb)         own refusal at twice its 89M-pixel limit)
    corrupt or truncated bytes  refused
  Every refusal is an `InputFormatError` naming `where` (the file, line or record, and the image's index).

>>> import io
>>> from PIL import Image
>>> buffer = io.BytesIO()
>>> Image.new("LA", (5, 3), (0, 0)).save(buffer, "PNG")
>>> image_size(buffer.getvalue(), "x"), decode_image(buffer.getvalue(), "x")[0, 0].tolist()
((3, 5), [255, 255, 255])
"""

from __future__ import annotations

import io
import re
import warnings

import numpy as np

from jaxdata.errors import InputFormatError, optional_module
from jaxdata.vision.policies import MAX_PIXELS, FixedSize, NativeResolution

optional_module("PIL", "vision", "reading images")  # the `vision` extra, named where it is missing
from PIL import Image, ImageOps  # noqa: E402 -- after the check that names the extra

__all__ = ["decode_image", "decoded_patches", "image_patches", "image_size"]

_TRANSPOSED = (5, 6, 7, 8)  # EXIF orientations that swap width and height
_EXIF_ORIENTATION = 0x0112
_RESAMPLE = {"bilinear": Image.Resampling.BILINEAR, "bicubic": Image.Resampling.BICUBIC}
# What a damaged image raises inside Pillow: unidentified (OSError), truncated (OSError), a bad header field
# (SyntaxError, ValueError), a bomb over twice its limit; all are one refusal naming the image.
_DECODE_ERRORS = (OSError, SyntaxError, ValueError, Image.DecompressionBombError)


def _opened(data: bytes, where: str, max_pixels: int) -> Image.Image:
  """The image's header read (no pixels decoded yet), refused if unreadable or over `max_pixels`."""
  try:
    with warnings.catch_warnings():
      warnings.simplefilter("ignore", Image.DecompressionBombWarning)  # our own limit decides, below
      image = Image.open(io.BytesIO(data))
  except Image.DecompressionBombError as error:
    raise InputFormatError(f"{where}: over the {max_pixels:,}-pixel limit, a decompression bomb ({error})") from error
  except Image.UnidentifiedImageError as error:
    raise InputFormatError(f"{where}: not a readable image (no decoder recognises its bytes)") from error
  except _DECODE_ERRORS as error:
    raise InputFormatError(f"{where}: not a readable image ({_said(error)})") from error
  width, height = image.size
  if width * height > max_pixels:
    raise InputFormatError(
      f"{where}: {width} x {height} pixels is over the {max_pixels:,}-pixel limit (a decompression bomb, or raise "
      "max_pixels)"
    )
  return image


def _said(error: BaseException) -> str:
  """Pillow's error, without the addresses of the objects it names (a message must not change run to run)."""
  return f"{type(error).__name__}: " + re.sub(r" at 0x[0-9a-fA-F]+", "", str(error))


def image_size(data: bytes, where: str, max_pixels: int = MAX_PIXELS) -> tuple[int, int]:
  """(height, width) of the upright image, from its header alone (EXIF orientation applied)."""
  image = _opened(data, where, max_pixels)
  width, height = image.size
  try:
    orientation = image.getexif().get(_EXIF_ORIENTATION, 1)
  except _DECODE_ERRORS:
    orientation = 1  # an unreadable EXIF block: the image as stored (decode_image does the same)
  return (width, height) if orientation in _TRANSPOSED else (height, width)


def _rgb(image: Image.Image) -> Image.Image:
  """The image as RGB (module docstring: 16-bit, alpha, other modes); an RGB image as it is."""
  if image.mode == "RGB":
    return image
  if image.mode in ("I;16", "I;16B", "I;16L", "I"):
    high = (np.asarray(image).astype(np.int64) >> 8).clip(0, 255).astype(np.uint8)
    return Image.fromarray(np.repeat(high[..., None], 3, -1))
  if "A" in image.getbands() or image.info.get("transparency") is not None:
    background = Image.new("RGBA", image.size, (255, 255, 255, 255))
    return Image.alpha_composite(background, image.convert("RGBA")).convert("RGB")
  return image.convert("RGB")


def _decoded(data: bytes, where: str, max_pixels: int) -> Image.Image:
  """The upright RGB image, decoded (one copy of its pixels where nothing needs changing)."""
  image = _opened(data, where, max_pixels)
  try:
    image.seek(0)  # an animation: its first frame
    image.load()
    try:
      if image.getexif().get(_EXIF_ORIENTATION, 1) != 1:
        image = ImageOps.exif_transpose(image)
    except _DECODE_ERRORS:
      pass  # an unreadable EXIF block: the image as stored (image_size does the same)
    return _rgb(image)
  except _DECODE_ERRORS as error:
    raise InputFormatError(f"{where}: a damaged image ({_said(error)})") from error


def decode_image(data: bytes, where: str, max_pixels: int = MAX_PIXELS) -> np.ndarray:
  """The upright image as uint8 [height, width, 3] RGB (module docstring: every awkward kind's behaviour)."""
  return np.ascontiguousarray(np.asarray(_decoded(data, where, max_pixels)))


def _cut(image: Image.Image, policy: FixedSize | NativeResolution, where: str = "an image") -> np.ndarray:
  """`image` resized as the policy's processor resizes it (Pillow, its filter), cut into its patches."""
  try:
    (height,), (width,) = policy.resized(np.array([image.height]), np.array([image.width]))
  except ValueError as error:  # a size the processor refuses
    raise InputFormatError(f"{where}: {error}") from error
  resized = np.asarray(image.resize((int(width), int(height)), _RESAMPLE[policy.resample]))
  p = policy.patch
  merge = policy.merge if isinstance(policy, NativeResolution) else 1
  rows, cols = int(height) // p, int(width) // p
  blocks = resized.transpose(2, 0, 1).reshape(3, rows // merge, merge, p, cols // merge, merge, p)
  return np.ascontiguousarray(blocks.transpose(1, 4, 2, 5, 0, 3, 6)).reshape(rows * cols, 3 * p * p)


def image_patches(pixels: np.ndarray, policy: FixedSize | NativeResolution) -> np.ndarray:
  """`pixels` (uint8 [H, W, 3]) resized as the policy's processor resizes (Pillow, its filter), cut in
  patches: uint8 [n, 3 p p], each patch channel-major (C, p, p), the patches in the processor's order
  (Qwen's: merge x merge blocks row by row; a fixed size: row by row)."""
  return _cut(Image.fromarray(pixels), policy)


def decoded_patches(
  data: bytes, where: str, policy: FixedSize | NativeResolution, max_pixels: int = MAX_PIXELS
) -> np.ndarray:
  """`image_patches(decode_image(data, ...), policy)` without the round trip through an array: what the
  read stage runs per image."""
  return _cut(_decoded(data, where, max_pixels), policy, where)
