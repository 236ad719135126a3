"""Tokenizing one work unit of vision examples: each record encoded as the model's processor would
(`vision_examples`), its images kept as they came; the unit's images beside its tokens::

    unit  -> tokens, lengths, masks             as a fine-tuning unit's (image runs in the ids, never trained)
          -> UnitImages: counts [documents]     images per document
                         table  [images, 4]     each image's (bytes, height, width, patches)
                         blob   uint8           the images' bytes, back to back, as stored
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from jaxdata._lazy import lazy_module
from jaxdata.conversion.examples import example_encoder
from jaxdata.conversion.formats import DocumentRead, unit_documents
from jaxdata.conversion.inputs import InvalidLog
from jaxdata.conversion.options import ConvertOptions
from jaxdata.conversion.shard_jobs import IMAGE_TABLE
from jaxdata.conversion.template_tokenizer import fast_tokenizer
from jaxdata.conversion.tokenize_units import UnitResult, cached_tokenizer
from jaxdata.conversion.tokenizers import dtype_for_vocab_size
from jaxdata.conversion.vision_examples import VisionEncoder, VisionExample
from jaxdata.conversion.work_units import WorkUnit
from jaxdata.errors import InputFormatError
from jaxdata.vision.image_tokens import IMAGE_TOKENS

decode = lazy_module("jaxdata.vision.decode")  # Pillow (the `vision` extra) loads with the first image

__all__ = ["UnitImages", "tokenize_vision_unit"]


@dataclasses.dataclass(frozen=True)
class UnitImages:
  """A unit's images (module docstring): per document its count; per image (bytes, height, width,
  patches, where its image tokens start in its record's ids); all their bytes back to back."""

  counts: np.ndarray
  table: np.ndarray
  blob: np.ndarray


_encoders: dict[ConvertOptions, VisionEncoder] = {}


def vision_encoder(options: ConvertOptions) -> VisionEncoder:
  """The encoder of `examples="vision"`: chat records rendered with the template (the tokenizer's, or the
  one given), captions and interleaved documents with the tokenizer alone. Loaded once a process."""
  if options not in _encoders:
    images = options.images
    assert images is not None  # ConvertOptions fills it for vision examples
    path = options.tokenizer.path or ""
    templated = bool(options.chat_template or options.chat_template_text or fast_tokenizer(path).chat_template)
    text = example_encoder(
      "chat" if templated else "prompt-completion",
      path,
      "messages" if options.field == "text" else options.field,
      options.train_on,
      options.chat_template or None,
      options.chat_template_text,
      system_prompt_field=options.system_prompt_field,
      template_kwargs_field=options.template_kwargs_field,
    )
    _encoders[options] = VisionEncoder(text, images.policy, IMAGE_TOKENS[images.tokens], images.root, images.max_pixels)
  return _encoders[options]


def _within_limit(example: VisionExample, limit: int, where: str) -> VisionExample:
  if limit and example.ids.size > limit:
    raise InputFormatError(
      f"{where}: the example holds {example.ids.size} tokens with its images' runs, more than the {limit} allowed "
      "(max_example_tokens)"
    )
  return example


def tokenize_vision_unit(
  unit: WorkUnit, options: ConvertOptions, on_progress: Callable[[int, int], None] = lambda b, d: None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, UnitImages, UnitResult]:
  """(tokens, lengths, masks, images, counts) of one unit of vision records; a bad record is named and
  counted (`skip_invalid`), or raised."""
  encoder = vision_encoder(options)
  assert options.images is not None
  policy = options.images.policy
  dtype = dtype_for_vocab_size(cached_tokenizer(options.tokenizer).vocab_size)
  invalid = InvalidLog(options.skip_invalid)
  examples: list[VisionExample] = []
  empty = 0
  for record in unit_documents(unit, options, DocumentRead(invalid, records=True)):
    try:
      example = encoder.encode(record.values, record.where, unit.path)
      if options.images.verify:  # decoded once here, so that a damaged image never reaches a training run
        for i, image in enumerate(example.images):
          decode.decode_image(image, f"{record.where}, image {i}", options.images.max_pixels)
      if example.ids.size == 0:
        empty += 1
        continue
      examples.append(_within_limit(example, options.max_example_tokens, record.where))
    except InputFormatError as error:
      invalid.report(str(error))
  on_progress(unit.size, len(examples))
  lengths = np.array([e.ids.size for e in examples], np.int64)
  tokens = np.concatenate([e.ids for e in examples]).astype(dtype) if examples else np.zeros(0, dtype)
  masks = np.concatenate([e.mask for e in examples]) if examples else np.zeros(0, np.uint8)
  sizes = np.concatenate([e.sizes for e in examples]) if examples else np.zeros((0, 2), np.int64)
  patches = policy.patches(sizes[:, 0], sizes[:, 1]) if sizes.size else np.zeros(0, np.int64)
  blobs = [b for e in examples for b in e.images]
  offsets = np.concatenate([e.token_offsets for e in examples]) if examples else np.zeros(0, np.int64)
  table = np.column_stack([[len(b) for b in blobs], sizes, patches, offsets]).astype(np.int64)
  table = table.reshape(-1, IMAGE_TABLE)
  images = UnitImages(
    np.array([len(e.images) for e in examples], np.int64), table, np.frombuffer(b"".join(blobs), np.uint8)
  )
  trained = int(masks.sum())
  result = UnitResult(
    unit.index, unit.file_index, len(examples), int(tokens.size), empty, invalid.count, invalid.examples, trained
  )
  return tokens, lengths, masks, images, result
