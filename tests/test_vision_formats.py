"""Image-text inputs written by the tools teams use: WebDataset tar shards written by `webdataset`'s own
TarWriter, and Parquet written by Hugging Face `datasets` with its `Image` feature; each converted with
--format vision, the images read back byte for byte as those tools stored them."""

from __future__ import annotations

import base64
import io
import json
import tarfile

import datasets
import numpy as np
import pyarrow.parquet as pq
import pytest
import webdataset
from PIL import Image

from jaxdata.conversion import ConvertOptions, convert
from jaxdata.conversion.formats import format_of
from jaxdata.conversion.options import ImageOptions
from jaxdata.conversion.vision_units import vision_encoder
from jaxdata.errors import InputFormatError
from jaxdata.sources import TokenDataset
from test_vision_examples import QWEN_SPECIALS, _published, _tokenizer


def _encoded(height: int, width: int, fmt: str, seed: int) -> bytes:
  buffer = io.BytesIO()
  pixels = np.random.default_rng(seed).integers(0, 255, (height, width, 3), np.uint8)
  Image.fromarray(pixels).save(buffer, fmt)
  return buffer.getvalue()


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
  root = tmp_path_factory.mktemp("tok")
  template = _published("Qwen-Qwen2.5-VL-7B-Instruct")
  tokenizer = _tokenizer(root, QWEN_SPECIALS, template + " a cat a dog sample caption")
  tokenizer.chat_template = template
  tokenizer.save_pretrained(str(root))
  return root


def _options(tokenizer_dir, **more) -> ConvertOptions:
  return ConvertOptions(tokenizer=f"hf:{tokenizer_dir}", examples="vision", workers=1, images=ImageOptions(), **more)


def _all(dataset: TokenDataset) -> tuple[np.ndarray, np.ndarray]:
  return (
    np.repeat(np.arange(dataset.num_shards), dataset.shard_num_records),
    np.concatenate([np.arange(n) for n in dataset.shard_num_records]),
  )


def test_webdataset_shards_convert_sample_by_sample(tokenizer_dir, tmp_path):
  shard = str(tmp_path / "captions-000000.tar")
  samples = []
  with webdataset.TarWriter(shard) as sink:
    for i in range(12):
      image = _encoded(40 + 7 * i, 90 - 3 * i, "PNG" if i % 3 else "JPEG", i)
      extension = "png" if i % 3 else "jpg"
      sample = {"__key__": f"{i:06d}", extension: image}
      sample.update({"txt": f"a cat {i}"} if i % 2 else {"json": {"caption": f"a dog {i}", "url": "x"}})
      sink.write(sample)
      samples.append((image, f"a cat {i}" if i % 2 else f"a dog {i}"))
  assert format_of(shard) == "webdataset"
  options = _options(tokenizer_dir)
  manifest = convert([shard], str(tmp_path / "out"), "wds", options)
  assert manifest.num_records == len(samples)
  encoder = vision_encoder(options)
  with TokenDataset(str(tmp_path / "out")) as dataset:
    shards, records = _all(dataset)
    read, images = dataset.read(shards, records), dataset.read_images(shards, records)
  for i, (image, text) in enumerate(samples):
    assert [blob for blob, *_ in images[i]] == [image]
    assert read[i].tolist() == encoder.encode({"image": image, "text": text}, "x").ids.tolist()


def test_a_bad_webdataset_sample_is_named_by_shard_and_key(tokenizer_dir, tmp_path):
  shard = str(tmp_path / "bad.tar")
  with webdataset.TarWriter(shard) as sink:
    sink.write({"__key__": "000001", "png": _encoded(20, 20, "PNG", 1), "txt": "a cat"})
    sink.write({"__key__": "000002", "txt": "no image"})
    sink.write({"__key__": "000003", "png": _encoded(20, 20, "PNG", 3), "txt": "a dog"})
  with pytest.raises(
    InputFormatError,
    match=r"bad.tar: sample 000002: a vision record holds 'messages' \(a chat\), an 'image' and its 'text'.*\['text'\]",
  ):
    convert([shard], str(tmp_path / "out"), "bad", _options(tokenizer_dir))
  manifest = convert([shard], str(tmp_path / "out"), "bad", _options(tokenizer_dir, skip_invalid=True))
  assert manifest.num_records == 2 and manifest.stats["refused_examples"] == 1


def test_hugging_face_parquet_with_its_image_feature(tokenizer_dir, tmp_path):
  """`datasets` stores an image as its {"bytes", "path"} struct: jaxdata reads the bytes it stored."""
  blobs = [_encoded(30 + i, 50, "PNG", i) for i in range(6)]
  features = datasets.Features({"image": datasets.Image(), "text": datasets.Value("string")})
  table = datasets.Dataset.from_dict(
    {"image": [{"bytes": b, "path": None} for b in blobs], "text": [f"a dog {i}" for i in range(6)]}, features=features
  )
  path = str(tmp_path / "captions.parquet")
  table.to_parquet(path)
  stored = [row["bytes"] for row in pq.read_table(path).column("image").to_pylist()]
  convert([path], str(tmp_path / "out"), "hf", _options(tokenizer_dir))
  with TokenDataset(str(tmp_path / "out")) as dataset:
    images = dataset.read_images(*_all(dataset))
  assert [[blob for blob, *_ in record] for record in images] == [[b] for b in stored]
  assert [[(h, w) for _, h, w, _ in record] for record in images] == [[(30 + i, 50)] for i in range(6)]


def test_a_damaged_or_doubled_webdataset_shard_is_named(tokenizer_dir, tmp_path):
  whole = str(tmp_path / "whole.tar")
  with webdataset.TarWriter(whole) as sink:
    for i in range(3):
      sink.write({"__key__": f"{i:06d}", "png": _encoded(20, 20, "PNG", i), "txt": "a cat"})
  data = open(whole, "rb").read()
  (tmp_path / "cut.tar").write_bytes(data[: 512 + 100])  # the first member's header, then part of its bytes
  with pytest.raises(InputFormatError, match=r"cut.tar: not a readable tar shard \(ReadError"):
    convert([str(tmp_path / "cut.tar")], str(tmp_path / "out"), "cut", _options(tokenizer_dir, skip_invalid=True))
  assert not (tmp_path / "out").exists()
  doubled = tmp_path / "doubled.tar"
  with tarfile.open(doubled, "w") as tar:  # a shard webdataset's writer cannot make: one member twice
    for name, payload in (("000.png", _encoded(20, 20, "PNG", 1)), ("000.txt", b"one"), ("000.txt", b"two")):
      info = tarfile.TarInfo(name)
      info.size = len(payload)
      tar.addfile(info, io.BytesIO(payload))
  with pytest.raises(InputFormatError, match="doubled.tar: sample 000: names its 'txt' member twice"):
    convert([str(doubled)], str(tmp_path / "out"), "d", _options(tokenizer_dir))


def test_a_truncated_image_is_refused_at_conversion_unless_verify_is_off(tokenizer_dir, tmp_path):
  """Decoded once at conversion by default: a damaged image never reaches a training run."""
  png = _encoded(64, 64, "PNG", 9)
  (tmp_path / "c.jsonl").write_text(json.dumps({"image": "cut.png", "text": "a cat"}) + "\n")
  (tmp_path / "cut.png").write_bytes(png[: len(png) // 2])
  with pytest.raises(InputFormatError, match=r"c.jsonl:1, image 0: a damaged image \(OSError: image file is truncated"):
    convert([str(tmp_path / "c.jsonl")], str(tmp_path / "out"), "c", _options(tokenizer_dir))
  quick = ConvertOptions(
    tokenizer=f"hf:{tokenizer_dir}", examples="vision", workers=1, images=ImageOptions(verify=False)
  )
  assert convert([str(tmp_path / "c.jsonl")], str(tmp_path / "out"), "c", quick).num_records == 1


def test_images_named_oddly_are_read_or_refused_by_name(tokenizer_dir, tmp_path):
  encoder = vision_encoder(_options(tokenizer_dir))
  png = _encoded(30, 40, "PNG", 2)
  data_url = "data:image/png;base64," + base64.b64encode(png).decode()
  example = encoder.encode({"image": {"type": "image_url", "image_url": {"url": data_url}}, "text": "a cat"}, "r")
  assert example.images == (png,)
  (tmp_path / "x.png").write_bytes(png)  # Hugging Face's struct with empty bytes: its path
  assert encoder.encode({"image": {"bytes": b"", "path": "x.png"}, "text": "t"}, "r", str(tmp_path / "f")).images == (
    png,
  )
  for value, message in (
    ({"path": 5}, "the image's 'path' is int, not a string"),
    ("", "the image's path is empty"),
    ("img/cat\x00.jpg", "cannot be read \\(does not exist"),
    ("/dev/zero", "cannot be read \\(is not a regular file"),
    ("https://example.com/a.png", "is a URL"),
    (b"not an image at all", r"not a readable image \(no decoder recognises its bytes\)$"),
  ):
    with pytest.raises(InputFormatError, match=f"^r, image 0: .*{message}"):
      encoder.encode({"image": value, "text": "t"}, "r", str(tmp_path / "f"))


def test_an_empty_document_is_skipped_and_counted(tokenizer_dir, tmp_path):
  rows = [{"texts": [], "images": []}, {"texts": ["a cat"], "images": [None]}]
  (tmp_path / "d.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
  manifest = convert([str(tmp_path / "d.jsonl")], str(tmp_path / "out"), "d", _options(tokenizer_dir))
  assert manifest.num_records == 1 and manifest.stats["skipped_empty"] == 1
