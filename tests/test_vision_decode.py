"""Decoding: each awkward kind of image has the behaviour decode.py's table states, and a bad image is
refused naming where it came from. Alpha is checked against transformers' own `convert_to_rgb`."""

from __future__ import annotations

import io
import struct
import zlib

import numpy as np
import pytest
from PIL import Image
from transformers.image_transforms import convert_to_rgb

from jaxdata.errors import InputFormatError
from jaxdata.vision import FixedSize, NativeResolution, decode_image, decoded_patches, image_patches, image_size

WHERE = "chat.jsonl line 7, image 2"


def _encoded(image: Image.Image, fmt: str, **options) -> bytes:
  buffer = io.BytesIO()
  image.save(buffer, fmt, **options)
  return buffer.getvalue()


def _pixels(height: int, width: int, seed: int = 0) -> np.ndarray:
  return np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)


@pytest.mark.parametrize("fmt", ["PNG", "WEBP", "BMP"])
def test_lossless_rgb_decodes_to_its_pixels(fmt):
  pixels = _pixels(17, 23)
  data = _encoded(Image.fromarray(pixels), fmt, **({"lossless": True} if fmt == "WEBP" else {}))
  assert image_size(data, WHERE) == (17, 23)
  assert np.array_equal(decode_image(data, WHERE), pixels)


def test_grayscale_and_palette_become_rgb_as_pillow_converts():
  gray = np.arange(12, dtype=np.uint8).reshape(3, 4) * 20
  out = decode_image(_encoded(Image.fromarray(gray), "PNG"), WHERE)
  assert out.shape == (3, 4, 3) and np.array_equal(out[..., 1], gray)
  palette = Image.fromarray(_pixels(6, 5)).convert("P")
  assert np.array_equal(decode_image(_encoded(palette, "PNG"), WHERE), np.asarray(palette.convert("RGB")))


def test_cmyk_is_converted_to_rgb():
  cmyk = Image.fromarray(_pixels(8, 8)).convert("CMYK")
  data = _encoded(cmyk, "JPEG", quality=95)
  assert Image.open(io.BytesIO(data)).mode == "CMYK"
  assert np.array_equal(decode_image(data, WHERE), np.asarray(Image.open(io.BytesIO(data)).convert("RGB")))


@pytest.mark.parametrize("mode", ["RGBA", "LA"])
def test_alpha_is_composited_onto_white_as_transformers_does(mode):
  rng = np.random.default_rng(3)
  bands = 4 if mode == "RGBA" else 2
  image = Image.fromarray(rng.integers(0, 256, (9, 11, bands), dtype=np.uint8), mode)
  expected = convert_to_rgb(Image.open(io.BytesIO(_encoded(image, "PNG"))), return_numpy=True)
  assert np.array_equal(decode_image(_encoded(image, "PNG"), WHERE), expected)


def test_sixteen_bit_keeps_its_high_eight_bits():
  values = np.array([[0, 255, 256, 65535], [4096, 32768, 511, 12345]], np.uint16)
  data = _encoded(Image.fromarray(values), "PNG")
  out = decode_image(data, WHERE)
  assert np.array_equal(out[..., 0], (values >> 8).astype(np.uint8)) and (out[..., 0] == out[..., 2]).all()


def test_exif_orientation_is_applied_to_the_size_and_the_pixels():
  pixels = _pixels(4, 10)
  image = Image.fromarray(pixels)
  exif = image.getexif()
  exif[0x0112] = 6  # stored rotated: display rotated 90 degrees clockwise
  data = _encoded(image, "PNG", exif=exif)
  assert image_size(data, WHERE) == (10, 4)
  assert np.array_equal(decode_image(data, WHERE), np.rot90(pixels, -1))


def test_an_animation_gives_its_first_frame():
  frames = [Image.fromarray(np.full((5, 5, 3), value, np.uint8)) for value in (10, 200, 90)]
  buffer = io.BytesIO()
  frames[0].save(buffer, "GIF", save_all=True, append_images=frames[1:])
  out = decode_image(buffer.getvalue(), WHERE)
  assert out.shape == (5, 5, 3) and abs(int(out[0, 0, 0]) - 10) <= 2


def _png_claiming(width: int, height: int) -> bytes:
  """A PNG whose header claims width x height (its data a single row: a bomb's shape, not its bytes)."""
  ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)

  def chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

  idat = zlib.compress(b"\0" * (width + 1))
  return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")


def test_a_decompression_bomb_is_refused_from_its_header():
  with pytest.raises(InputFormatError, match=f"{WHERE}: 12000 x 12000 pixels is over the 134,217,728-pixel limit"):
    image_size(_png_claiming(12000, 12000), WHERE)
  with pytest.raises(InputFormatError, match=f"{WHERE}: over the 134,217,728-pixel limit, a decompression bomb"):
    decode_image(_png_claiming(20000, 20000), WHERE)  # past Pillow's own refusal too
  with pytest.raises(InputFormatError, match="40 x 30 pixels is over the 1,000-pixel limit"):
    decode_image(_encoded(Image.fromarray(_pixels(30, 40)), "PNG"), WHERE, max_pixels=1000)


def test_corrupt_or_truncated_bytes_are_refused_naming_the_image():
  with pytest.raises(InputFormatError, match=f"{WHERE}: not a readable image"):
    decode_image(b"this is not an image", WHERE)
  jpeg = _encoded(Image.fromarray(_pixels(64, 64)), "JPEG")
  with pytest.raises(InputFormatError, match=f"{WHERE}: a damaged image"):
    decode_image(jpeg[: len(jpeg) // 2], WHERE)


@pytest.mark.parametrize("kind", ["rgb", "alpha", "exif", "gray16", "cmyk"])
def test_the_read_stages_one_pass_equals_decode_then_patches(kind):
  pixels = _pixels(70, 90, seed=4)
  image, options = Image.fromarray(pixels), {}
  if kind == "alpha":
    image = Image.fromarray(np.dstack([pixels, pixels[..., :1]]), "RGBA")
  elif kind == "exif":
    exif = image.getexif()
    exif[0x0112] = 8
    options = {"exif": exif}
  elif kind == "gray16":
    image = Image.fromarray(pixels[..., 0].astype(np.uint16) * 257)
  elif kind == "cmyk":
    image = image.convert("CMYK")
  data = _encoded(image, "TIFF" if kind == "cmyk" else "PNG", **options)
  for policy in (NativeResolution(), FixedSize(224, 224, patch=14, pool=1)):
    assert np.array_equal(decoded_patches(data, WHERE, policy), image_patches(decode_image(data, WHERE), policy))


def test_the_read_stages_one_pass_names_the_image_whose_size_the_processor_refuses():
  data = _encoded(Image.fromarray(_pixels(2, 1000)), "PNG")
  with pytest.raises(
    InputFormatError, match=f"{WHERE}: image sizes: image 0 is 2 x 1000: its aspect ratio is over 200"
  ):
    decoded_patches(data, WHERE, NativeResolution())
