"""Inputs that were silent or hung before, each now refused with a message that names it."""

from __future__ import annotations

import json
import re

import pytest

from jaxdata import CheckpointError, ConfigError, InputFormatError, Pipeline, PipelineConfig, from_iterable
from jaxdata.conversion.local_runner import convert
from jaxdata.conversion.options import ConvertOptions
from jaxdata.conversion.tokenizers import TokenizerSpec
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


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory) -> str:
  import chat_families  # noqa: PLC0415 -- a test support module: its tokenizer builder

  directory = str(tmp_path_factory.mktemp("tok"))
  chat_families.build_tokenizer(directory)
  return directory


def chat_options(tokenizer_dir: str, template_file: str = "", **overrides: object) -> ConvertOptions:
  return ConvertOptions(
    tokenizer=TokenizerSpec.parse(f"hf:{tokenizer_dir}"),
    examples="chat",
    chat_template=template_file,
    workers=1,
    **overrides,
  )


def chat_file(tmp_path, messages: list[dict]) -> str:
  path = tmp_path / "chat.jsonl"
  path.write_text(json.dumps({"messages": messages}) + "\n")
  return str(path)


QA = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]


def test_a_template_that_does_not_parse_is_one_error_before_any_example(tmp_path, tokenizer_dir):
  (tmp_path / "t.jinja").write_text("{% for m in messages %}{{ m.content }")  # unclosed
  options = chat_options(tokenizer_dir, str(tmp_path / "t.jinja"), skip_invalid=True)
  with pytest.raises(InputFormatError, match=r"t.jinja: the chat template does not parse"):
    convert([chat_file(tmp_path, QA)], str(tmp_path / "out"), "x", options)
  assert not (tmp_path / "out").exists()  # no empty dataset written


@pytest.mark.parametrize(
  "content, message",
  [(b"\xff\xfe{{ messages }}", r"t.jinja: not UTF-8 text"), (b"  \n", r"t.jinja: is empty")],
)
def test_a_template_file_that_is_not_text_is_named(tmp_path, tokenizer_dir, content, message):
  (tmp_path / "t.jinja").write_bytes(content)
  with pytest.raises(InputFormatError, match=message):
    convert(
      [chat_file(tmp_path, QA)], str(tmp_path / "out"), "x", chat_options(tokenizer_dir, str(tmp_path / "t.jinja"))
    )


def test_a_tokenizer_config_that_is_not_json_is_named(tmp_path, tokenizer_dir):
  import shutil  # noqa: PLC0415

  broken = tmp_path / "tok"
  shutil.copytree(tokenizer_dir, broken)
  (broken / "tokenizer_config.json").write_text("{not json")
  with pytest.raises(InputFormatError, match=r"tokenizer_config.json: not a JSON file"):
    convert([chat_file(tmp_path, QA)], str(tmp_path / "out"), "x", chat_options(str(broken)))


def test_named_chat_templates_use_the_default_or_list_the_names(tmp_path, tokenizer_dir):
  import shutil  # noqa: PLC0415

  for names, expected in ((["default", "tool_use"], None), (["chatml", "tool_use"], "chatml, tool_use")):
    named = tmp_path / f"tok-{names[0]}"
    shutil.copytree(tokenizer_dir, named)
    config = json.loads((named / "tokenizer_config.json").read_text())
    config["chat_template"] = [
      {"name": n, "template": "{% for m in messages %}{{ m.content }};{% endfor %}"} for n in names
    ]
    (named / "tokenizer_config.json").write_text(json.dumps(config))
    out = str(tmp_path / f"out-{names[0]}")
    if expected is None:
      assert convert([chat_file(tmp_path, QA)], out, "x", chat_options(str(named))).num_records == 1
    else:
      with pytest.raises(InputFormatError, match=rf"has named chat templates \({expected}\) and none named 'default'"):
        convert([chat_file(tmp_path, QA)], out, "x", chat_options(str(named)))


def test_a_lone_surrogate_in_a_conversation_is_one_invalid_example(tmp_path, tokenizer_dir):
  path = tmp_path / "chat.jsonl"
  path.write_text(
    json.dumps({"messages": QA}) + "\n" + '{"messages": [{"role": "user", "content": "\\ud800"}, '
    '{"role": "assistant", "content": "a"}]}\n'
  )
  (tmp_path / "t.jinja").write_text("{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}")
  template = str(tmp_path / "t.jinja")
  with pytest.raises(InputFormatError, match=r"chat.jsonl:2: the conversation holds a lone surrogate"):
    convert([str(path)], str(tmp_path / "a"), "x", chat_options(tokenizer_dir, template))
  manifest = convert([str(path)], str(tmp_path / "b"), "x", chat_options(tokenizer_dir, template, skip_invalid=True))
  assert manifest.num_records == 1 and manifest.stats["skipped_invalid"] == 1


def test_a_mixture_iterators_state_given_to_a_pipeline_is_called_the_wrong_kind(tmp_path):
  from jaxdata.integrations.grain_mixture import MixtureDataset  # noqa: PLC0415

  path = str(tmp_path / "a")
  from_iterable([[1, 2, 3]] * 20, out=path, tokenizer=None)
  cfg = PipelineConfig.from_dict(
    {
      "datasets": [{"name": "a", "path": path}],
      "mixture": {"weights": {"a": 1}},
      "exhausted_policy": "repeat",
      "packing": {"seq_len": 8},
      "batch": {"global_batch_size": 2},
    }
  )
  iterator = iter(MixtureDataset(cfg))
  next(iterator)
  with Pipeline(cfg, prefetch=0) as pipe, pytest.raises(CheckpointError, match=r"the state of a document iterator"):
    pipe.set_state(iterator.get_state())


def test_a_two_dimensional_mask_and_a_writer_mask_flag_that_is_not_a_bool_are_named(tmp_path):
  import numpy as np  # noqa: PLC0415

  from jaxdata.sources import DatasetWriter  # noqa: PLC0415

  with pytest.raises(InputFormatError, match=r"item 0: its mask has shape \(1, 2\); give a flat list"):
    from_iterable([([1, 2], np.array([[1, 0]]))], out=str(tmp_path / "a"), tokenizer=None)
  for flag in (None, "yes"):
    with pytest.raises(TypeError, match=r"masks: True .* or False .*, got"):
      DatasetWriter(str(tmp_path / "w"), "w", np.dtype("<u2"), {"kind": "x"}, masks=flag)


@pytest.mark.parametrize(
  "raw, message",
  [
    (
      {"mixture": {"probabilities": {"a": 1}}},
      r"mixture: unknown key 'probabilities' \(did you mean 'weights'\? another tool's",
    ),
    ({"seq_len": 1024}, r"config: unknown key 'seq_len' \(another tool's name: jaxdata's is packing.seq_len"),
    ({"batch_size": 8}, r"unknown key 'batch_size' \(another tool's name: jaxdata's is batch.global_batch_size"),
  ],
)
def test_other_tools_spellings_point_at_jaxdatas_key(raw, message):
  with pytest.raises(ConfigError, match=message):
    PipelineConfig.from_dict({**base(), **raw, "mixture": raw.get("mixture", {"weights": {"a": 1}})})


def test_every_commands_help_fits_80_columns(monkeypatch, capsys):
  from jaxdata.cli import main  # noqa: PLC0415

  monkeypatch.setenv("COLUMNS", "80")
  with pytest.raises(SystemExit):
    main(["--help"])
  listing = capsys.readouterr().out
  commands = sorted(set(re.findall(r"^    (\w[\w-]*)", listing, re.MULTILINE)))
  assert "convert" in commands and "plan" in commands
  for command in commands:
    with pytest.raises(SystemExit):
      main([command, "--help"])
    wide = [line for line in capsys.readouterr().out.splitlines() if len(line) > 80]
    assert not wide, (command, wide)


def test_an_unreachable_bucket_fails_at_once_in_one_line(monkeypatch):
  from jaxdata.conversion.remote_inputs import check_reachable  # noqa: PLC0415

  monkeypatch.setenv("STORAGE_EMULATOR_HOST", "http://127.0.0.1:9")  # the discard port: nothing listens
  with pytest.raises(ConnectionError, match=r"input: gs://corpus/raw/: cannot reach its store at 127.0.0.1:9"):
    check_reachable("gs://corpus/raw/")


def test_every_command_shows_an_example_that_parses_and_its_defaults():
  import shlex  # noqa: PLC0415

  from jaxdata.cli import build_parser  # noqa: PLC0415
  from jaxdata.cli.parsing import EXAMPLES  # noqa: PLC0415

  parser = build_parser()
  assert set(EXAMPLES) == set(parser.commands)  # one example per command
  for command, example in EXAMPLES.items():
    argv = shlex.split(example)[1:]
    assert parser.parse_args(argv).command == command, example  # the example's flags and values are valid
    assert example in parser.commands[command].format_help()
  assert "(default: 4194304)" in parser.commands["plan"].format_help()  # a default its help did not say


def test_a_copy_written_with_another_compression_restores_the_same_state(tmp_path):
  """The fingerprint that guards the order is of the records (ids, masks, lengths), not of how they are stored."""
  source = tmp_path / "t.jsonl"
  source.write_text("".join(json.dumps({"text": f"document {i} " * (i % 7 + 1)}) + "\n" for i in range(400)))
  paths = {}
  for compression in ("zstd", "none"):
    paths[compression] = str(tmp_path / compression)
    convert([str(source)], paths[compression], "code", ConvertOptions(workers=1, compression=compression))

  def config(path: str) -> PipelineConfig:
    return PipelineConfig.from_dict(
      {
        "datasets": [{"name": "code", "path": path}],
        "mixture": {"weights": {"code": 1}},
        "exhausted_policy": "repeat",
        "packing": {"seq_len": 32},
        "batch": {"global_batch_size": 4},
      }
    )

  with Pipeline(config(paths["zstd"]), prefetch=0) as first:
    next(first)
    state = first.get_state()
    expected = [first.__next__()["tokens"].tobytes() for _ in range(3)]
  with Pipeline(config(paths["none"]), prefetch=0) as second:
    second.set_state(state)  # was refused: "content.code: dec07fa0d020 -> fe9d5370c137"
    assert [second.__next__()["tokens"].tobytes() for _ in range(3)] == expected


def test_an_empty_assistant_answer_under_generation_blocks_is_no_template_fault(tmp_path, tokenizer_dir):
  """It was reported as "1 generation blocks for 2 assistant messages": blocks are no longer counted."""
  template = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\\n{% if m.role == 'assistant' %}{% generation %}"
    "{{ m.content }}<|im_end|>{% endgeneration %}{% else %}{{ m.content }}<|im_end|>{% endif %}\\n{% endfor %}"
  )
  (tmp_path / "t.jinja").write_text(template)
  messages = [*QA, {"role": "user", "content": "and?"}, {"role": "assistant", "content": ""}]
  manifest = convert(
    [chat_file(tmp_path, messages)], str(tmp_path / "out"), "x", chat_options(tokenizer_dir, str(tmp_path / "t.jinja"))
  )
  assert manifest.num_records == 1 and manifest.stats["trained_tokens"] > 0
