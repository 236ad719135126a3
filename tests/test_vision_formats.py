"""Image-text inputs written by the tools teams use: WebDataset tar shards written by `webdataset`'s own
TarWriter, and Parquet written by Hugging Face `datasets` with its `Image` feature; each converted with
--format vision, the images read back byte for byte as those tools stored them."""

from __future__ import annotations

import io

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
    assert [blob for blob, _, _ in images[i]] == [image]
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
  assert [[blob for blob, _, _ in record] for record in images] == [[b] for b in stored]
  assert [[(h, w) for _, h, w in record] for record in images] == [[(30 + i, 50)] for i in range(6)]
