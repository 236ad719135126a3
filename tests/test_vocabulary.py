"""Token ids are never silently wrong: one vocabulary per mixture, special ids
inside it, ids that int32 batches can hold."""

from __future__ import annotations

import numpy as np
import pytest
from array_record.python.array_record_module import ArrayRecordWriter

from jaxdata import ConfigError, DatasetError, Pipeline, PipelineConfig
from jaxdata.sources import DatasetWriter, build_index


def write(directory, name: str, tokenizer: dict, docs: list[list[int]], dtype: str = "<u2") -> str:
  writer = DatasetWriter(str(directory), name, np.dtype(dtype), tokenizer)
  writer.write_documents(np.concatenate([np.asarray(d) for d in docs]), np.array([len(d) for d in docs]))
  writer.finish()
  return str(directory)


def config(paths: dict[str, str], **top) -> PipelineConfig:
  packing = top.pop("packing", {})
  return PipelineConfig.from_dict(
    {
      "datasets": [{"name": n, "path": p} for n, p in paths.items()],
      "mixture": {"weights": {n: 1 for n in paths}},
      "exhausted_policy": "repeat",
      "packing": {"seq_len": 8, **packing},
      "batch": {"global_batch_size": 2},
      **top,
    }
  )


def raw_shard(path: str, docs: list[np.ndarray]) -> str:
  writer = ArrayRecordWriter(path, "group_size:1")
  for doc in docs:
    writer.write(doc.tobytes())
  writer.close()
  return path


def test_a_uint32_id_that_int32_cannot_hold_is_an_error_naming_shard_and_record(tmp_path):
  # 0.1: 3,000,000,000 came out as -1,294,967,296.
  shard = raw_shard(
    str(tmp_path / "big.array_record"), [np.array([5, 6, 7], "<u4"), np.array([8, 3_000_000_000, 9], "<u4")]
  )
  build_index([shard], "uint32", name="big")
  with Pipeline(config({"big": str(tmp_path)}), prefetch=0) as pipe:
    with pytest.raises(
      DatasetError, match=r"big\.array_record: record 1 holds token id 3000000000, not below 2147483648"
    ):
      next(pipe)


def test_ids_at_or_above_the_vocabulary_are_an_error(tmp_path):
  shard = raw_shard(str(tmp_path / "v.array_record"), [np.array([1, 2, 99], "<u2"), np.array([100, 4], "<u2")])
  build_index([shard], "uint16", name="v", tokenizer={"kind": "t", "vocab_size": 100})
  with Pipeline(config({"v": str(tmp_path)}), prefetch=0) as pipe:
    with pytest.raises(
      DatasetError, match=r"v\.array_record: record 1 holds token id 100, not below 100 \(the vocab_size"
    ):
      next(pipe)
  with pytest.raises(ValueError, match=r"tokens: ids must lie in \[0, 99\] for the tokenizer's vocab_size 100"):
    write(tmp_path / "w", "w", {"kind": "t", "vocab_size": 100}, [[1, 100]])


def test_datasets_with_different_tokenizers_are_mixed_only_on_purpose(tmp_path):
  a = write(tmp_path / "a", "a", {"kind": "byte", "vocab_size": 259}, [[5, 6, 7]] * 20)
  b = write(tmp_path / "b", "b", {"kind": "huggingface", "sha256": "ab12", "vocab_size": 8192}, [[500, 6]] * 20)
  with pytest.raises(
    ConfigError, match=r"datasets\.b: tokenizer .* differs from datasets\.a's .* allow_mixed_tokenizers"
  ):
    Pipeline(config({"a": a, "b": b}))
  with Pipeline(config({"a": a, "b": b}, allow_mixed_tokenizers=True), prefetch=0) as pipe:
    assert int(np.asarray(next(pipe)["tokens"]).max()) == 500


@pytest.mark.parametrize(
  "packing, key",
  [
    ({"add_eos": True, "eos_id": 9000}, "eos_id"),
    ({"add_bos": True, "bos_id": 8192}, "bos_id"),
    ({"pad_id": 10_000}, "pad_id"),
  ],
)
def test_special_ids_must_lie_inside_the_vocabulary(tmp_path, packing, key):
  a = write(tmp_path / "a", "a", {"kind": "sp", "vocab_size": 8192}, [[5, 6, 7]] * 20)
  with pytest.raises(ConfigError, match=rf"packing\.{key}: \d+ is not below the datasets' vocabulary size 8192"):
    Pipeline(config({"a": a}, packing=packing))
  # An id that is not added is not checked (eos_id 9000 without add_eos).
  Pipeline(config({"a": a}, packing={"eos_id": 9000})).close()
