"""`jaxdata demo --vision`: a tiny vision-language model on generated pictures of shapes, no network.

::

    sets        captions: a picture and its caption ("a red circle on white")
                questions: a chat, a picture and a question about it ("what shape is it?" -> "a circle")
    tokenizer   a byte-level BPE trained on the texts, with Qwen-VL's image tokens and a ChatML template
    convert     jaxdata convert --format vision: each picture's run of image tokens in place, the pictures
                stored as PNG (native resolution, 2 x 2 patches merged into a token)
    pipeline    packing.images: rows of 128 tokens, 224 patches and 8 images, examples whole
    model       the demo model with a patch embedding in front: each image token's embedding is its merged
                patches' (normalised on the device from uint8), the text's its token's
    resume      the state halfway, restored into a fresh pipeline, gives the same batches
"""

from __future__ import annotations

import dataclasses
import io
import os
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxdata.config.pipeline_config import PipelineConfig
from jaxdata.conversion.options import ImageOptions
from jaxdata.demo import model
from jaxdata.demo.sft import chat_tokenizer, converted_sets, trained_checking_resume
from jaxdata.errors import optional_module
from jaxdata.sources.manifest import Manifest
from jaxdata.vision.device import CLIP_MEAN, CLIP_STD, normalize_patches
from jaxdata.vision.policies import NativeResolution

__all__ = ["VisionResult", "run_vision_demo", "vision_tokenizer"]

VISION_TEMPLATE = (
  "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{% if m['role'] == 'assistant' %}{% generation %}"
  "{% for c in m['content'] %}{{ c['text'] }}{% endfor %}<|im_end|>{% endgeneration %}{% else %}"
  "{% for c in m['content'] %}{% if c['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
  "{% else %}{{ c['text'] }}{% endif %}{% endfor %}<|im_end|>{% endif %}\n{% endfor %}"
)
SPECIALS = ["<unk>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>", "<|image_pad|>"]
SHAPES, COLOURS = (
  ("circle", "square", "triangle"),
  {"red": (220, 40, 40), "green": (40, 170, 60), "blue": (40, 70, 220)},
)
POLICY = NativeResolution(min_pixels=28 * 28, max_pixels=112 * 112)  # at most 16 image tokens, 64 patches
VISION_SETS = {"captions": (0.5, 300), "questions": (0.5, 300)}  # token weight, examples


@dataclasses.dataclass(frozen=True)
class VisionResult:
  steps: int
  losses: list[float]
  images_seen: int
  patch_fill: float  # the share of the rows' patch slots that hold a patch
  token_fill: float
  resume_ok: bool


def _picture(shape: str, colour: str, size: int) -> bytes:
  draw_module = optional_module("PIL.ImageDraw", "vision", "the vision demo's pictures")
  image_module = optional_module("PIL.Image", "vision", "the vision demo's pictures")
  image = image_module.new("RGB", (size, size), (250, 250, 250))
  draw, m = draw_module.Draw(image), size // 6
  box = (m, m, size - m, size - m)
  if shape == "circle":
    draw.ellipse(box, fill=COLOURS[colour])
  elif shape == "square":
    draw.rectangle(box, fill=COLOURS[colour])
  else:
    draw.polygon([(size // 2, m), (size - m, size - m), (m, size - m)], fill=COLOURS[colour])
  buffer = io.BytesIO()
  image.save(buffer, "PNG")
  return buffer.getvalue()


def vision_sets(root: str, seed: int = 0) -> dict[str, list[dict[str, Any]]]:
  """The two sets' records, their pictures written under `root` (PNG files the records name)."""
  rng = np.random.default_rng(seed)
  out: dict[str, list[dict[str, Any]]] = {"captions": [], "questions": []}
  for name, (_, count) in VISION_SETS.items():
    for i in range(count):
      shape, colour = SHAPES[int(rng.integers(3))], list(COLOURS)[int(rng.integers(3))]
      path = f"{name}-{i}.png"
      with open(os.path.join(root, path), "wb") as f:
        f.write(_picture(shape, colour, int(rng.integers(40, 120))))
      if name == "captions":
        out[name].append({"image": path, "text": f"a {colour} {shape} on white"})
        continue
      question = ["what shape is it?", "what colour is the shape?"][i % 2]
      answer = shape if i % 2 == 0 else colour
      user = [{"type": "image"}, {"type": "text", "text": question}]
      messages = [
        {"role": "user", "content": user},
        {"role": "assistant", "content": [{"type": "text", "text": answer}]},
      ]
      out[name].append({"messages": messages, "images": [path]})
  return out


def vision_tokenizer(directory: str, texts: list[str]) -> None:
  """A byte-level BPE trained on `texts` with Qwen-VL's image tokens and `VISION_TEMPLATE`, saved as transformers
  saves one."""
  chat_tokenizer(directory, texts, specials=SPECIALS, template=VISION_TEMPLATE, vocab_size=512, what="the vision demo")


def build_vision_sets(cache_dir: str, log: Callable[[str], None] = print) -> dict[str, str]:
  """The converted sets under `cache_dir/vision` (built once)."""
  root = os.path.join(cache_dir, "vision")
  paths = {name: os.path.join(root, name) for name in VISION_SETS}
  if all(os.path.isfile(os.path.join(p, "manifest.json")) for p in paths.values()):
    return paths
  os.makedirs(root, exist_ok=True)
  sets = vision_sets(root)
  texts = [str(row) for rows in sets.values() for row in rows]
  log("tokenizer: a byte-level BPE with Qwen-VL's image tokens, trained on the texts ...")
  vision_tokenizer(os.path.join(root, "tokenizer"), texts)
  return converted_sets(root, sets, os.path.join(root, "tokenizer"), "vision", log, ImageOptions(policy=POLICY))


def vision_config(paths: dict[str, str]) -> PipelineConfig:
  return PipelineConfig.from_dict(
    {
      "seed": 11,
      "datasets": [{"name": n, "path": p} for n, p in paths.items()],
      "mixture": {"weights": {n: w for n, (w, _) in VISION_SETS.items()}},
      "exhausted_policy": "repeat",
      "packing": {"seq_len": 128, "images": {"max_patches": 224, "max_images": 8}},
      "batch": {"global_batch_size": 8},
    }
  )


def init_vision_params(key: jax.Array, vocab: int, seq_len: int, patch_values: int) -> model.Params:
  """The demo model's parameters and a patch embedding (a merged 2 x 2 block of patches -> the width)."""
  first, second = jax.random.split(key)
  params = model.init_params(first, vocab, seq_len)
  width = params["embed"].shape[1]
  params["patch_embed"] = jax.random.normal(second, (4 * patch_values, width)) / jnp.sqrt(4 * patch_values)
  return params


def vision_loss(params: model.Params, batch: dict[str, jax.Array], image_token: int) -> jax.Array:
  """The demo model's loss with each image token's embedding its merged patches': the k-th image token of a
  row stands for the row's k-th 2 x 2 block of patches (images in row order, patches in the processor's)."""
  patches = normalize_patches(batch["patches"], CLIP_MEAN, CLIP_STD, patch=POLICY.patch)
  rows, slots, values = patches.shape
  merged = patches.reshape(rows, slots // 4, 4 * values) @ params["patch_embed"]  # [B, P / 4, width]
  is_image = batch["tokens"] == image_token
  which = jnp.clip(jnp.cumsum(is_image, axis=1) - 1, 0, slots // 4 - 1)
  features = jnp.take_along_axis(merged, which[..., None], axis=1)
  override = jnp.where(is_image[..., None], features, 0.0)
  return model.loss_fn(params, batch, extra_embedding=override)


def run_vision_demo(cache_dir: str, steps: int = 40, log: Callable[[str], None] = print) -> VisionResult:
  """Build, convert, train with a resume check halfway (see the module docstring)."""
  paths = build_vision_sets(cache_dir, log)
  cfg = vision_config(paths)
  manifest = Manifest.load(paths["captions"])
  vocab = int(manifest.tokenizer.get("vocab_size") or 512)
  image_token = SPECIALS.index("<|image_pad|>")
  params = init_vision_params(jax.random.key(0), vocab, cfg.packing.seq_len, 3 * POLICY.patch**2)
  state = {"step": jnp.zeros((), jnp.int32), **{k: jax.tree.map(jnp.zeros_like, params) for k in ("mu", "nu")}}
  step_fn = jax.jit(lambda p, s, b: _train_step(p, s, b, image_token))
  losses: list[float] = []
  seen, fill = [0], np.zeros(2)
  log(f"training the demo model with a patch embedding {steps} steps on captions and questions ...")

  def train(batch: dict[str, Any]) -> None:
    nonlocal params, state
    seen[0] += int(np.asarray(batch["num_images"]).sum())
    fill[0] += float(np.mean(np.asarray(batch["patch_image_ids"]) > 0))
    fill[1] += float(np.mean(np.asarray(batch["segment_ids"]) > 0))
    params, state, loss = step_fn(params, state, {k: jnp.asarray(v) for k, v in batch.items()})
    losses.append(float(loss))

  resume_ok, _ = trained_checking_resume(cfg, steps, train)
  return VisionResult(steps, losses, seen[0], float(fill[0] / steps), float(fill[1] / steps), resume_ok)


def _train_step(
  params: model.Params, state: dict[str, Any], batch: dict[str, jax.Array], image_token: int
) -> tuple[model.Params, dict[str, Any], jax.Array]:
  loss, grads = jax.value_and_grad(vision_loss)(params, batch, image_token)
  params, state = model.adam_update(params, grads, state)
  return params, state, loss
