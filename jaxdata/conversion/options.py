"""What a conversion is asked for: `ConvertOptions`, the input formats and text modes.

Light on purpose (no reader is imported), so the CLI builds its parser from it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Literal, get_args

from jaxdata.conversion.examples import EXAMPLE_FORMATS, TRAIN_ON, ExampleFormat, TrainOn
from jaxdata.conversion.tokenizers import TokenizerSpec
from jaxdata.sources.manifest import COMPRESSIONS
from jaxdata.vision.image_tokens import IMAGE_TOKENS
from jaxdata.vision.policies import MAX_PIXELS, FixedSize, NativeResolution

__all__ = ["ConvertOptions", "INPUT_FORMATS", "ImageOptions", "Progress", "TEXT_MODES"]

# arrayrecord, tfrecord: tf.train.Example records; webdataset: tar shards of image-text samples (vision)
InputFormat = Literal["jsonl", "parquet", "text", "arrayrecord", "tfrecord", "webdataset"]
TextMode = Literal["file", "line", "paragraph"]
INPUT_FORMATS: tuple[InputFormat, ...] = get_args(InputFormat)
TEXT_MODES: tuple[TextMode, ...] = get_args(TextMode)
# (phase, done, in all, documents so far); phase: "scan" and "tokenize" count input bytes, "write" documents.
Progress = Callable[[str, int, int, int], None]


@dataclasses.dataclass(frozen=True)
class ImageOptions:
  """Vision examples' images: the model processor's `policy` (its resize, grid and token count), how its
  text shows an image (`tokens`: a name in `IMAGE_TOKENS`), where relative image paths start (`root`;
  default: each input file's directory), the largest image taken (`max_pixels`) and whether each image is
  decoded once at conversion (`verify`; off: only its header is read, and damage shows when it is read)."""

  policy: FixedSize | NativeResolution = NativeResolution()
  tokens: str = "qwen-vl"
  root: str = ""
  max_pixels: int = MAX_PIXELS
  verify: bool = True  # decode every image at conversion: a damaged one is refused there, not mid-run

  def __post_init__(self) -> None:
    if not isinstance(self.policy, (FixedSize, NativeResolution)):
      raise ValueError(f"images.policy: a FixedSize or NativeResolution, got {self.policy!r}")
    if self.tokens not in IMAGE_TOKENS:
      raise ValueError(f"images.tokens: {self.tokens!r} is not one of {sorted(IMAGE_TOKENS)}")
    if not isinstance(self.verify, bool):
      raise ValueError(f"images.verify: True or False, got {self.verify!r}")
    if isinstance(self.max_pixels, bool) or not isinstance(self.max_pixels, int) or self.max_pixels < 1:
      raise ValueError(f"images.max_pixels: a positive number of pixels, got {self.max_pixels!r}")


@dataclasses.dataclass(frozen=True)
class ConvertOptions:
  """Options of `convert` (and the `jaxdata convert` flags of the same names).

  Attributes:
    tokenizer: which tokenizer; the byte-level one by default.
    input_format: "auto" (from each file's suffix), "jsonl", "parquet", "text",
      "arrayrecord" or "tfrecord" (files of `tf.train.Example` records).
    field: JSONL field / Parquet column / Example feature holding the text
      (an Example's int64 feature holds token ids, written as they are).
    text_mode: plain text: one document per "file", "line" or "paragraph".
    shard_bytes: a shard is closed before it would exceed this many bytes.
    workers: tokenizer processes; 0 = one per available core.
    skip_invalid: count and skip malformed records instead of failing.
    batch_documents: documents per tokenizer call.
    include, exclude: globs a file (path or name) must / must not match.
    unit_bytes: input bytes per work unit; 0 = from the input size and workers.
    compression: shard records' compression, "zstd" (smaller), "snappy" or
      "none" (the cheapest to read: no per-byte decode; docs/performance.md).
    examples: "text" (documents), or fine-tuning examples with trained-token masks:
      "chat" (a `messages` list per record, `field` names it) or "prompt-completion";
      a record with `input_ids` (and `labels` or `mask`) is taken as tokenized.
    train_on: with "chat": "assistant" (every assistant message of weight 1), "last"
      (the last assistant message) or "all".
    chat_template: a Jinja chat template file instead of the tokenizer's own.
    chat_template_text: the same template given as text (Levanter's `chat_template`).
    system_prompt_field: chat: a record field whose text goes first, as a system message.
    template_kwargs_field: chat: a record field of keyword arguments for the template.
    images: with examples "vision" (chat with images, captions, interleaved documents): the
      image policy and the model's image tokens (`ImageOptions`; its defaults: Qwen2-VL's).
    max_example_tokens: > 0: a fine-tuning example of more tokens is refused, named by
      file:line (counted under `skip_invalid`), so that no example reaches packing longer than
      its rows' seq_len; 0: any length (packing's `long_docs` decides).
  """

  tokenizer: TokenizerSpec = TokenizerSpec()
  input_format: InputFormat | Literal["auto"] = "auto"
  field: str = "text"
  text_mode: TextMode = "file"
  shard_bytes: int = 256 << 20
  workers: int = 0
  skip_invalid: bool = False
  batch_documents: int = 1024
  include: tuple[str, ...] = ()
  exclude: tuple[str, ...] = ()
  unit_bytes: int = 0
  compression: Literal["zstd", "snappy", "none"] = "zstd"
  examples: ExampleFormat = "text"
  train_on: TrainOn = "assistant"
  chat_template: str = ""
  chat_template_text: str = ""
  system_prompt_field: str = ""
  template_kwargs_field: str = ""
  max_example_tokens: int = 0
  pair_fields: tuple[str, str] = ("chosen", "rejected")  # preference: the fields of the two sides
  images: ImageOptions | None = None

  def __post_init__(self) -> None:
    object.__setattr__(self, "tokenizer", _tokenizer_spec(self.tokenizer))
    if self.examples not in EXAMPLE_FORMATS:
      raise ValueError(f"examples: {self.examples!r} is not one of {EXAMPLE_FORMATS}")
    if self.train_on not in TRAIN_ON:
      raise ValueError(f"train_on: {self.train_on!r} is not one of {TRAIN_ON}")
    if self.examples == "preference" and self.train_on == "all":
      raise ValueError(
        "train_on: 'all' would train a preference pair's prompt; a pair trains its answers only "
        "('assistant': every answer message, or 'last')"
      )
    if self.chat_template and self.chat_template_text:
      raise ValueError("chat_template: give a template file or chat_template_text, not both")
    templated = self.examples == "chat" or bool(self.chat_template or self.chat_template_text)
    if self.examples != "text" and templated and self.tokenizer.kind != "huggingface":
      raise ValueError(
        f"tokenizer: {self.examples} examples with a chat template are rendered and tokenized by a Hugging Face "
        "tokenizer (--tokenizer hf:DIR, a directory with tokenizer.json and tokenizer_config.json); byte and "
        "SentencePiece tokenizers take prompt-completion examples and plain-text preference pairs"
      )
    if self.compression not in COMPRESSIONS:
      raise ValueError(f"compression: {self.compression!r} is not one of {sorted(COMPRESSIONS)}")
    if self.input_format != "auto" and self.input_format not in INPUT_FORMATS:
      raise ValueError(f"input_format: {self.input_format!r} is not 'auto' or one of {INPUT_FORMATS}")
    if self.text_mode not in TEXT_MODES:
      raise ValueError(f"text_mode: {self.text_mode!r} is not one of {TEXT_MODES}")
    if not self.field:
      raise ValueError("field: must be a non-empty name")
    for name in ("shard_bytes", "workers", "batch_documents", "unit_bytes"):
      value = getattr(self, name)
      if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(
          f"{name}: {value!r} is not a whole number"
          + (" of bytes (the CLI's --shard-size takes 256MB)" if "bytes" in name else "")
        )
    if self.shard_bytes <= 0:
      raise ValueError(f"shard_bytes: must be positive, got {self.shard_bytes}")
    if self.workers < 0:
      raise ValueError(f"workers: must be >= 0, got {self.workers}")
    if self.batch_documents < 1:
      raise ValueError(f"batch_documents: must be >= 1, got {self.batch_documents}")
    if isinstance(self.max_example_tokens, bool) or not isinstance(self.max_example_tokens, int):
      raise ValueError(f"max_example_tokens: must be an int, got {self.max_example_tokens!r}")
    if self.max_example_tokens < 0:
      raise ValueError(f"max_example_tokens: must be >= 0 (0: any length), got {self.max_example_tokens}")
    object.__setattr__(self, "pair_fields", tuple(self.pair_fields))
    if len(self.pair_fields) != 2 or not all(isinstance(f, str) and f for f in self.pair_fields):
      raise ValueError(f"pair_fields: two field names (chosen, rejected), got {self.pair_fields!r}")
    if self.pair_fields[0] == self.pair_fields[1]:
      raise ValueError(f"pair_fields: the two sides need two fields, got {self.pair_fields[0]!r} twice")
    if self.max_example_tokens and self.examples == "text":
      raise ValueError("max_example_tokens: applies to fine-tuning examples (examples 'chat' or 'prompt-completion')")
    self._check_images()
    if self.unit_bytes < 0:
      raise ValueError(f"unit_bytes: must be >= 0, got {self.unit_bytes}")
    object.__setattr__(self, "include", tuple(self.include))
    object.__setattr__(self, "exclude", tuple(self.exclude))

  def _check_images(self) -> None:
    if self.examples != "vision":
      if self.images is not None:
        raise ValueError(f"images: applies to examples 'vision', not {self.examples!r}")
      return
    if self.images is None:
      object.__setattr__(self, "images", ImageOptions())
    if not isinstance(self.images, ImageOptions):
      raise ValueError(f"images: an ImageOptions, got {self.images!r:.100}")
    if self.tokenizer.kind != "huggingface":
      raise ValueError(
        "tokenizer: vision examples need the model's Hugging Face tokenizer (its image tokens are special tokens)"
      )


def _tokenizer_spec(value: object) -> TokenizerSpec:
  """`ConvertOptions.tokenizer`: a `TokenizerSpec`, or its text as the CLI's --tokenizer reads it ("byte",
  "hf:DIR", "sp:FILE.model")."""
  if isinstance(value, str):
    return TokenizerSpec.parse(value)
  if not isinstance(value, TokenizerSpec):
    raise ValueError(f"tokenizer: expected a TokenizerSpec or its text ('byte', 'hf:DIR', ...), got {value!r:.100}")
  return value
