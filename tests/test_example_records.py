"""MaxText's data as it is: tf.train.Example records in ArrayRecord and TFRecord files.

The files are written by `record_fixtures` from the published formats (a
hand-made protobuf encoder and CRC-32C); jaxdata reads them without
TensorFlow. Converting them must give exactly the dataset that converting
the same texts from JSONL gives.
"""

from __future__ import annotations

import json
import os
import random
import struct

import numpy as np
import pytest

from jaxdata import DatasetError, InputFormatError
from jaxdata.cli import main
from jaxdata.conversion.beam_runner import convert_with_beam
from jaxdata.conversion.example_records import parse_example
from jaxdata.conversion.local_runner import convert
from jaxdata.conversion.options import ConvertOptions
from jaxdata.sources.boundaries import DocumentBoundaries
from jaxdata.sources.flat_index import build_flat_index
from jaxdata.sources.index import build_index
from jaxdata.sources.opening import open_dataset
from jaxdata.sources.record_files import example_feature_names, masked_crc32c
from record_fixtures import example, masked, write_array_record, write_tfrecord


def _texts(count: int, seed: int = 0) -> list[str]:
  rng = random.Random(seed)
  words = ["alpha", "beta", "gamma", "délta", "ε", "\n", "🙂"]
  return [" ".join(rng.choice(words) for _ in range(rng.randint(1, 40))) for _ in range(count)]


def _documents(path: str) -> list[list[int]]:
  with open_dataset(path) as dataset:
    return [d.tolist() for d in dataset.read_global(np.arange(dataset.num_records)).to_list()]


def test_the_example_parser_agrees_with_an_independent_encoder():
  rng = np.random.default_rng(0)
  for _ in range(50):
    ids = rng.integers(-(2**62), 2**62, size=int(rng.integers(0, 20))).tolist()
    floats = [float(np.float32(x)) for x in rng.normal(size=3)]
    raw = [bytes(rng.integers(0, 256, size=int(rng.integers(0, 30)), dtype=np.uint8)) for _ in range(2)]
    features = {"text": "héllo wörld", "ids": ids, "scores": floats, "raw": raw}
    blob = example(features)
    parsed = parse_example(blob)
    assert parsed["text"] == ["héllo wörld".encode()]
    assert parsed["ids"].tolist() == ids and parsed["scores"].tolist() == floats and parsed["raw"] == raw
    assert example_feature_names(blob) == list(features)  # the wire walk `index` uses
  assert masked_crc32c(b"123456789") == masked(b"123456789")
  assert example_feature_names(np.arange(50, dtype="<u2").tobytes()) is None  # token ids are not an Example


@pytest.mark.parametrize("kind", ["arrayrecord", "tfrecord"])
def test_converting_example_records_equals_converting_the_same_texts_from_jsonl(tmp_path, kind):
  texts = _texts(300)
  records = [example({"text": t, "url": f"https://x/{i}"}) for i, t in enumerate(texts)]
  # MaxText's shard names: the format is told by the name, whatever follows it
  names = (
    ["c4-train.array_record-00000-of-00002", "c4-train.array_record-00001-of-00002"]
    if kind == "arrayrecord"
    else ["c4-train.tfrecord-00000-of-00002", "c4-train.tfrecord-00001-of-00002"]
  )
  write = write_array_record if kind == "arrayrecord" else write_tfrecord
  (tmp_path / "in").mkdir()
  write(str(tmp_path / "in" / names[0]), records[:170])
  write(str(tmp_path / "in" / names[1]), records[170:])
  (tmp_path / "in.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
  options = ConvertOptions(workers=1)
  manifest = convert([str(tmp_path / "in")], str(tmp_path / "out"), "c4", options)
  convert([str(tmp_path / "in.jsonl")], str(tmp_path / "reference"), "c4", options)
  assert manifest.num_records == len(texts)
  assert _documents(str(tmp_path / "out")) == _documents(str(tmp_path / "reference"))


def test_an_int64_feature_is_token_ids_written_as_they_are(tmp_path):
  rng = np.random.default_rng(1)
  docs = [rng.integers(0, 250, size=int(rng.integers(1, 30))).tolist() for _ in range(80)]
  write_tfrecord(str(tmp_path / "ids.tfrecord"), [example({"input_ids": d}) for d in docs])
  convert([str(tmp_path / "ids.tfrecord")], str(tmp_path / "out"), "ids", ConvertOptions(field="input_ids"))
  assert _documents(str(tmp_path / "out")) == docs
  too_big = [example({"input_ids": [3, 70000]})]
  write_tfrecord(str(tmp_path / "big.tfrecord"), too_big)
  with pytest.raises(InputFormatError, match=r"big.tfrecord: feature 'input_ids' holds token id 70000, beyond"):
    convert([str(tmp_path / "big.tfrecord")], str(tmp_path / "big"), "big", ConvertOptions(field="input_ids"))


def test_bad_records_are_named_by_file_and_record(tmp_path):
  good = example({"text": "fine"})
  write_tfrecord(
    str(tmp_path / "mixed.tfrecord"),
    [good, example({"other": "x", "more": "y"}), example({"text": [1.5]}), b"\xff\xff\xff", good],
  )
  out = str(tmp_path / "out")
  with pytest.raises(InputFormatError, match=r"mixed.tfrecord:record 1: no feature 'text' \(features: more, other\)"):
    convert([str(tmp_path / "mixed.tfrecord")], out, "m", ConvertOptions(workers=1))
  manifest = convert([str(tmp_path / "mixed.tfrecord")], out, "m", ConvertOptions(workers=1, skip_invalid=True))
  assert (manifest.num_records, manifest.stats["skipped_invalid"]) == (2, 3)
  examples = " ".join(manifest.stats["invalid_examples"])
  assert "record 2: feature 'text' is a float list" in examples and "record 3: not a tf.train.Example" in examples


def test_a_damaged_or_truncated_tfrecord_names_the_record_and_its_offset(tmp_path):
  records = [example({"text": t}) for t in _texts(5)]
  write_tfrecord(str(tmp_path / "a.tfrecord"), records)
  blob = bytearray((tmp_path / "a.tfrecord").read_bytes())
  second = 16 + len(records[0])
  flipped = bytearray(blob)
  flipped[second + 12 + 3] ^= 0x40  # a bit of record 1's data
  (tmp_path / "flipped.tfrecord").write_bytes(bytes(flipped))
  with pytest.raises(InputFormatError, match=rf"flipped.tfrecord: record 1 at byte {second}: the data's checksum"):
    convert([str(tmp_path / "flipped.tfrecord")], str(tmp_path / "o1"), "x", ConvertOptions(workers=1))
  (tmp_path / "cut.tfrecord").write_bytes(bytes(blob[: second + 20]))
  with pytest.raises(InputFormatError, match=rf"cut.tfrecord: record 1 at byte {second}: the file ends inside"):
    convert([str(tmp_path / "cut.tfrecord")], str(tmp_path / "o2"), "x", ConvertOptions(workers=1))
  assert not os.path.exists(tmp_path / "o1" / "manifest.json") and not os.path.exists(tmp_path / "o2" / "manifest.json")
  # a damaged length (2^40, its own checksum valid) is a truncated record, not an attempt to allocate it
  huge = struct.pack("<Q", 1 << 40)
  (tmp_path / "huge.tfrecord").write_bytes(bytes(blob[:second]) + huge + struct.pack("<I", masked(huge)) + b"x" * 100)
  with pytest.raises(
    InputFormatError, match=rf"huge.tfrecord: record 1 at byte {second}: the file ends inside a record"
  ):
    convert([str(tmp_path / "huge.tfrecord")], str(tmp_path / "o3"), "x", ConvertOptions(workers=1))


def test_index_recognises_example_records_and_says_to_convert(tmp_path, capsys):
  records = [example({"text": t}) for t in _texts(20)]
  write_array_record(str(tmp_path / "c4.array_record"), records)
  write_tfrecord(str(tmp_path / "c4.tfrecord"), records)
  hint = r"an? {kind} file of tf.train.Example records \(features: text\).*jaxdata convert .* --field text"
  with pytest.raises(DatasetError, match=hint.format(kind="ArrayRecord")):
    build_index([str(tmp_path / "c4.array_record")], "uint16")
  for name, kind in (("c4.array_record", "ArrayRecord"), ("c4.tfrecord", "TFRecord")):
    for dtype in ("uint16", "uint32"):
      with pytest.raises(DatasetError, match=hint.format(kind=kind)):
        build_flat_index(
          "flat",
          [str(tmp_path / name)],
          out_dir=str(tmp_path / f"ix-{name}-{dtype}"),
          dtype=dtype,
          boundaries=DocumentBoundaries.eos(0),
        )
  assert main(["index", "--format", "flat", "--dtype", "uint16", "--eos-id", "0", str(tmp_path / "c4.tfrecord")]) != 0
  assert "jaxdata convert" in capsys.readouterr().err


def test_raw_ids_that_happen_to_start_like_a_tfrecord_length_are_not_refused(tmp_path):
  # Raw uint32 ids: the first 8 bytes as a length and the next 4 as its checksum match 1 time in 2^32.
  ids = np.array([5, 6, 7, 0, 8, 9, 0], "<u4")
  ids.tofile(tmp_path / "raw.bin")
  assert struct.unpack("<I", ids.tobytes()[8:12])[0] != masked_crc32c(ids.tobytes()[:8])
  manifest = build_flat_index(
    "flat", [str(tmp_path / "raw.bin")], dtype="uint32", boundaries=DocumentBoundaries.eos(0), check_dtype=False
  )
  assert manifest.num_records == 2


@pytest.mark.slow
@pytest.mark.integration
def test_beams_local_runner_converts_example_records_to_the_local_converters_bytes(tmp_path):
  texts = _texts(200, seed=3)
  (tmp_path / "in").mkdir()
  write_array_record(
    str(tmp_path / "in" / "part.array_record-00000-of-00002"), [example({"text": t}) for t in texts[:90]]
  )
  write_tfrecord(str(tmp_path / "in" / "part.tfrecord-00001-of-00002"), [example({"text": t}) for t in texts[90:]])
  options = ConvertOptions(workers=1, shard_bytes=2000)
  convert([str(tmp_path / "in")], str(tmp_path / "local"), "mix", options)
  convert_with_beam([str(tmp_path / "in")], str(tmp_path / "beam"), "mix", options, ["--direct_num_workers=1"])
  names = sorted(os.listdir(tmp_path / "local"))
  assert names == sorted(os.listdir(tmp_path / "beam")) and len(names) > 4
  for name in names:
    assert (tmp_path / "local" / name).read_bytes() == (tmp_path / "beam" / name).read_bytes(), name


def test_a_damaged_array_record_file_is_named(tmp_path):
  write_array_record(str(tmp_path / "a.array_record"), [example({"text": t}) for t in _texts(50)])
  blob = bytearray((tmp_path / "a.array_record").read_bytes())
  blob[len(blob) // 2 : len(blob) // 2 + 64] = bytes(64)  # zeroes over a chunk in the middle
  (tmp_path / "a.array_record").write_bytes(bytes(blob))
  with pytest.raises(
    InputFormatError, match=r"a.array_record: (not a readable ArrayRecord file|read failed near record)"
  ):
    convert([str(tmp_path / "a.array_record")], str(tmp_path / "out"), "a", ConvertOptions(workers=1))


def test_an_example_with_a_feature_key_given_twice_is_refused_naming_the_record(tmp_path):
  # two serialized Examples back to back merge: one Example whose map names 'text' twice
  twice = example({"text": "first"}) + example({"text": "second"})
  with pytest.raises(ValueError, match=r"feature 'text' is given twice"):
    parse_example(twice)
  write_tfrecord(str(tmp_path / "dup.tfrecord"), [example({"text": "fine"}), twice])
  with pytest.raises(InputFormatError, match=r"dup.tfrecord:record 1: feature 'text' is given twice"):
    convert([str(tmp_path / "dup.tfrecord")], str(tmp_path / "o"), "x", ConvertOptions(workers=1))
  manifest = convert(
    [str(tmp_path / "dup.tfrecord")], str(tmp_path / "o"), "x", ConvertOptions(workers=1, skip_invalid=True)
  )
  assert (manifest.num_records, manifest.stats["skipped_invalid"]) == (1, 1)
