"""Image decoding per core: jaxdata's read-stage path against a bare Pillow loop on the same images, in one run.

    python -m benchmarks.vision_decode [--images 48] [--repetitions 3]

The images are a LLaVA-OneVision-like mix of sizes and encodings (JPEG photos from 336² to 1920x1080, PNG
screenshots and charts, a WebP), smooth gradients with noise so that they compress as photos do. Each side
turns every image's stored bytes into the uint8 pixels the model's processor would see:

    bare      Image.open(bytes).convert("RGB").resize(policy's size, its filter) -> np.asarray
    jaxdata   decoded_patches: the read stage's decode (EXIF, alpha, 16-bit, animation handled; the header
              checked against max_pixels), the same resize, cut into the processor's patches

per policy (Qwen2-VL's native resolution; Gemma 3's fixed 896²), on one core, sides interleaved, the
median of --repetitions. Printed: images/s of each side and jaxdata / bare (the goal: >= 0.8).
"""

from __future__ import annotations

import argparse
import io
import statistics
import time

import numpy as np
from PIL import Image

from jaxdata.vision import FixedSize, NativeResolution, decoded_patches

SIZES = [(336, 336, "JPEG"), (480, 640, "JPEG"), (768, 1024, "JPEG"), (1080, 1920, "JPEG"), (900, 1440, "PNG")]
SIZES += [(400, 600, "PNG"), (512, 512, "WEBP"), (1280, 720, "JPEG")]


def images(count: int, seed: int = 0) -> list[bytes]:
  """`count` encoded images cycling through SIZES: gradients plus noise."""
  rng = np.random.default_rng(seed)
  out = []
  for i in range(count):
    height, width, fmt = SIZES[i % len(SIZES)]
    y, x = np.mgrid[0:height, 0:width]
    base = np.stack([(x * 255 // width), (y * 255 // height), ((x + y) * 127 // (width + height))], -1)
    pixels = np.clip(base + rng.normal(0, 12, base.shape), 0, 255).astype(np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, fmt, **({"quality": 90} if fmt == "JPEG" else {}))
    out.append(buffer.getvalue())
  return out


def bare(blobs: list[bytes], policy: FixedSize | NativeResolution) -> int:
  resample = {"bilinear": Image.Resampling.BILINEAR, "bicubic": Image.Resampling.BICUBIC}[policy.resample]
  total = 0
  for blob in blobs:
    image = Image.open(io.BytesIO(blob)).convert("RGB")
    (height,), (width,) = policy.resized(np.array([image.height]), np.array([image.width]))
    total += np.asarray(image.resize((int(width), int(height)), resample)).size
  return total


def jaxdata_path(blobs: list[bytes], policy: FixedSize | NativeResolution) -> int:
  return sum(decoded_patches(blob, f"image {i}", policy).size for i, blob in enumerate(blobs))


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--images", type=int, default=48)
  parser.add_argument("--repetitions", type=int, default=3)
  args = parser.parse_args()
  blobs = images(args.images)
  print(f"{len(blobs)} images, {sum(map(len, blobs)) / len(blobs) / 1024:.0f} KiB each on average, one core")
  print(f"{'policy':24s} {'bare img/s':>11s} {'jaxdata img/s':>14s} {'ratio':>6s}")
  for name, policy in (("native (Qwen2-VL)", NativeResolution()), ("fixed 896² (Gemma 3)", FixedSize())):
    times: dict[str, list[float]] = {"bare": [], "jaxdata": []}
    for _ in range(args.repetitions):
      for side, run in (("bare", bare), ("jaxdata", jaxdata_path)):
        start = time.perf_counter()
        assert run(blobs, policy) > 0
        times[side].append(time.perf_counter() - start)
    rate = {side: len(blobs) / statistics.median(t) for side, t in times.items()}
    print(f"{name:24s} {rate['bare']:11.1f} {rate['jaxdata']:14.1f} {rate['jaxdata'] / rate['bare']:6.2f}")


if __name__ == "__main__":
  main()
