"""Inputs that were silent or hung before, each now refused with a message that names it."""

from __future__ import annotations

import json

import pytest

from jaxdata import ConfigError, InputFormatError, Pipeline, PipelineConfig, from_iterable
from jaxdata.conversion.local_runner import convert
from jaxdata.conversion.options import ConvertOptions
from jaxdata.integrations.megatron import megatron_split_ranges


def base(**overrides: object) -> dict:
  return {"datasets": [{"name": "a"}], "mixture": {"weights": {"a": 1}}, **overrides}


def test_group_by_length_and_the_update_lag_are_bounded():
  with pytest.raises(ConfigError, match=r"packing.group_by_length: expected an int >= 0 and <= 1024, got 1000000000"):
    PipelineConfig.from_dict(base(packing={"mode": "none", "group_by_length": 10**9}))
  with pytest.raises(ConfigError, match=r"mixture.update_lag_steps: expected an int >= 0 and <= 1048576"):
    PipelineConfig.from_dict({**base(), "mixture": {"weights": {"a": 1}, "update_lag_steps": 2**62}})


@pytest.mark.parametrize(
  "line, key",
  [
    ('{"text": "a", "text": "b"}', "text"),
    ('{"messages": [{"role": "user", "role": "assistant", "content": "x"}]}', "role"),
  ],
)
def test_a_json_line_with_a_key_twice_is_refused_by_file_and_line(tmp_path, line, key):
  source = tmp_path / "in.jsonl"
  source.write_text('{"text": "fine"}\n' + line + "\n")
  with pytest.raises(InputFormatError, match=rf"in.jsonl:2: key '{key}' appears twice in one JSON object"):
    convert([str(source)], str(tmp_path / "out"), "x", ConvertOptions(workers=1))
  skipped = convert([str(source)], str(tmp_path / "skip"), "x", ConvertOptions(workers=1, skip_invalid=True))
  assert skipped.stats["skipped_invalid"] == 1 and skipped.num_records == 1


def test_a_split_that_megatron_would_read_otherwise_is_refused():
  # Megatron-Core's parser takes the runs of digits and points: '1e2,1' is its [1, 2, 1], not [100, 1]
  with pytest.raises(ConfigError, match=r"'1e2' is not a plain decimal; .* would take \[1.0, 2.0\]"):
    megatron_split_ranges("1e2,1", 1000)
  assert megatron_split_ranges("100,1", 101) == [(0, 100), (100, 101), (101, 101)]


def test_an_eos_id_other_than_the_byte_tokenizers_recorded_eos_is_refused(tmp_path):
  """A newcomer set the byte tokenizer's pad (2) as its EOS; the manifest records EOS 0."""
  path = str(tmp_path / "bytes")
  from_iterable(["hello", "world"], out=path)
  cfg = PipelineConfig.from_dict(
    {
      "datasets": [{"name": "a", "path": path}],
      "mixture": {"weights": {"a": 1}},
      "exhausted_policy": "repeat",
      "packing": {"seq_len": 8, "add_eos": True, "eos_id": 2},
      "batch": {"global_batch_size": 2},
    }
  )
  with pytest.raises(ConfigError, match=r"packing.eos_id: 2, but the tokenizer of dataset a records EOS id 0"):
    Pipeline(cfg, prefetch=0)
  assert json.loads(json.dumps(cfg.to_dict()))["packing"]["eos_id"] == 2
