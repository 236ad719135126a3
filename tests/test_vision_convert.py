"""Converting vision examples: records hold the ids (image runs in place) and mask of the processor's
encoding, then the images byte for byte as they came; the columns say each record's images and patches;
the dataset's bytes do not depend on the workers."""

from __future__ import annotations

import dataclasses
import io
import json
import os

import numpy as np
import pytest
from PIL import Image

from jaxdata.cli import main
from jaxdata.config import PipelineConfig
from jaxdata.conversion import ConvertOptions, convert
from jaxdata.conversion.beam_runner import convert_with_beam
from jaxdata.conversion.options import ImageOptions
from jaxdata.conversion.ray_runner import convert_with_ray
from jaxdata.conversion.vision_units import vision_encoder
from jaxdata.errors import ConfigError
from jaxdata.pipeline import Pipeline
from jaxdata.sources import TokenDataset
from jaxdata.sources.index import record_byte_lengths
from jaxdata.vision import FixedSize
from test_vision_examples import QWEN_SPECIALS, _published, _tokenizer


def _png(height: int, width: int, colour: int) -> bytes:
  buffer = io.BytesIO()
  Image.new("RGB", (width, height), (colour, 9, 99)).save(buffer, "PNG")
  return buffer.getvalue()


def _jpeg(height: int, width: int) -> bytes:
  buffer = io.BytesIO()
  Image.fromarray(np.random.default_rng(height).integers(0, 255, (height, width, 3), np.uint8)).save(buffer, "JPEG")
  return buffer.getvalue()


@pytest.fixture(scope="module")
def vision_inputs(tmp_path_factory):
  """A tokenizer with the Qwen2.5-VL template, and a JSONL of chats with 0-3 images, captions and an
  interleaved document; images as files beside it."""
  root = tmp_path_factory.mktemp("vision")
  template = _published("Qwen-Qwen2.5-VL-7B-Instruct")
  tokenizer = _tokenizer(root / "tok", QWEN_SPECIALS, template)
  tokenizer.chat_template = template
  tokenizer.save_pretrained(str(root / "tok"))
  (root / "img").mkdir()
  rng = np.random.default_rng(5)
  rows, stored = [], []
  for n in range(40):
    count = n % 4
    names = []
    for k in range(count):
      data = _jpeg(int(rng.integers(30, 400)), int(rng.integers(30, 400))) if k % 2 else _png(60 + n, 80, n)
      name = f"img/{n}-{k}.{'jpg' if k % 2 else 'png'}"
      (root / name).write_bytes(data)
      names.append(name)
    stored.append([(root / name).read_bytes() for name in names])
    if n % 10 == 9:
      rows.append({"image": names[0], "text": f"caption number {n}"})  # n % 4 = 1: one image
      stored[-1] = stored[-1][:1]
      continue
    parts = [{"type": "image"}] * count + [{"type": "text", "text": f"question {n}"}]
    rows.append(
      {
        "messages": [
          {"role": "user", "content": parts},
          {"role": "assistant", "content": [{"type": "text", "text": f"answer {n}"}]},
        ],
        "images": names,
      }
    )
  with open(root / "chat.jsonl", "w") as f:
    f.write("".join(json.dumps(r) + "\n" for r in rows))
  return root, rows, stored


def _options(root, workers: int, **images) -> ConvertOptions:
  return ConvertOptions(
    tokenizer=f"hf:{root / 'tok'}",
    examples="vision",
    images=ImageOptions(**images),
    workers=workers,
    unit_bytes=2_000,
    shard_bytes=2_000,  # shards planned by their tokens (the images ride along)
  )


def test_records_hold_the_encoding_then_the_images_as_they_came(vision_inputs, tmp_path):
  root, rows, stored = vision_inputs
  options = _options(root, 1)
  manifest = convert([str(root / "chat.jsonl")], str(tmp_path / "out"), "vl", options)
  assert manifest.num_records == len(rows) and len(manifest.shards) > 1
  assert manifest.stats["images"]["policy"]["policy"] == "native" and manifest.stats["images"]["tokens"] == "qwen-vl"
  encoder = vision_encoder(options)
  with TokenDataset(str(tmp_path / "out")) as dataset:
    assert dataset.manifest.holds_images
    shards = np.repeat(np.arange(dataset.num_shards), dataset.shard_num_records)
    records = np.concatenate([np.arange(n) for n in dataset.shard_num_records])
    read = dataset.read(shards, records)
    images = dataset.read_images(shards, records)
    for i, row in enumerate(rows):
      expected = encoder.encode(row, f"chat.jsonl line {i + 1}", str(root / "chat.jsonl"))
      assert read[i].tolist() == expected.ids.tolist()
      assert read.mask[read.offsets[i] : read.offsets[i + 1]].tolist() == expected.mask.tolist()
      assert [blob for blob, *_ in images[i]] == stored[i]  # byte for byte, as stored
      assert [[h, w] for _, h, w, _ in images[i]] == expected.sizes.tolist()
      starts = [at for *_, at in images[i]]
      assert starts == expected.token_offsets.tolist()
      for at, count in zip(starts, expected.image_tokens.tolist()):  # each run: `count` image-token ids from there
        run = read[i][at : at + count]
        assert run.size == count and (run == run[0]).all() and read[i][at - 1] != run[0]
    columns = dataset.columns
    assert columns["num_images"].tolist() == [len(s) for s in stored]
    policy = options.images.policy
    patches = [int(sum(policy.patches(np.array([h]), np.array([w]))[0] for _, h, w, _ in im)) for im in images]
    assert columns["num_patches"].tolist() == patches
    dataset.verify()


def test_the_dataset_does_not_depend_on_the_workers(vision_inputs, tmp_path):
  root, _, _ = vision_inputs
  for workers in (1, 2):
    convert([str(root / "chat.jsonl")], str(tmp_path / f"w{workers}"), "vl", _options(root, workers))
  names = sorted(os.listdir(tmp_path / "w1"))
  assert names == sorted(os.listdir(tmp_path / "w2"))
  for name in names:
    assert (tmp_path / "w1" / name).read_bytes() == (tmp_path / "w2" / name).read_bytes(), name


def test_a_fixed_size_policy_gives_every_image_its_fixed_run(vision_inputs, tmp_path):
  root, rows, _ = vision_inputs
  options = _options(root, 1, policy=FixedSize(336, 336, patch=14, pool=1))
  convert([str(root / "chat.jsonl")], str(tmp_path / "fixed"), "vl", options)
  with TokenDataset(str(tmp_path / "fixed")) as dataset:
    counts = dataset.columns["num_images"]
    pad = vision_encoder(options).text.tokenizer.convert_tokens_to_ids("<|image_pad|>")
    shards = np.repeat(np.arange(dataset.num_shards), dataset.shard_num_records)
    records = np.concatenate([np.arange(n) for n in dataset.shard_num_records])
    read = dataset.read(shards, records)
    runs = [int((read[i] == pad).sum()) for i in range(len(rows))]
    assert runs == (counts * 576).tolist()
    assert (dataset.columns["num_patches"] == counts * 576).all()


def test_a_bad_record_is_named_and_counted_or_refused(vision_inputs, tmp_path):
  root, _, _ = vision_inputs
  path = tmp_path / "bad.jsonl"
  path.write_text(
    json.dumps({"image": "img/nope.png", "text": "t"})
    + "\n"
    + json.dumps({"image": "img/1-0.png", "text": "ok"})
    + "\n"
  )
  with pytest.raises(Exception, match=r"bad.jsonl:1.*image 0: image file .*nope.png' cannot be read"):
    convert([str(path)], str(tmp_path / "out"), "bad", _options(root, 1))
  assert not (tmp_path / "out").exists()
  options = ConvertOptions(
    tokenizer=f"hf:{root / 'tok'}", examples="vision", workers=1, skip_invalid=True, images=ImageOptions(root=str(root))
  )
  manifest = convert([str(path)], str(tmp_path / "out"), "bad", options)
  assert manifest.num_records == 1 and manifest.stats["refused_examples"] == 1, manifest.stats


def test_the_command_line_converts_vision_examples_with_a_policy_given(vision_inputs, tmp_path, capsys):
  root, rows, _ = vision_inputs
  out = str(tmp_path / "cli")
  policy = '{"policy": "fixed", "height": 336, "width": 336, "pool": 1}'
  arguments = [
    "convert",
    "-q",
    str(root / "chat.jsonl"),
    "--out",
    out,
    "--name",
    "vl",
    "--tokenizer",
    f"hf:{root / 'tok'}",
  ]
  assert main([*arguments, "--format", "vision", "--image-policy", policy, "--workers", "1"]) == 0
  with TokenDataset(out) as dataset:
    assert dataset.manifest.holds_images and dataset.manifest.stats["images"]["policy"]["height"] == 336
    assert dataset.num_records == len(rows)
  assert (
    main([*arguments[:4], str(tmp_path / "x"), *arguments[5:], "--format", "vision", "--image-policy", "tiles"]) == 1
  )
  assert "--image-policy: images.policy: 'tiles' is not one of ['fixed', 'native']" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.integration
def test_beams_local_runner_writes_the_local_runners_vision_dataset_byte_for_byte(vision_inputs, tmp_path):
  root, _, _ = vision_inputs
  convert([str(root / "chat.jsonl")], str(tmp_path / "local"), "vl", _options(root, 1))
  convert_with_beam([str(root / "chat.jsonl")], str(tmp_path / "beam"), "vl", _options(root, 1))
  names = sorted(os.listdir(tmp_path / "local"))
  assert len(names) > 4 and names == sorted(os.listdir(tmp_path / "beam"))
  for name in names:
    assert (tmp_path / "local" / name).read_bytes() == (tmp_path / "beam" / name).read_bytes(), name


def test_a_pipeline_without_image_budgets_refuses_an_image_text_dataset_rather_than_drop_its_images(
  vision_inputs, tmp_path
):
  root, _, _ = vision_inputs
  convert([str(root / "chat.jsonl")], str(tmp_path / "vl"), "vl", _options(root, 1))
  cfg = PipelineConfig.from_dict(
    {
      "datasets": [{"name": "vl", "path": str(tmp_path / "vl")}],
      "mixture": {"weights": {"vl": 1.0}},
      "packing": {"seq_len": 512},
      "batch": {"global_batch_size": 2},
    }
  )
  with pytest.raises(ConfigError, match="dataset vl: holds image-text examples .* set packing.images"):
    Pipeline(cfg)


def test_shards_keep_to_their_size_with_the_images_counted(vision_inputs, tmp_path):
  """A shard closes before its records (ids, mask bytes, images) pass shard_bytes, one record at least."""
  root, rows, _ = vision_inputs
  options = dataclasses.replace(_options(root, 1), shard_bytes=60_000)
  manifest = convert([str(root / "chat.jsonl")], str(tmp_path / "sized"), "vl", options)
  assert manifest.num_records == len(rows) and len(manifest.shards) > 2
  for shard in manifest.shards:
    sizes = record_byte_lengths(str(tmp_path / "sized" / shard.path))
    assert sizes.sum() <= options.shard_bytes or sizes.size == 1


@pytest.mark.slow
@pytest.mark.integration
def test_the_ray_runner_writes_the_local_runners_vision_dataset_byte_for_byte(vision_inputs, tmp_path, monkeypatch):
  """Vision examples on a Ray started here (127.0.0.1): the local runner's files, byte for byte."""
  root, _, _ = vision_inputs
  convert([str(root / "chat.jsonl")], str(tmp_path / "local"), "vl", _options(root, 2))
  monkeypatch.delenv("RAY_ADDRESS", raising=False)  # a fresh local Ray, not one a developer's shell points at
  convert_with_ray([str(root / "chat.jsonl")], str(tmp_path / "ray"), "vl", _options(root, 2))
  names = sorted(os.listdir(tmp_path / "local"))
  assert len(names) > 4 and names == sorted(os.listdir(tmp_path / "ray"))
  for name in names:
    assert (tmp_path / "local" / name).read_bytes() == (tmp_path / "ray" / name).read_bytes(), name
