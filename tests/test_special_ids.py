"""Special ids are the tokenizer's: conversion records them, packing uses them, nothing assumes id 0."""

from __future__ import annotations

import json

import numpy as np
import pytest
import transformers

import chat_families as families
from jaxdata import ConfigError, Pipeline, PipelineConfig, from_iterable, open_dataset
from jaxdata.conversion.local_runner import convert
from jaxdata.conversion.options import ConvertOptions
from jaxdata.conversion.tokenizers import TokenizerSpec


@pytest.fixture(scope="module")
def llama_like(tmp_path_factory) -> str:
  """A tokenizer whose id 0 is an ordinary token ("!", as in Llama-3, GPT-2, Qwen) and whose BOS / EOS /
  pad are special tokens further on, named in its tokenizer_config.json (transformers' layout)."""
  from tokenizers import Tokenizer, decoders, models, pre_tokenizers  # noqa: PLC0415

  alphabet = ["!", *sorted(set(pre_tokenizers.ByteLevel.alphabet()) - {"!"})]
  vocab = {token: i for i, token in enumerate(alphabet)}
  tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
  tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
  tok.decoder = decoders.ByteLevel()
  specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|pad|>", *families.SPECIAL_TOKENS]
  tok.add_special_tokens(specials)
  fast = transformers.PreTrainedTokenizerFast(
    tokenizer_object=tok, bos_token="<|begin_of_text|>", eos_token="<|end_of_text|>", pad_token="<|pad|>"
  )
  fast.chat_template = families.without_blocks(families.LLAMA31)
  directory = str(tmp_path_factory.mktemp("llama_like"))
  fast.save_pretrained(directory)
  return directory


def converted(tmp_path, tokenizer_dir: str, rows: list[dict], examples: str = "text") -> str:
  source = tmp_path / "in.jsonl"
  source.write_text("".join(json.dumps(r) + "\n" for r in rows))
  options = ConvertOptions(tokenizer=TokenizerSpec.parse(f"hf:{tokenizer_dir}"), examples=examples, workers=1)
  convert([str(source)], str(tmp_path / "out"), "set", options)
  return str(tmp_path / "out")


def ids_of(tokenizer_dir: str) -> dict[str, int]:
  fast = transformers.PreTrainedTokenizerFast.from_pretrained(tokenizer_dir)
  return {
    "bos": fast.bos_token_id,
    "eos": fast.eos_token_id,
    "pad": fast.pad_token_id,
    "bang": fast.convert_tokens_to_ids("!"),
  }


def test_conversion_records_the_tokenizers_special_ids(tmp_path, llama_like):
  path = converted(tmp_path, llama_like, [{"text": "hi!"}])
  ids = ids_of(llama_like)
  assert ids["bang"] == 0 and ids["eos"] != 0
  with open_dataset(path) as dataset:
    recorded = dataset.manifest.tokenizer
  assert (recorded["bos_id"], recorded["eos_id"], recorded["pad_id"]) == (ids["bos"], ids["eos"], ids["pad"])


def test_a_chat_conversion_records_the_templates_end_of_turn(tmp_path, llama_like):
  rows = [{"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}]
  path = converted(tmp_path, llama_like, rows, examples="chat")
  with open_dataset(path) as dataset:
    recorded = dataset.manifest.tokenizer
  fast = transformers.PreTrainedTokenizerFast.from_pretrained(llama_like)
  assert recorded["end_of_turn_id"] == fast.convert_tokens_to_ids("<|eot_id|>")


def pipeline_config(path: str, **packing: object) -> PipelineConfig:
  return PipelineConfig.from_dict(
    {
      "datasets": [{"name": "set", "path": path}],
      "mixture": {"weights": {"set": 1}},
      "exhausted_policy": "repeat",
      "packing": {"seq_len": 16, **packing},
      "batch": {"global_batch_size": 2},
    }
  )


def test_add_eos_without_an_id_appends_the_recorded_eos_not_id_0(tmp_path, llama_like):
  path = converted(tmp_path, llama_like, [{"text": "hello there"}, {"text": "ok"}])
  ids = ids_of(llama_like)
  with Pipeline(pipeline_config(path, add_eos=True), prefetch=0) as pipe:
    batch = next(pipe)
    assert pipe.cfg.packing.eos_id == ids["eos"]
  tokens, segments = np.asarray(batch["tokens"]), np.asarray(batch["segment_ids"])
  last = (segments > 0) & (np.roll(segments, -1, axis=1) != segments)  # each document's last slot
  last[:, -1] = segments[:, -1] > 0
  assert (tokens[last] == ids["eos"]).all() and not (tokens[last] == 0).any()


def test_an_eos_id_other_than_the_recorded_one_is_refused_naming_both(tmp_path, llama_like):
  path = converted(tmp_path, llama_like, [{"text": "hello"}])
  eos = ids_of(llama_like)["eos"]
  with pytest.raises(ConfigError, match=rf"packing.eos_id: 0, but the tokenizer of dataset set records EOS id {eos}"):
    Pipeline(pipeline_config(path, add_eos=True, eos_id=0), prefetch=0)
  with Pipeline(pipeline_config(path, add_eos=True, eos_id=eos), prefetch=0) as pipe:  # the same id: fine
    next(pipe)


def test_adding_a_token_nobody_names_is_refused(tmp_path):
  path = str(tmp_path / "ids")
  from_iterable([[5, 6, 7], [8, 9]], out=path, tokenizer=None)  # ids without a tokenizer: nothing recorded
  with pytest.raises(ConfigError, match=r"packing.add_eos: true, but no packing.eos_id is given"):
    Pipeline(pipeline_config(path, add_eos=True), prefetch=0)
  with Pipeline(pipeline_config(path, add_eos=True, eos_id=3), prefetch=0) as pipe:
    assert int(np.asarray(next(pipe)["tokens"]).max()) <= 9


def test_two_tokenizers_are_named_before_the_special_ids_they_differ_in(tmp_path, llama_like):
  """A byte dataset beside a Hugging Face one: the cause named is the tokenizers, not their EOS ids."""
  (tmp_path / "a").mkdir()
  hf = converted(tmp_path / "a", llama_like, [{"text": "hi!"}] * 4)
  (tmp_path / "b").mkdir()
  (tmp_path / "b" / "in.jsonl").write_text(json.dumps({"text": "hello"}) + "\n")
  convert([str(tmp_path / "b" / "in.jsonl")], str(tmp_path / "b" / "out"), "bytes", ConvertOptions(workers=1))
  cfg = PipelineConfig.from_dict(
    {
      "datasets": [{"name": "hf", "path": hf}, {"name": "bytes", "path": str(tmp_path / "b" / "out")}],
      "mixture": {"weights": {"hf": 1, "bytes": 1}},
      "packing": {"seq_len": 16, "add_eos": True},
      "batch": {"global_batch_size": 2},
    }
  )
  with pytest.raises(ConfigError, match=r"^datasets.bytes: tokenizer .* differs from datasets.hf's"):
    Pipeline(cfg)


def test_an_eos_id_that_is_another_token_is_refused_even_when_not_added(tmp_path, llama_like):
  path = converted(tmp_path, llama_like, [{"text": "hi!"}] * 4)
  eos = ids_of(llama_like)["eos"]
  raw = {
    "datasets": [{"name": "set", "path": path}],
    "mixture": {"weights": {"set": 1}},
    "packing": {"seq_len": 16, "add_eos": False, "eos_id": eos + 1},
    "batch": {"global_batch_size": 2},
  }
  with pytest.raises(
    ConfigError, match=rf"packing.eos_id: {eos + 1}, but the tokenizer of dataset set records EOS id {eos}"
  ):
    Pipeline(PipelineConfig.from_dict(raw))


def test_a_tokenizer_object_and_its_directory_are_one_tokenizer(tmp_path, llama_like):
  """Identity follows the tokenizer's content, not how it was passed: a set written with the object
  `AutoTokenizer` returned mixes with one converted from `hf:DIR` (both ways round), and a different
  tokenizer given as an object is still refused."""
  from_dir = converted(tmp_path, llama_like, [{"text": "hi!"}] * 4)
  tokenizer = transformers.AutoTokenizer.from_pretrained(llama_like)
  tokenizer(["padded"], padding="max_length", max_length=8)  # a caller's padding is not the tokenizer
  from_iterable(["hello there"] * 4, str(tmp_path / "object"), tokenizer=tokenizer)
  assert open_dataset(str(tmp_path / "object")).manifest.tokenizer["file"] == "(a tokenizer object)"

  def mixed(first: str, second: str) -> PipelineConfig:
    return PipelineConfig.from_dict(
      {
        "datasets": [{"name": "a", "path": first}, {"name": "b", "path": second}],
        "mixture": {"weights": {"a": 1, "b": 1}},
        "packing": {"seq_len": 16, "add_eos": True},
        "batch": {"global_batch_size": 2},
      }
    )

  for first, second in ((from_dir, str(tmp_path / "object")), (str(tmp_path / "object"), from_dir)):
    with Pipeline(mixed(first, second), prefetch=0) as pipe:
      assert next(pipe)["tokens"].shape == (2, 16)
  other = transformers.AutoTokenizer.from_pretrained(llama_like)
  other.add_tokens(["<|another|>"])
  from_iterable(["hello"] * 4, str(tmp_path / "other"), tokenizer=other)
  with pytest.raises(ConfigError, match=r"^datasets.b: tokenizer .* differs from datasets.a's"):
    Pipeline(mixed(from_dir, str(tmp_path / "other")))
