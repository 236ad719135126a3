"""Fine-tuning conversion: each conversation rendered once, tokenized once, its mask from that rendering.

The oracle is the tokenizer library's own: transformers' `apply_chat_template(...,
return_assistant_tokens_mask=True)` on the whole conversation, over template styles written here
(ChatML-like, header tokens, one that drops earlier reasoning, tool calls), with a tokenizer built by
`tokenizers` (no network).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re

import numpy as np
import pytest
import transformers

from jaxdata import ConfigError, InputFormatError, Pipeline, PipelineConfig, open_dataset
from jaxdata.cli import main
from jaxdata.conversion.beam_runner import convert_with_beam
from jaxdata.conversion.examples import character_range_mask
from jaxdata.conversion.local_runner import convert
from jaxdata.conversion.options import ConvertOptions
from jaxdata.conversion.tokenizers import TokenizerSpec
from jaxdata.integrations.levanter import levanter_chat_options
from jaxdata.sources import TokenDataset

SPECIALS = ["[UNK]", "<|im_start|>", "<|im_end|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]

CHATML = (
  "{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
  "{% if m['role'] == 'assistant' %}{% generation %}{{ m['content'] }}<|im_end|>{% endgeneration %}"
  "{% else %}{{ m['content'] }}<|im_end|>{% endif %}\n{% endfor %}"
)
HEADERS = (
  "{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n"
  "{% if m['role'] == 'assistant' %}{% generation %}{{ m['content'] | trim }}<|eot_id|>{% endgeneration %}"
  "{% else %}{{ m['content'] | trim }}<|eot_id|>{% endif %}{% endfor %}"
)
# Earlier assistant turns lose their reasoning: the rendering of turn 1 differs from turn 1 rendered alone.
REASONING = (
  "{% set last = namespace(i=-1) %}{% for m in messages %}{% if m['role'] == 'assistant' %}"
  "{% set last.i = loop.index0 %}{% endif %}{% endfor %}"
  "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{% if m['role'] == 'assistant' %}{% generation %}"
  "{% if loop.index0 < last.i and '</think>' in m['content'] %}{{ m['content'].split('</think>')[-1] | trim }}"
  "{% else %}{{ m['content'] }}{% endif %}<|im_end|>{% endgeneration %}"
  "{% else %}{{ m['content'] }}<|im_end|>{% endif %}\n{% endfor %}"
)
TOOLS = (
  "{% if tools %}<|im_start|>system\ntools: {{ tools | tojson }}<|im_end|>\n{% endif %}"
  "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{% if m['role'] == 'assistant' %}{% generation %}"
  "{% if m.get('tool_calls') %}{% for c in m['tool_calls'] %}call {{ c['function']['name'] }}"
  "({{ c['function']['arguments'] }}){% endfor %}{% else %}{{ m['content'] }}{% endif %}<|im_end|>"
  "{% endgeneration %}{% else %}{{ m['content'] }}<|im_end|>{% endif %}\n{% endfor %}"
)


def without_blocks(template: str) -> str:
  """The template with its {% generation %} tags taken out: the same rendering, no blocks."""
  return re.sub(r"\{%-?\s*(end)?generation\s*-?%\}", "", template)


# A template without generation blocks (the mask: each assistant message's whole turn).
PLAIN = "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory) -> str:
  from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers  # noqa: PLC0415

  corpus = [json.dumps(c) for c in CONVERSATIONS] * 20 + ["call lookup think answer"] * 20
  tok = Tokenizer(models.BPE(unk_token="[UNK]"))
  tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
  tok.decoder = decoders.ByteLevel()
  trainer = trainers.BpeTrainer(
    vocab_size=600, special_tokens=SPECIALS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
  )
  tok.train_from_iterator(corpus, trainer)
  fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok)
  fast.chat_template = CHATML
  directory = str(tmp_path_factory.mktemp("tokenizer"))
  fast.save_pretrained(directory)
  return directory


CONVERSATIONS = [
  [{"role": "user", "content": "hello, how are you?"}, {"role": "assistant", "content": "I am fine, thanks."}],
  [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "2+2?"},
    {"role": "assistant", "content": "<think>add them</think> 4"},
    {"role": "user", "content": "and 3+3?"},
    {"role": "assistant", "content": "<think>again</think> 6"},
  ],
  [
    {"role": "user", "content": "weather in Paris"},
    {
      "role": "assistant",
      "content": None,
      "tool_calls": [{"type": "function", "function": {"name": "lookup", "arguments": '{"city": "Paris"}'}}],
    },
    {"role": "tool", "content": "sunny, 21C"},
    {"role": "assistant", "content": "It is sunny and 21C."},
  ],
]


def _jsonl(path, rows) -> str:
  with open(path, "w") as f:
    f.writelines(json.dumps(r) + "\n" for r in rows)
  return str(path)


def _options(tokenizer_dir: str, template: str | None, tmp_path, **overrides) -> ConvertOptions:
  template_file = ""
  if template is not None:
    template_file = str(tmp_path / "template.jinja")
    (tmp_path / "template.jinja").write_text(template)
  return ConvertOptions(
    tokenizer=TokenizerSpec.parse(f"hf:{tokenizer_dir}"),
    examples="chat",
    chat_template=template_file,
    workers=1,
    **overrides,
  )


def _records(path: str) -> list[dict[str, np.ndarray]]:
  with open_dataset(path) as dataset:
    return [dataset[i] for i in range(len(dataset))]


def _oracle(tokenizer_dir: str, template: str, messages, tools=None):
  fast = transformers.PreTrainedTokenizerFast.from_pretrained(tokenizer_dir)
  out = fast.apply_chat_template(
    messages, tools=tools, chat_template=template, tokenize=True, return_dict=True, return_assistant_tokens_mask=True
  )
  text = fast.apply_chat_template(messages, tools=tools, chat_template=template, tokenize=False)
  once = fast(text, add_special_tokens=False)["input_ids"]
  assert list(out["input_ids"]) == list(once)  # the template's tokenization is the rendering tokenized once
  return list(once), list(out["assistant_masks"])


@pytest.mark.parametrize(
  "name, template", [("chatml", CHATML), ("headers", HEADERS), ("reasoning", REASONING), ("tools", TOOLS)]
)
def test_masks_equal_the_tokenizer_librarys_assistant_masks(tokenizer_dir, tmp_path, name, template):
  tools = [{"type": "function", "function": {"name": "lookup", "parameters": {"city": "string"}}}]
  rows = [{"messages": m, **({"tools": tools} if name == "tools" else {})} for m in CONVERSATIONS]
  if name != "tools":
    rows = [r for r in rows if all(m.get("content") is not None for m in r["messages"])]
  source = _jsonl(tmp_path / "chat.jsonl", rows)
  manifest = convert([source], str(tmp_path / "out"), "chat", _options(tokenizer_dir, template, tmp_path))
  assert manifest.stats["chat_template_sha256"] == hashlib.sha256(template.encode()).hexdigest()  # MaxText checks it
  records = _records(str(tmp_path / "out"))
  assert len(records) == len(rows)
  for row, record in zip(rows, records):
    ids, mask = _oracle(tokenizer_dir, template, row["messages"], row.get("tools"))
    assert record["tokens"].tolist() == ids
    assert record["mask"].tolist() == mask
  if name == "reasoning":  # the earlier turn's reasoning is gone from the whole rendering, and so from the mask
    fast = transformers.PreTrainedTokenizerFast.from_pretrained(tokenizer_dir)
    assert "add them" not in fast.decode(records[1]["tokens"]) and "again" in fast.decode(records[1]["tokens"])


def test_without_generation_blocks_an_assistant_trains_its_whole_turn(tokenizer_dir, tmp_path):
  rows = [{"messages": m} for m in CONVERSATIONS[:2]]
  source = _jsonl(tmp_path / "chat.jsonl", rows)
  convert([source], str(tmp_path / "plain"), "chat", _options(tokenizer_dir, without_blocks(CHATML), tmp_path))
  for row, record in zip(rows, _records(str(tmp_path / "plain"))):
    # the oracle: the same template with blocks around the content and the end-of-turn marker
    ids, mask = _oracle(tokenizer_dir, CHATML, row["messages"])
    assert record["tokens"].tolist() == ids and record["mask"].tolist() == mask
  assert character_range_mask(np.array([[0, 2], [2, 4], [4, 6]]), [(3, 5)]).tolist() == [
    0,
    1,
    1,
  ]  # straddling tokens train


def test_weights_and_train_on_choose_what_trains(tokenizer_dir, tmp_path):
  messages = [dict(m) for m in CONVERSATIONS[1]]
  messages[2]["weight"] = 0  # OpenAI's per-message weight: the first answer does not train
  source = _jsonl(tmp_path / "chat.jsonl", [{"messages": messages}])
  _, full = _oracle(tokenizer_dir, CHATML, CONVERSATIONS[1])
  blocks = np.flatnonzero(np.diff(np.r_[0, full]) == 1)
  for train_on, expect_blocks in (("assistant", [1]), ("last", [1]), ("all", None)):
    out = str(tmp_path / f"out-{train_on}")
    convert([source], out, "c", _options(tokenizer_dir, CHATML, tmp_path, train_on=train_on))
    mask = _records(out)[0]["mask"]
    if expect_blocks is None:
      assert mask.all()
    else:
      starts = np.flatnonzero(np.diff(np.r_[0, mask]) == 1)
      assert starts.tolist() == [blocks[k] for k in expect_blocks]


def test_prompt_completion_and_pretokenized_examples(tokenizer_dir, tmp_path):
  fast = transformers.PreTrainedTokenizerFast.from_pretrained(tokenizer_dir)
  rows = [
    {"prompt": "hello, how", "completion": " are you?"},
    {"input_ids": [5, 6, 7, 8], "labels": [-100, -100, 7, 8]},
    {"input_ids": [9, 10, 11], "mask": [0, 1, 1]},
  ]
  source = _jsonl(tmp_path / "pc.jsonl", rows)
  options = ConvertOptions(
    tokenizer=TokenizerSpec.parse(f"hf:{tokenizer_dir}/tokenizer.json"), examples="prompt-completion", workers=1
  )
  manifest = convert([source], str(tmp_path / "pc"), "pc", options)
  records = _records(str(tmp_path / "pc"))
  encoding = fast("hello, how are you?", add_special_tokens=False, return_offsets_mapping=True)
  offsets = np.asarray(encoding["offset_mapping"])
  assert records[0]["tokens"].tolist() == encoding["input_ids"]
  assert records[0]["mask"].tolist() == ((offsets[:, 1] > len("hello, how")).astype(int)).tolist()
  assert records[1]["tokens"].tolist() == [5, 6, 7, 8] and records[1]["mask"].tolist() == [0, 0, 1, 1]
  assert records[2]["mask"].tolist() == [0, 1, 1]
  assert manifest.stats["examples"] == 3 and manifest.stats["trained_tokens"] == sum(
    int(r["mask"].sum()) for r in records
  )


BAD_ROWS = [
  ({"messages": [{"role": "user"}, {"role": "assistant", "content": "x"}]}, "messages[0]: content must be a string"),
  ({"messages": [{"role": 7, "content": "x"}]}, "role must be a non-empty string, got 7"),
  ({"messages": "hello"}, "field 'messages' is str, not a list"),
  ({"messages": [{"role": "user", "content": "hi"}]}, "no assistant message trains"),
  (
    {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "x", "weight": 2}]},
    "weight must be 0 or 1",
  ),
  (
    {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "x", "weight": 0}]},
    "no assistant message trains",
  ),
  ({"prompt": "x"}, "field 'messages' is missing"),
]


@pytest.mark.parametrize("row, message", BAD_ROWS, ids=[m for _, m in BAD_ROWS])
def test_bad_examples_are_named_by_file_and_line_and_counted(tokenizer_dir, tmp_path, row, message):
  good = {"messages": CONVERSATIONS[0]}
  source = _jsonl(tmp_path / "bad.jsonl", [good, row, good])
  with pytest.raises(InputFormatError, match=rf"bad.jsonl:2: .*{re.escape(message)}"):
    convert([source], str(tmp_path / "o"), "x", _options(tokenizer_dir, None, tmp_path))
  assert not os.path.exists(tmp_path / "o" / "manifest.json")
  manifest = convert([source], str(tmp_path / "o"), "x", _options(tokenizer_dir, None, tmp_path, skip_invalid=True))
  assert (manifest.stats["examples"], manifest.stats["refused_examples"]) == (2, 1)


def test_an_example_longer_than_max_tokens_is_named_and_counted_in_both_runners_and_the_cli(tokenizer_dir, tmp_path):
  rows = [{"input_ids": [5, 6, 7]}, {"input_ids": list(range(5, 13))}, {"messages": CONVERSATIONS[0]}]
  source = _jsonl(tmp_path / "long.jsonl", rows)
  longest_chat = len(_records_of(tokenizer_dir, tmp_path, source)[2]["tokens"])
  cap = 7  # the 3-token row fits, the 8-token row does not (and the conversation is longer still)
  assert longest_chat > cap
  with pytest.raises(InputFormatError, match=r"long.jsonl:2: the example holds 8 tokens, more than the 7 allowed"):
    convert([source], str(tmp_path / "o"), "x", _options(tokenizer_dir, None, tmp_path, max_example_tokens=cap))
  skipping = _options(tokenizer_dir, None, tmp_path, max_example_tokens=cap, skip_invalid=True)
  manifest = convert([source], str(tmp_path / "o"), "x", skipping)
  assert (manifest.stats["examples"], manifest.stats["refused_examples"]) == (1, 2)
  assert [r["tokens"].tolist() for r in _records(str(tmp_path / "o"))] == [[5, 6, 7]]
  beam = convert_with_beam([source], str(tmp_path / "beam"), "x", skipping, [])
  assert (beam.stats["examples"], beam.stats["refused_examples"]) == (1, 2)
  argv = ["convert", source, "--format", "chat", "--tokenizer", f"hf:{tokenizer_dir}", "--out", str(tmp_path / "cli")]
  assert main([*argv, "--name", "x", "-q", "--workers", "1", "--max-tokens", str(cap), "--skip-invalid"]) == 0
  assert [r["tokens"].tolist() for r in _records(str(tmp_path / "cli"))] == [[5, 6, 7]]
  with pytest.raises(ValueError, match="max_example_tokens: must be >= 0"):
    _options(tokenizer_dir, None, tmp_path, max_example_tokens=-1)


def _records_of(tokenizer_dir: str, tmp_path, source: str) -> list[dict[str, np.ndarray]]:
  out = str(tmp_path / "uncapped")
  convert([source], out, "x", _options(tokenizer_dir, None, tmp_path))
  return _records(out)


def test_a_template_that_raises_or_renders_another_conversation_is_named(tokenizer_dir, tmp_path):
  source = _jsonl(tmp_path / "c.jsonl", [{"messages": CONVERSATIONS[0]}])
  raising = "{{ raise_exception('no system prompt allowed') }}"
  with pytest.raises(InputFormatError, match=r"c.jsonl:1: the chat template failed: .*no system prompt allowed"):
    convert([source], str(tmp_path / "a"), "x", _options(tokenizer_dir, raising, tmp_path))
  # a template that drops the assistant's answer: the trained message really is absent
  dropping = "{% for m in messages %}{% if m['role'] != 'assistant' %}{{ m['content'] }}{% endif %}{% endfor %}"
  with pytest.raises(
    InputFormatError,
    match=r"c.jsonl:1: messages\[1\] \(assistant, weight 1\) is absent from the template's rendering",
  ):
    convert([source], str(tmp_path / "b"), "x", _options(tokenizer_dir, dropping, tmp_path))
  # one that rewrites contents (upper case) renders them still: the turn trains as its blocks would
  rewriting = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{% if m['role'] == 'assistant' %}{% generation %}"
    "{{ m['content'] | upper }}<|im_end|>{% endgeneration %}{% else %}{{ m['content'] | upper }}<|im_end|>"
    "{% endif %}{% endfor %}"
  )
  convert([source], str(tmp_path / "c"), "x", _options(tokenizer_dir, without_blocks(rewriting), tmp_path))
  ids, mask = _oracle(tokenizer_dir, rewriting, CONVERSATIONS[0])
  (record,) = _records(str(tmp_path / "c"))
  assert record["tokens"].tolist() == ids and record["mask"].tolist() == mask and sum(mask) > 0


def test_the_cli_and_beam_write_the_same_masked_dataset_and_it_trains_on_masks(tokenizer_dir, tmp_path, capsys):
  source = _jsonl(tmp_path / "chat.jsonl", [{"messages": m} for m in CONVERSATIONS[:2]] * 30)
  argv = ["convert", source, "--format", "chat", "--tokenizer", f"hf:{tokenizer_dir}", "--out", str(tmp_path / "cli")]
  assert main([*argv, "--name", "chat", "-q", "--workers", "1"]) == 0
  convert_with_beam([source], str(tmp_path / "beam"), "chat", _options(tokenizer_dir, None, tmp_path), [])
  cli, beam = _records(str(tmp_path / "cli")), _records(str(tmp_path / "beam"))
  capsys.readouterr()
  assert main(["inspect", str(tmp_path / "cli")]) == 0
  said = " ".join(capsys.readouterr().out.split())
  assert f"chat: 60 fine-tuning examples, {sum(int(r['mask'].sum()) for r in cli):,} trained tokens" in said
  assert [(r["tokens"].tolist(), r["mask"].tolist()) for r in cli] == [
    (r["tokens"].tolist(), r["mask"].tolist()) for r in beam
  ]
  cfg = PipelineConfig.from_dict(
    {
      "datasets": [{"name": "chat", "path": str(tmp_path / "cli")}],
      "mixture": {"weights": {"chat": 1}, "unit": "documents"},
      "packing": {"mode": "best_fit", "seq_len": 64, "max_segments_per_row": 4},
      "batch": {"global_batch_size": 4, "drop_remainder": False},
      "exhausted_policy": "stop",
    }
  )
  config = tmp_path / "sft.yaml"
  config.write_text(json.dumps({**cfg.to_dict(), "exhausted_policy": "repeat"}))
  capsys.readouterr()
  assert main(["plan", str(config), "--tokens", "100k", "-q"]) == 0
  said = " ".join(capsys.readouterr().out.split())
  per_epoch = sum(int(r["mask"].sum()) for r in cli)
  assert re.search(rf"chat: [0-9.]+ epochs of 60 examples, [0-9,]+ trained tokens \({per_epoch:,} an epoch", said), said
  trained = sum(int(np.asarray(b["loss_mask"]).sum()) for b in Pipeline(cfg, prefetch=0))
  # every trained token of every example but each one's first token (no target predicts it): here all
  # examples' first tokens are prompt tokens, so the batches train exactly the masks' trained tokens
  assert trained == sum(int(r["mask"].sum()) for r in cli) and trained > 0


def test_levanters_chat_format_converts_to_the_same_masks(tokenizer_dir, tmp_path):
  rows = [
    {"conversation": CONVERSATIONS[0], "sys": "Be kind.", "chat_template_kwargs": {"greeting": "hi"}},
    {"conversation": CONVERSATIONS[1], "sys": "Be brief."},
  ]
  source = _jsonl(tmp_path / "levanter.jsonl", rows)
  template = "{% if greeting is defined %}{{ greeting }} {% endif %}" + CHATML
  fmt = {"type": "chat", "messages_field": "conversation", "chat_template": template, "system_prompt": "sys"}
  convert([source], str(tmp_path / "lev"), "lev", levanter_chat_options(fmt, f"hf:{tokenizer_dir}", workers=1))
  for row, record in zip(rows, _records(str(tmp_path / "lev"))):
    messages = [{"role": "system", "content": row["sys"]}, *row["conversation"]]
    fast = transformers.PreTrainedTokenizerFast.from_pretrained(tokenizer_dir)
    kwargs = row.get("chat_template_kwargs", {})
    out = fast.apply_chat_template(
      messages, chat_template=template, tokenize=True, return_dict=True, return_assistant_tokens_mask=True, **kwargs
    )
    assert record["tokens"].tolist() == list(out["input_ids"]) and record["mask"].tolist() == list(
      out["assistant_masks"]
    )
  options = levanter_chat_options({"mask_user_turns": False}, f"hf:{tokenizer_dir}")
  assert options.train_on == "all" and options.field == "messages"
  for bad, message in (
    ({"type": "supervised"}, "only Levanter's chat and preference_chat formats"),
    ({"mask_user_turn": True}, "'mask_user_turn' is not a chat format key"),
    ({"mask_user_turns": "no"}, "mask_user_turns: expected true or false"),
    ({"messages_field": 3}, "messages_field: expected a non-empty string"),
  ):
    with pytest.raises(ConfigError, match=re.escape(message)):
      levanter_chat_options(bad, f"hf:{tokenizer_dir}")


def test_levanters_preference_chat_format_converts_each_side_as_transformers_renders_it(tokenizer_dir, tmp_path):
  """`type: preference_chat` with its own field names: a pair a record, each side what transformers'
  apply_chat_template gives for that transcript (ids, and its assistant mask as the side's trained flags)."""
  user = [{"role": "user", "content": "Name a colour."}]
  rows = [
    {
      "good": user + [{"role": "assistant", "content": "Blue."}],
      "bad": user + [{"role": "assistant", "content": "No."}],
    },
    {
      "good": user + [{"role": "assistant", "content": "Red!"}],
      "bad": user + [{"role": "assistant", "content": "?"}],
      "sys": "Be brief.",
    },
  ]
  source = _jsonl(tmp_path / "pairs.jsonl", rows)
  fmt = {
    "type": "preference_chat",
    "chosen_field": "good",
    "rejected_field": "bad",
    "chat_template": CHATML,
    "system_prompt": "sys",
  }
  options = levanter_chat_options(fmt, f"hf:{tokenizer_dir}", workers=1)
  convert([source], str(tmp_path / "pairs"), "pairs", options)
  convert_with_beam([source], str(tmp_path / "beam"), "pairs", options, [])  # Beam's local runner: the same dataset
  with TokenDataset(str(tmp_path / "pairs")) as local, TokenDataset(str(tmp_path / "beam")) as beam:
    assert local.manifest.fingerprint == beam.manifest.fingerprint and local.manifest.holds_pairs
    assert {k: v.tolist() for k, v in local.columns.items()} == {k: v.tolist() for k, v in beam.columns.items()}
  fast = transformers.PreTrainedTokenizerFast.from_pretrained(tokenizer_dir)
  with TokenDataset(str(tmp_path / "pairs")) as dataset:
    got = dataset.read_global(np.arange(len(rows))).to_list()
  for row, pair in zip(rows, got, strict=True):
    system = [{"role": "system", "content": row["sys"]}] if "sys" in row else []
    for side, field in (("chosen", "good"), ("rejected", "bad")):
      out = fast.apply_chat_template(
        system + row[field], chat_template=CHATML, tokenize=True, return_dict=True, return_assistant_tokens_mask=True
      )
      assert pair[side].tolist() == list(out["input_ids"]) and pair[f"{side}_mask"].tolist() == list(
        out["assistant_masks"]
      )
  for bad, message in (
    ({"type": "preference_chat", "mask_user_turns": False}, "mask_user_turns: false would train a pair's prompt"),
    ({"type": "preference_chat", "slice_strategy": "left"}, "slice_strategy: 'left': a pair is never cut"),
    ({"type": "preference_chat", "messages_field": "m"}, "'messages_field' is not a preference_chat format key"),
  ):
    with pytest.raises(ConfigError, match=re.escape(message)):
      levanter_chat_options(bad, f"hf:{tokenizer_dir}")


def test_chat_examples_convert_from_parquet_as_from_jsonl(tokenizer_dir, tmp_path):
  import pyarrow as pa  # noqa: PLC0415 -- the parquet extra, which the test extra installs
  import pyarrow.parquet as pq  # noqa: PLC0415

  rows = [{"messages": m} for m in CONVERSATIONS[:2]] * 5
  pq.write_table(pa.Table.from_pylist(rows), str(tmp_path / "chat.parquet"), row_group_size=3)
  source = _jsonl(tmp_path / "chat.jsonl", rows)
  convert([str(tmp_path / "chat.parquet")], str(tmp_path / "pq"), "c", _options(tokenizer_dir, CHATML, tmp_path))
  convert([source], str(tmp_path / "js"), "c", _options(tokenizer_dir, CHATML, tmp_path))
  assert [(r["tokens"].tolist(), r["mask"].tolist()) for r in _records(str(tmp_path / "pq"))] == [
    (r["tokens"].tolist(), r["mask"].tolist()) for r in _records(str(tmp_path / "js"))
  ]


def test_a_hugging_face_dataset_converts_through_its_parquet_export(tokenizer_dir, tmp_path):
  import datasets  # noqa: PLC0415 -- the test extra installs it; jaxdata never imports it

  rows = [{"messages": m} for m in CONVERSATIONS[:2]] * 3
  datasets.Dataset.from_list(rows).to_parquet(str(tmp_path / "hf.parquet"))
  convert([str(tmp_path / "hf.parquet")], str(tmp_path / "hf"), "hf", _options(tokenizer_dir, CHATML, tmp_path))
  for row, record in zip(rows, _records(str(tmp_path / "hf"))):
    ids, mask = _oracle(tokenizer_dir, CHATML, row["messages"])
    assert record["tokens"].tolist() == ids and record["mask"].tolist() == mask


def test_a_bare_tokenizer_json_with_a_template_file_converts(tokenizer_dir, tmp_path):
  bare = tmp_path / "bare"
  bare.mkdir()
  (bare / "tokenizer.json").write_bytes((open(os.path.join(tokenizer_dir, "tokenizer.json"), "rb")).read())
  source = _jsonl(tmp_path / "c.jsonl", [{"messages": CONVERSATIONS[0]}])
  for spec in (f"hf:{bare}", f"hf:{bare}/tokenizer.json"):  # no tokenizer_config.json: the template from the file
    options = dataclasses.replace(_options(tokenizer_dir, CHATML, tmp_path), tokenizer=TokenizerSpec.parse(spec))
    out = str(tmp_path / f"out{len(spec)}")
    convert([source], out, "c", options)
    ids, mask = _oracle(tokenizer_dir, CHATML, CONVERSATIONS[0])
    assert _records(out)[0]["tokens"].tolist() == ids and _records(out)[0]["mask"].tolist() == mask


def test_convert_says_which_rule_decided_the_trained_tokens(tokenizer_dir, tmp_path, capsys):
  source = _jsonl(tmp_path / "chat.jsonl", [{"messages": CONVERSATIONS[0]}])
  rules = {}
  for name, template in (("blocks", CHATML), ("plain", PLAIN)):
    (tmp_path / f"{name}.jinja").write_text(template)
    argv = ["convert", source, "--format", "chat", "--tokenizer", f"hf:{tokenizer_dir}", "--workers", "1"]
    assert (
      main([*argv, "--chat-template", str(tmp_path / f"{name}.jinja"), "--out", str(tmp_path / name), "--name", name])
      == 0
    )
    with open_dataset(str(tmp_path / name)) as dataset:
      rules[name] = dataset.manifest.stats["mask_rule"]
  assert rules == {"blocks": "generation blocks", "plain": "whole assistant turns"}
  out = capsys.readouterr().out
  assert "trained tokens of plain: whole assistant turns" in " ".join(out.split())
