"""Datasets from Python iterables and Hugging Face datasets, through the converter's writer."""

from __future__ import annotations

import datasets
import numpy as np
import pytest

import chat_families
import jaxdata
from jaxdata import InputFormatError
from jaxdata.conversion.tokenizers import ByteTokenizer
from jaxdata.sources import TokenDataset


def read_all(path: str) -> list[list[int]]:
  with TokenDataset(path) as ds:
    return [d.tolist() for d in ds.read_global(np.arange(ds.num_records)).to_list()]


def test_texts_and_token_lists_in_order_with_empty_ones_counted(tmp_path):
  byte = ByteTokenizer()
  items = ["héllo", "", [7, 8, 9], np.array([1, 2], np.int32), "a" * 3000]
  manifest = jaxdata.from_iterable(iter(items), out=str(tmp_path / "ds"), shard_bytes=512)
  expected = [byte.encode_batch(["héllo"])[0].tolist(), [7, 8, 9], [1, 2], byte.encode_batch(["a" * 3000])[0].tolist()]
  assert read_all(str(tmp_path / "ds")) == expected
  assert (
    manifest.stats["skipped_empty"] == 1 and manifest.name == "ds" and len(manifest.shards) == 2
  )  # the long one alone


@pytest.mark.slow
def test_many_items_stream_in_batches_and_match_the_converter(tmp_path):
  texts = [f"document {i} " * (i % 7) for i in range(5000)]
  (tmp_path / "in.jsonl").write_text("".join(f'{{"text": "{t}"}}\n' for t in texts))
  jaxdata.from_iterable((t for t in texts), out=str(tmp_path / "py"), name="x", shard_bytes=4096)
  jaxdata.convert(
    [str(tmp_path / "in.jsonl")], str(tmp_path / "cli"), "x", jaxdata.ConvertOptions(workers=1, shard_bytes=4096)
  )
  assert read_all(str(tmp_path / "py")) == read_all(str(tmp_path / "cli"))


def test_a_hugging_face_dataset_of_texts_or_token_lists(tmp_path):
  texts = datasets.Dataset.from_dict({"text": [f"row {i}" for i in range(2500)], "n": list(range(2500))})
  jaxdata.from_hf_dataset(texts, out=str(tmp_path / "t"), field="text")
  assert read_all(str(tmp_path / "t"))[2499] == ByteTokenizer().encode_batch(["row 2499"])[0].tolist()
  ids = datasets.Dataset.from_dict({"input_ids": [[i, i + 1] for i in range(300)]})
  manifest = jaxdata.from_hf_dataset(ids, out=str(tmp_path / "ids"), field="input_ids", tokenizer=None)
  assert read_all(str(tmp_path / "ids"))[299] == [299, 300] and manifest.tokenizer == {"kind": "pretokenized"}
  streamed = texts.to_iterable_dataset()
  jaxdata.from_hf_dataset(streamed, out=str(tmp_path / "s"), field="text")
  assert read_all(str(tmp_path / "s")) == read_all(str(tmp_path / "t"))
  with pytest.raises(InputFormatError, match=r"row 0: no column 'body' \(columns: text, n\)"):
    jaxdata.from_hf_dataset(texts, out=str(tmp_path / "bad"), field="body")


def test_bad_items_are_named_and_nothing_is_left_half_written(tmp_path):
  with pytest.raises(InputFormatError, match=r"item 2: expected a str or a sequence of token ids, got int"):
    jaxdata.from_iterable(["a", "b", 5], out=str(tmp_path / "a"))
  with pytest.raises(InputFormatError, match=r"item 1: token ids must be a flat sequence of ints, got dtype float64"):
    jaxdata.from_iterable(["a", [1.5, 2.0]], out=str(tmp_path / "b"))
  with pytest.raises(InputFormatError, match=r"item 0: a text, but tokenizer=None"):
    jaxdata.from_iterable(["a"], out=str(tmp_path / "c"), tokenizer=None)
  with pytest.raises(ValueError, match=r"tokens: ids must lie in \[0, 65535\]"):
    jaxdata.from_iterable([[70000]], out=str(tmp_path / "d"), tokenizer=None, dtype="uint16")
  for name in "abcd":
    assert not (tmp_path / name / "manifest.json").exists()
  jaxdata.from_iterable(["x"], out=str(tmp_path / "e"))
  with pytest.raises(FileExistsError, match="`overwrite=True` replaces it"):
    jaxdata.from_iterable(["y"], out=str(tmp_path / "e"))
  jaxdata.from_iterable(["y"], out=str(tmp_path / "e"), overwrite=True)
  assert read_all(str(tmp_path / "e")) == [ByteTokenizer().encode_batch(["y"])[0].tolist()]


def test_hugging_face_formats_dicts_of_splits_and_typed_token_columns(tmp_path):
  texts = datasets.Dataset.from_dict({"text": ["alpha", "beta", "gamma"]})
  # with_format("arrow"): batches are pyarrow Tables; the same documents come out.
  jaxdata.from_hf_dataset(texts, out=str(tmp_path / "plain"))
  jaxdata.from_hf_dataset(texts.with_format("arrow"), out=str(tmp_path / "arrow"))
  assert read_all(str(tmp_path / "arrow")) == read_all(str(tmp_path / "plain"))
  with pytest.raises(InputFormatError, match=r"row 0: no column 'body' \(columns: text\)"):
    jaxdata.from_hf_dataset(texts.with_format("arrow"), out=str(tmp_path / "bad"), field="body")
  # A DatasetDict: the error names its splits and how to pick one.
  splits = datasets.DatasetDict({"train": texts, "test": texts})
  with pytest.raises(InputFormatError, match=r"a DatasetDict of the splits \['train', 'test'\]; .* dataset\['train'\]"):
    jaxdata.from_hf_dataset(splits, out=str(tmp_path / "dict"))
  # A Sequence(uint16) column keeps its type; an explicit dtype still wins.
  features = datasets.Features({"input_ids": datasets.Sequence(datasets.Value("uint16"))})
  ids = datasets.Dataset.from_dict({"input_ids": [[1, 2], [65_000]]}, features=features)
  assert jaxdata.from_hf_dataset(ids, out=str(tmp_path / "u16"), field="input_ids", tokenizer=None).dtype == "uint16"
  assert (
    jaxdata.from_hf_dataset(ids, out=str(tmp_path / "u32"), field="input_ids", tokenizer=None, dtype="uint32").dtype
    == "uint32"
  )
  assert read_all(str(tmp_path / "u16")) == [[1, 2], [65_000]]


def test_from_hf_dataset_takes_a_transformers_tokenizer_object(tmp_path):
  tokenizer = chat_families.build_tokenizer(str(tmp_path / "tok"))
  texts = datasets.Dataset.from_dict({"text": ["the weather in Paris", "sunny"]})
  manifest = jaxdata.from_hf_dataset(texts, out=str(tmp_path / "a"), tokenizer=tokenizer)
  assert manifest.tokenizer["kind"] == "huggingface" and manifest.tokenizer["vocab_size"] == len(tokenizer)
  with jaxdata.open_dataset(str(tmp_path / "a")) as dataset:
    assert dataset[0].tolist() == tokenizer("the weather in Paris", add_special_tokens=False)["input_ids"]
  with pytest.raises(TypeError, match="not a fast tokenizer"):
    jaxdata.from_hf_dataset(texts, out=str(tmp_path / "b"), tokenizer=object())


def test_from_hf_dataset_reads_labels_of_minus_100_as_the_mask(tmp_path):
  rows = datasets.Dataset.from_dict({"input_ids": [[5, 6, 7], [8, 9]], "labels": [[-100, 6, 7], [-100, -100]]})
  jaxdata.from_hf_dataset(rows, out=str(tmp_path / "a"), field="input_ids", tokenizer=None)
  with jaxdata.open_dataset(str(tmp_path / "a")) as dataset:
    assert [dataset[i]["mask"].tolist() for i in range(2)] == [[0, 1, 1], [0, 0]]
  wrong = datasets.Dataset.from_dict({"input_ids": [[5, 6, 7]], "labels": [[-100, 7, 7]]})
  with pytest.raises(InputFormatError, match=r"row 0: labels\[1\] is neither -100 nor its token id"):
    jaxdata.from_hf_dataset(wrong, out=str(tmp_path / "b"), field="input_ids", tokenizer=None)
