"""Image-text rows: jaxdata's packed rows of three budgets against MaxText's padded layout and a Grain pipeline.

    python -m benchmarks.vision_throughput [--out /tmp/jaxdata-vision] [--images 600] [--repetitions 1]

A LLaVA-OneVision-like mix of four sets, converted once by `jaxdata convert --format vision` (Qwen2-VL's
native-resolution policy, max_pixels 448², a Qwen-VL-like tokenizer trained here), token weights:

    text          text-only chats                                             .30
    single        one image and a question, an answer                        .45
    multi         2-4 images and a question                                   .15
    interleaved   a document of texts and 1-3 images (OBELICS-like)          .10

Images are photos-like JPEGs and PNGs of 336² to 1920x1080 (`benchmarks.vision_decode.images`). Every side
decodes each image from its stored bytes, resizes it as the processor does and hands rows of 4,096 tokens
to the loop, with two worker processes:

    jaxdata                 packing.images: examples whole in rows of S tokens, P patches (from the corpus's
                            patch-to-token ratio) and 64 images; uint8 patches; reader processes 2
    MaxText layout          one example a row, padded to S (its multimodal path does not pack), images as
                            float32 [4, 448, 448, 3] normalised pixels, padded to 4 a row; Grain, mp_prefetch 2
    Grain, uint8 patches    the pipeline a team writes: one example a row, the example's uint8 patches padded
                            to 4 x 1,024; Grain's mix by example weights, decode in map, mp_prefetch 2

Each side runs in its own process until --images images are handed out. Printed per side: images/s,
tokens/s (tokens in rows, padding left out), token fill (of S) and patch fill (of the patch slots), bytes
handed to the device per image, the process's peak memory (with its workers), and its realised token shares
per set (jaxdata's: the token weights; Grain mixes examples, so its shares follow the examples' lengths).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from typing import Any

import numpy as np

SETS = {"text": 0.30, "single": 0.45, "multi": 0.15, "interleaved": 0.10}
EXAMPLES = {"text": 300, "single": 400, "multi": 120, "interleaved": 80}
SEQ_LEN, ROWS, MAX_IMAGES_EXAMPLE, DISTINCT_IMAGES = 4096, 8, 4, 24
SIDES = ("jaxdata", "maxtext-layout", "grain-uint8")


def _policy() -> Any:
  from jaxdata.vision import NativeResolution  # noqa: PLC0415

  return NativeResolution(max_pixels=448 * 448)


def _records(name: str, rng: np.random.Generator, images: list[str]) -> list[dict[str, Any]]:
  words = "the picture shows a chart of sales by month and a red car near the sea under blue sky".split()
  text = lambda low, high: " ".join(rng.choice(words, int(rng.integers(low, high))))
  out = []
  for _ in range(EXAMPLES[name]):
    count = {"text": 0, "single": 1, "multi": int(rng.integers(2, 5)), "interleaved": int(rng.integers(1, 4))}[name]
    picked = [images[int(i)] for i in rng.integers(0, len(images), count)]
    if name == "interleaved":
      texts, slots = [], []
      for image in picked:
        texts += [text(20, 120), None]
        slots += [None, image]
      out.append({"texts": [*texts, text(20, 80)], "images": [*slots, None]})
      continue
    user = [{"type": "image"}] * count + [{"type": "text", "text": text(8, 60)}]
    reply = [{"type": "text", "text": text(20, 200)}]
    out.append(
      {"messages": [{"role": "user", "content": user}, {"role": "assistant", "content": reply}], "images": picked}
    )
  return out


def _suffix(blob: bytes) -> str:
  return "png" if blob.startswith(b"\x89PNG") else "webp" if blob.startswith(b"RIFF") else "jpg"


def make_sets(out: str) -> dict[str, str]:
  """The four sets under `out` (converted once; reused when present)."""
  from benchmarks.vision_decode import images as encoded_images  # noqa: PLC0415
  from jaxdata.conversion import ConvertOptions, convert  # noqa: PLC0415
  from jaxdata.conversion.options import ImageOptions  # noqa: PLC0415
  from jaxdata.demo.vision import vision_tokenizer  # noqa: PLC0415

  paths = {name: os.path.join(out, name) for name in SETS}
  if all(os.path.isfile(os.path.join(p, "manifest.json")) for p in paths.values()):
    return paths
  os.makedirs(out, exist_ok=True)
  names = []
  for i, blob in enumerate(encoded_images(DISTINCT_IMAGES)):
    names.append(f"image-{i}.{_suffix(blob)}")
    with open(os.path.join(out, names[-1]), "wb") as f:
      f.write(blob)
  rng = np.random.default_rng(0)
  records = {name: _records(name, rng, names) for name in SETS}
  vision_tokenizer(os.path.join(out, "tokenizer"), [json.dumps(r) for rows in records.values() for r in rows][:400])
  options = ConvertOptions(
    tokenizer=f"hf:{os.path.join(out, 'tokenizer')}", examples="vision", images=ImageOptions(policy=_policy())
  )
  for name, rows in records.items():
    with open(os.path.join(out, f"{name}.jsonl"), "w") as f:
      f.writelines(json.dumps(r) + "\n" for r in rows)
    convert([os.path.join(out, f"{name}.jsonl")], paths[name], name, options)
  return paths


def patch_budget(paths: dict[str, str]) -> int:
  """Patches a row of SEQ_LEN tokens holds at the mix's patch-to-token ratio (each set at its token weight),
  rounded down to a multiple of 64."""
  from jaxdata.sources import TokenDataset  # noqa: PLC0415

  ratio = 0.0
  for name, path in paths.items():
    with TokenDataset(path) as dataset:
      ratio += SETS[name] * float(np.sum(dataset.columns["num_patches"])) / float(dataset.lengths.sum())
  return int(ratio * SEQ_LEN) // 64 * 64


def run_jaxdata(paths: dict[str, str], images: int) -> dict[str, Any]:
  import jaxdata  # noqa: PLC0415

  cfg = jaxdata.PipelineConfig.from_dict(
    {
      "seed": 1,
      "datasets": [{"name": n, "path": p} for n, p in paths.items()],
      "mixture": {"weights": SETS},
      "exhausted_policy": "repeat",
      "packing": {"seq_len": SEQ_LEN, "images": {"max_patches": patch_budget(paths), "max_images": 64}},
      "batch": {"global_batch_size": ROWS},
    }
  )
  making = jaxdata.StepMaking("process", reader_processes=2)
  with jaxdata.Pipeline(cfg, prefetch=2, making=making) as pipe:
    next(pipe)
    tally = _Tally(len(SETS))
    started = time.perf_counter()
    while tally.images < images:
      batch = next(pipe)
      segments = batch["segment_ids"] > 0
      tally.add(
        images=int(batch["num_images"].sum()),
        tokens=int(segments.sum()),
        token_slots=segments.size,
        patches=int((batch["patch_image_ids"] > 0).sum()),
        patch_slots=batch["patch_image_ids"].size,
        nbytes=sum(v.nbytes for v in batch.values()),
        per_set=np.bincount(batch["source_ids"][segments], minlength=len(SETS)),
      )
    return tally.result(time.perf_counter() - started)


class _Tally:
  def __init__(self, sets: int) -> None:
    self.images = self.tokens = self.token_slots = self.patches = self.patch_slots = self.nbytes = 0
    self.per_set = np.zeros(sets, np.int64)

  def add(self, **amounts: Any) -> None:
    for name, value in amounts.items():
      setattr(self, name, getattr(self, name) + value)

  def result(self, seconds: float) -> dict[str, Any]:
    own, children = (resource.getrusage(w).ru_maxrss for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    return {
      "images_per_s": self.images / seconds,
      "tokens_per_s": self.tokens / seconds,
      "token_fill": self.tokens / self.token_slots,
      "patch_fill": self.patches / max(self.patch_slots, 1),
      "bytes_per_image": self.nbytes / max(self.images, 1),
      "peak_mib": (own + children) / 1024,
      "shares": dict(zip(SETS, (self.per_set / max(self.per_set.sum(), 1)).tolist())),
    }


class _Records:
  """Grain's random-access source over one jaxdata set: each record's ids, mask and stored images."""

  def __init__(self, path: str) -> None:
    self.path = path
    from jaxdata.sources import TokenDataset  # noqa: PLC0415

    with TokenDataset(path) as dataset:
      self.count = dataset.num_records
    self._dataset: Any = None

  def __len__(self) -> int:
    return self.count

  def __getitem__(self, index: int) -> dict[str, Any]:
    from jaxdata.sources import TokenDataset  # noqa: PLC0415

    if self._dataset is None:  # opened in each worker process
      self._dataset = TokenDataset(self.path)
    shard, record = self._dataset.locate(np.array([index]))
    ragged, images = self._dataset.read_with_images(shard, record)
    return {"tokens": np.asarray(ragged.tokens), "images": images[0]}


def _grain_rows(layout: str, set_index: int) -> Any:
  """Grain's map: the example's row of SEQ_LEN (truncated), its images decoded as the layout wants."""
  from jaxdata.vision.decode import decoded_patches  # noqa: PLC0415

  policy = _policy()

  def row(example: dict[str, Any]) -> dict[str, np.ndarray]:
    tokens = np.zeros(SEQ_LEN, np.int32)
    n = min(example["tokens"].size, SEQ_LEN)
    tokens[:n] = example["tokens"][:n]
    blobs = [blob for blob, *_ in example["images"]][:MAX_IMAGES_EXAMPLE]
    cuts = [decoded_patches(blob, "image", policy) for blob in blobs]
    out = {"tokens": tokens, "length": np.int32(n), "set": np.int32(set_index), "images": np.int32(len(cuts))}
    if layout == "maxtext-layout":  # float32 normalised pixels [4, 448, 448, 3], zeros beyond the images
      pixels = np.zeros((MAX_IMAGES_EXAMPLE, 448, 448, 3), np.float32)
      for k, cut in enumerate(cuts):  # the resized image's values (its layout does not change the cost)
        pixels[k].reshape(-1)[: cut.size] = (cut.reshape(-1).astype(np.float32) / 255.0 - 0.5) / 0.5
      out["pixels"] = pixels
      out["patches_used"] = np.int32(sum(c.shape[0] for c in cuts))
    else:  # uint8 patches, padded to 4 x 1,024 (the largest example's)
      patches = np.zeros((MAX_IMAGES_EXAMPLE * 1024, 3 * policy.patch**2), np.uint8)
      used = sum(c.shape[0] for c in cuts)
      if cuts:
        patches[:used] = np.concatenate(cuts)
      out["patches"], out["patches_used"] = patches, np.int32(used)
    return out

  return row


def run_grain(paths: dict[str, str], images: int, layout: str) -> dict[str, Any]:
  import grain  # noqa: PLC0415
  from absl import flags  # noqa: PLC0415

  flags.FLAGS.mark_as_parsed()  # Grain reads absl flags; we are outside absl.app.run
  streams = [
    grain.MapDataset.source(_Records(path))
    .shuffle(seed=i)
    .repeat()
    .map(_grain_rows(layout, i))
    .to_iter_dataset(grain.ReadOptions(num_threads=0))
    for i, path in enumerate(paths.values())
  ]
  mixed = grain.IterDataset.mix(streams, list(SETS.values())).batch(ROWS)
  iterator = iter(mixed.mp_prefetch(grain.MultiprocessingOptions(num_workers=2)))
  next(iterator)
  tally = _Tally(len(SETS))
  started = time.perf_counter()
  while tally.images < images:
    batch = next(iterator)
    pixels = batch.get("pixels")
    slots = (
      pixels.size // (3 * _policy().patch ** 2)
      if pixels is not None
      else batch["patches"].shape[0] * batch["patches"].shape[1]
    )
    tally.add(
      images=int(batch["images"].sum()),
      tokens=int(batch["length"].sum()),
      token_slots=ROWS * SEQ_LEN,
      patches=int(batch["patches_used"].sum()),
      patch_slots=slots,
      nbytes=sum(np.asarray(v).nbytes for k, v in batch.items() if k in ("tokens", "pixels", "patches")),
      per_set=np.bincount(batch["set"], weights=batch["length"], minlength=len(SETS)).astype(np.int64),
    )
  return tally.result(time.perf_counter() - started)


def _side(name: str, paths: dict[str, str], images: int) -> dict[str, Any]:
  """One side in a process of its own (its peak memory is its own), as JSON."""
  command = [sys.executable, "-m", "benchmarks.vision_throughput", "--side", name, "--paths", json.dumps(paths)]
  done = subprocess.run([*command, "--images", str(images)], capture_output=True, text=True, check=True)
  return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--out", default="/tmp/jaxdata-vision")
  parser.add_argument("--images", type=int, default=600)
  parser.add_argument("--repetitions", type=int, default=1)
  parser.add_argument("--side", choices=SIDES, help=argparse.SUPPRESS)
  parser.add_argument("--paths", help=argparse.SUPPRESS)
  args = parser.parse_args()
  if args.side:
    paths = json.loads(args.paths)
    run = run_jaxdata(paths, args.images) if args.side == "jaxdata" else run_grain(paths, args.images, args.side)
    print(json.dumps(run))
    return
  paths = make_sets(args.out)
  print(f"sets {', '.join(f'{n} {w}' for n, w in SETS.items())} (token weights); rows of {SEQ_LEN}, {ROWS} a step;")
  print(f"jaxdata's patch budget {patch_budget(paths)} a row; --images {args.images}, repetitions {args.repetitions}")
  runs: dict[str, list[dict[str, Any]]] = {side: [] for side in SIDES}
  for _ in range(args.repetitions):
    for side in SIDES:
      runs[side].append(_side(side, paths, args.images))
  header = (
    f"{'side':16s} {'img/s':>7s} {'tokens/s':>9s} {'tok fill':>8s} {'patch fill':>10s} {'MB/img':>7s} {'peak MiB':>9s}"
  )
  print(header + "  shares " + " / ".join(SETS))
  for side, results in runs.items():
    median = {k: statistics.median(r[k] for r in results) for k in results[0] if k != "shares"}
    shares = " / ".join(f"{results[-1]['shares'][n]:.3f}" for n in SETS)
    print(
      f"{side:16s} {median['images_per_s']:7.1f} {median['tokens_per_s']:9.0f} {median['token_fill']:8.3f} "
      f"{median['patch_fill']:10.3f} {median['bytes_per_image'] / 1e6:7.2f} {median['peak_mib']:9.0f}  {shares}"
    )
  best = max(statistics.median(r["images_per_s"] for r in runs[s]) for s in SIDES[1:])
  print(f"jaxdata / best other, images/s: {statistics.median(r['images_per_s'] for r in runs['jaxdata']) / best:.2f}")


if __name__ == "__main__":
  main()
