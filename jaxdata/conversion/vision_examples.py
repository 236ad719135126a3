"""Vision examples -> token ids, their trained-token mask and the images as they came, as the model's
processor would make them::

    chat        {"messages": [... {"type": "image"} parts ...], "images": [...]}   rendered with the template
    caption     {"image": X, "text" | "caption": "..."}                             the image, then its text
    interleaved {"texts": ["a", null, "b"], "images": [null, X, null]}             in order, gaps skipped

    text with one `in_text` per image        (the template's own, or the captions' and documents')
      --each `placeholder` replaced as the processor replaces it-->  before + image_token x n + after
      --tokenized once-->  ids; the mask: what trains in the text (the chat rules), never an image's run

n is the policy's token count for the image's size (read from its header: nothing is decoded). The
replacement is the processor's own text replacement, so the ids equal the processor's (tested against
transformers' Qwen2-VL processor with the published Qwen2.5-VL template).

>>> VisionExample(np.array([5]), np.array([1], np.uint8), (), np.zeros((0, 2), np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64)).images
()
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from jaxdata._lazy import lazy_module
from jaxdata.conversion.examples import ExampleEncoder, character_range_mask
from jaxdata.conversion.image_inputs import IMAGE_PART_KEYS, image_bytes, is_image_part
from jaxdata.errors import InputFormatError
from jaxdata.vision.image_tokens import ImageTokens
from jaxdata.vision.policies import MAX_PIXELS, FixedSize, NativeResolution

decode = lazy_module("jaxdata.vision.decode")  # Pillow (the `vision` extra) loads with the first image

__all__ = ["VisionEncoder", "VisionExample"]


@dataclasses.dataclass(frozen=True)
class VisionExample:
  """One encoded example: ids and mask (uint8, 1 = trained) over the text with every image's run, the
  images' bytes as they came, their upright (height, width) [n, 2], token counts [n] and where each one's
  image tokens start among the ids [n]."""

  ids: np.ndarray
  mask: np.ndarray
  images: tuple[bytes, ...]
  sizes: np.ndarray
  image_tokens: np.ndarray
  token_offsets: np.ndarray


def _chat_images(messages: list[Any], listed: Sequence[Any], where: str) -> list[Any]:
  """The image each `{"type": "image"}` part stands for, in order: its own, else the next listed one."""
  found: list[Any] = []
  queue = list(listed)
  for message in messages:
    content = message.get("content") if isinstance(message, Mapping) else None
    for part in content if isinstance(content, list) else []:
      if not is_image_part(part):
        continue
      own = next((part[k] for k in IMAGE_PART_KEYS if part.get(k) is not None), None)
      if own is None and not queue:
        raise InputFormatError(f"{where}: image part {len(found)} has no image ('images' lists {len(listed)})")
      found.append(own if own is not None else queue.pop(0))
  if queue:
    raise InputFormatError(f"{where}: 'images' lists {len(listed)} images, the messages place {len(found)}")
  return found


def _merged_ranges(offsets: np.ndarray, mask: np.ndarray) -> list[tuple[int, int]]:
  """The character ranges the trained tokens cover, adjacent ones joined."""
  ranges: list[tuple[int, int]] = []
  for start, end in offsets[mask.astype(bool)].tolist():
    if ranges and start <= ranges[-1][1]:
      ranges[-1] = (ranges[-1][0], max(ranges[-1][1], end))
    elif end > start:
      ranges.append((start, end))
  return ranges


@dataclasses.dataclass(frozen=True)
class VisionEncoder:
  """Encodes vision records (module docstring) with a text encoder (tokenizer, template, chat rules), an image
  policy and the model's `ImageTokens`; `image_root`: where relative image paths start (default: the input
  file's directory)."""

  text: ExampleEncoder
  policy: FixedSize | NativeResolution
  tokens: ImageTokens
  image_root: str = ""
  max_pixels: int = MAX_PIXELS

  def encode(self, record: Mapping[str, Any], where: str, input_path: str = "") -> VisionExample:
    root = self.image_root or os.path.dirname(os.path.abspath(input_path or "."))
    text, trained, values = self._text_and_images(record, where)
    images = tuple(image_bytes(v, root, f"{where}, image {i}") for i, v in enumerate(values))
    sizes = np.array(
      [decode.image_size(b, f"{where}, image {i}", self.max_pixels) for i, b in enumerate(images)], np.int64
    )
    sizes = sizes.reshape(-1, 2)
    try:
      counts = self.policy.tokens(sizes[:, 0], sizes[:, 1]) if len(images) else np.zeros(0, np.int64)
    except ValueError as error:  # a size the processor refuses (an aspect ratio over 200)
      raise InputFormatError(f"{where}: {error}") from error
    ids, mask, offsets = self._expanded(text, trained, counts, where)
    return VisionExample(ids, mask, images, sizes, counts, offsets)

  def _text_and_images(self, record: Mapping[str, Any], where: str) -> tuple[str, list[tuple[int, int]], list[Any]]:
    """(the text with one `in_text` per image, its trained character ranges, the images' values)."""
    if not isinstance(record, Mapping):
      raise InputFormatError(f"{where}: expected an object, got {type(record).__name__}")
    if "texts" in record or ("images" in record and self.text.field not in record):
      return self._interleaved(record, where)
    if self.text.field not in record and "image" not in record:
      raise InputFormatError(
        f"{where}: a vision record holds {self.text.field!r} (a chat), an 'image' and its 'text' (a caption), or "
        f"'texts' and 'images' (a document); this one holds {sorted(record)[:6]}"
      )
    if self.text.field not in record:
      caption = record.get("text", record.get("caption"))
      if not isinstance(caption, str):
        raise InputFormatError(f"{where}: a caption record holds 'image' and a 'text' (or 'caption') string")
      text = self.tokens.in_text + caption
      return text, [(len(self.tokens.in_text), len(text))], [record["image"]]
    messages, listed = record.get(self.text.field), record.get("images", [])
    if not isinstance(listed, list):
      raise InputFormatError(f"{where}: 'images' is {type(listed).__name__}, not a list of images")
    values = _chat_images(messages if isinstance(messages, list) else [], listed, where)
    text, offsets, mask = self.text.chat_encoding(record, where)
    return text, _merged_ranges(offsets, mask), values

  def _interleaved(self, record: Mapping[str, Any], where: str) -> tuple[str, list[tuple[int, int]], list[Any]]:
    texts, images = record.get("texts"), record.get("images")
    if not isinstance(texts, list) or not isinstance(images, list) or len(texts) != len(images):
      raise InputFormatError(f"{where}: an interleaved record holds 'texts' and 'images' lists of one length")
    text, trained, values = "", [], []
    for i, (piece, image) in enumerate(zip(texts, images)):
      if (piece is None) == (image is None):
        raise InputFormatError(f"{where}: position {i} must hold a text or an image (one of the two is null)")
      if image is not None:
        text += self.tokens.in_text
        values.append(image)
      elif not isinstance(piece, str):
        raise InputFormatError(f"{where}: texts[{i}] is {type(piece).__name__}, not a string")
      else:
        trained.append((len(text), len(text) + len(piece)))
        text += piece
    return text, trained, values

  def _expanded(
    self, text: str, trained: list[tuple[int, int]], counts: np.ndarray, where: str
  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each placeholder replaced by its image's run, tokenized once; the trained ranges moved with the text;
    where each image's tokens start among the ids."""
    placeholder, found, at = self.tokens.placeholder, [], text.find(self.tokens.placeholder)
    while at >= 0:
      found.append(at)
      at = text.find(placeholder, at + len(placeholder))
    if len(found) != counts.size:
      raise InputFormatError(
        f"{where}: the text places {len(found)} images ({placeholder!r}), the record has {counts.size}"
      )
    pieces, runs, moved, shift, last = [], [], np.zeros(len(text) + 1, np.int64), 0, 0
    for position, count in zip(found, counts.tolist()):
      run = self.tokens.expansion(count)
      pieces += [text[last:position], run]
      moved[position + len(placeholder) :] += len(run) - len(placeholder)
      runs.append((position + shift, position + shift + len(run)))
      shift += len(run) - len(placeholder)
      last = position + len(placeholder)
    pieces.append(text[last:])
    try:
      text.encode("utf-8")
    except UnicodeEncodeError as error:
      raise InputFormatError(
        f"{where}: the text holds a lone surrogate ({text[error.start : error.end]!r}), not text"
      ) from error
    ids, offsets = self.text.tokenized("".join(pieces))
    positions = np.arange(len(text) + 1) + moved
    mask = character_range_mask(offsets, [(int(positions[a]), int(positions[b])) for a, b in trained])
    in_image = character_range_mask(offsets, runs).astype(bool)
    return ids, np.where(in_image, 0, mask).astype(np.uint8), self._token_starts(ids, offsets, runs, counts, where)

  def _token_starts(
    self, ids: np.ndarray, offsets: np.ndarray, runs: list[tuple[int, int]], counts: np.ndarray, where: str
  ) -> np.ndarray:
    """Per image, the index of its first image token: the token starting where its run's image tokens start
    (after `before`); its `count` tokens from there must be one id, or the tokenizer did not keep them apart."""
    chars = np.array([a + len(self.tokens.before) for a, _ in runs], np.int64)
    starts = np.searchsorted(offsets[:, 0], chars) if len(offsets) else np.zeros(chars.size, np.int64)
    for i, (start, char, count) in enumerate(zip(starts.tolist(), chars.tolist(), counts.tolist())):
      run = ids[start : start + count]
      if start >= len(offsets) or offsets[start, 0] != char or run.size != count or (run != run[0]).any():
        raise InputFormatError(
          f"{where}, image {i}: its {count} {self.tokens.image_token!r} tokens do not tokenize as {count} ids of "
          "one token (is it a special token of this tokenizer?)"
        )
    return starts.astype(np.int64)
