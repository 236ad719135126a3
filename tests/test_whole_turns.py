"""Stock templates (no generation blocks) train each assistant message's whole turn, and only that.

The oracle is transformers' own assistant mask on the same template with `{% generation %}` blocks
placed as its documentation recommends (tests/support/chat_families.py): on every message of
weight 1 the two masks agree, over eight families' layouts and ChatML, for generated contents that
equal template fragments, are whitespace only, repeat across turns, are empty, or are tool calls.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import transformers
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import chat_families as families
from jaxdata.conversion.examples import ExampleEncoder
from jaxdata.errors import InputFormatError


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory) -> transformers.PreTrainedTokenizerFast:
  return families.build_tokenizer(str(tmp_path_factory.mktemp("families")))


def oracle(tokenizer, template: str, messages, tools=None) -> tuple[list[int], list[int]]:
  out = tokenizer.apply_chat_template(
    messages, tools=tools, chat_template=template, tokenize=True, return_dict=True, return_assistant_tokens_mask=True
  )
  return list(out["input_ids"]), list(out["assistant_masks"])


def ours(tokenizer, template: str, messages, tools=None) -> tuple[list[int], list[int]]:
  encoder = ExampleEncoder("chat", tokenizer, "messages", template=families.without_blocks(template))
  assert encoder.mask_rule == "whole assistant turns"
  record = {"messages": messages, **({"tools": tools} if tools else {})}
  ids, mask = encoder.encode(record, "test.jsonl:1")
  return ids.tolist(), mask.tolist()


TOOL_CALL = {"type": "function", "function": {"name": "lookup", "arguments": {"city": "Paris"}}}
TOOLS = [{"type": "function", "function": {"name": "lookup", "parameters": {"city": {"type": "string"}}}}]

contents = st.one_of(
  st.sampled_from(families.FRAGMENTS),  # template text as content
  st.sampled_from(["  ", "\n\n", " \t"]),  # whitespace only
  st.sampled_from(["t", "hello", "It is sunny.", "<think>why</think> because", "a\nb"]),
  st.text(alphabet="ab <>|\n/", min_size=1, max_size=8),
)


@st.composite
def conversations(draw, tools: bool) -> list[dict]:
  messages: list[dict] = []
  if draw(st.booleans()):
    messages.append({"role": "system", "content": draw(contents)})
  repeated = draw(contents)  # one content used on several turns
  for _ in range(draw(st.integers(1, 3))):
    user = repeated if draw(st.booleans()) else draw(contents)
    messages.append({"role": "user", "content": user})
    if tools and draw(st.booleans()):
      # content beside the call: null, empty, or text (which Llama 3.1's layout drops, writing only the call)
      beside = draw(st.one_of(st.none(), st.just(""), contents))
      messages.append({"role": "assistant", "content": beside, "tool_calls": [TOOL_CALL]})
      messages.append({"role": "tool", "content": draw(contents)})
    answer = draw(st.one_of(contents, st.just(repeated), st.just("")))
    messages.append({"role": "assistant", "content": answer})
  return messages


@pytest.mark.parametrize("family", list(families.FAMILIES))
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_whole_turn_masks_equal_the_generation_block_oracle(tokenizer, family, data):
  template = families.FAMILIES[family]
  with_tools = family in families.TOOL_FAMILIES
  messages = data.draw(conversations(with_tools))
  tools = TOOLS if with_tools and family in ("chatml", "qwen3") else None
  expected_ids, expected_mask = oracle(tokenizer, template, messages, tools)
  ids, mask = ours(tokenizer, template, messages, tools)
  assert ids == expected_ids  # the same rendering, tokenized once
  shown = json.dumps(messages)[:400]
  assert mask == expected_mask, f"{family}: {shown}\n{tokenizer.convert_ids_to_tokens(ids)}"


@pytest.mark.parametrize("family", list(families.FAMILIES))
def test_the_end_of_turn_marker_trains_and_the_header_does_not(tokenizer, family):
  messages = [{"role": "user", "content": "question"}, {"role": "assistant", "content": "Q"}]
  ids, mask = ours(tokenizer, families.FAMILIES[family], messages)
  trained = "".join(tokenizer.convert_ids_to_tokens([i for i, m in zip(ids, mask) if m]))
  assert "Q" in trained and not trained.endswith("Q")  # the answer and the marker after it (was: "Q" alone)
  assert not {"assistant", "model", "<|CHATBOT_TOKEN|>", "<|im_start|>"} & set(
    tokenizer.convert_ids_to_tokens([i for i, m in zip(ids, mask) if m])
  )


def test_a_tool_call_only_turn_trains_its_call_and_marker(tokenizer):
  messages = [
    {"role": "user", "content": "weather in Paris"},
    {"role": "assistant", "content": None, "tool_calls": [TOOL_CALL]},
    {"role": "tool", "content": ""},
    {"role": "assistant", "content": "", "weight": 0},
  ]
  for family in ("chatml", "llama3.1", "deepseek-v3"):
    ids, mask = ours(tokenizer, families.FAMILIES[family], messages)
    expected_ids, expected_mask = oracle(tokenizer, families.FAMILIES[family], messages)
    # the oracle trains both assistant turns; ours only the weight-1 one, which it must not lose
    assert sum(mask) > 0 and all(m <= e for m, e in zip(mask, expected_mask))
    assert "lookup" in tokenizer.decode([i for i, m in zip(ids, mask) if m])


def test_a_weight_one_message_that_renders_nothing_is_refused_not_silent(tokenizer):
  # a template that writes nothing for an empty assistant message: no token of it could train
  template = "{% for m in messages %}{% if m.content %}[{{ m.role }}]{{ m.content }}{% endif %}{% endfor %}"
  messages = [{"role": "user", "content": "q"}, {"role": "assistant", "content": ""}]
  encoder = ExampleEncoder("chat", tokenizer, "messages", template=template)
  with pytest.raises(InputFormatError, match=r"x:1: messages\[1\] \(assistant, weight 1\) is absent from the template"):
    encoder.encode({"messages": messages}, "x:1")
  # one that writes the other turns whole but leaves the assistant's out: the user's marker must not train
  dropping = (
    "{% for m in messages %}{% if m.role != 'assistant' %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n"
    "{% endif %}{% endfor %}"
  )
  encoder = ExampleEncoder("chat", tokenizer, "messages", template=dropping)
  with pytest.raises(InputFormatError, match=r"x:1: messages\[1\] \(assistant, weight 1\) is absent from the template"):
    encoder.encode({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}, "x:1")


def test_roles_beyond_the_five_and_content_parts_reach_the_template(tokenizer):
  messages = [
    {"role": "user", "content": [{"type": "text", "text": "weather?"}]},
    {"role": "assistant", "content": None, "tool_calls": [TOOL_CALL]},
    {"role": "ipython", "content": "sunny"},
    {"role": "assistant", "content": [{"type": "text", "text": "It is sunny."}]},
  ]
  template = families.LLAMA31.replace(
    "{{ m.content | trim }}", "{{ m.content if m.content is string else m.content[0].text }}"
  )
  expected_ids, expected_mask = oracle(tokenizer, template, messages)
  ids, mask = ours(tokenizer, template, messages)
  assert ids == expected_ids and mask == expected_mask
  assert "sunny" in tokenizer.decode(ids)


def test_messages_reach_the_template_as_written(tokenizer):
  """No key is added to a message (a template that prints the keys it sees shows them)."""
  template = "{% for m in messages %}{{ m | dictsort | map('first') | join(',') }};{% endfor %}"
  encoder = ExampleEncoder("chat", tokenizer, "messages", template=template, train_on="all")
  ids, _ = encoder.encode({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}, "x")
  assert tokenizer.decode(ids) == "content,role;content,role;"
  assert np.asarray(ids).size


def test_the_parquet_route_gives_the_template_what_the_jsonl_holds(tokenizer, tmp_path):
  """Arrow fills a struct's missing keys with null (a tool message gets `tool_calls: null`); the template
  must see the messages as the user's file holds them, so both routes give the same examples."""
  import pyarrow as pa  # noqa: PLC0415 -- the parquet extra
  import pyarrow.parquet as pq  # noqa: PLC0415

  from jaxdata import open_dataset  # noqa: PLC0415
  from jaxdata.conversion.local_runner import convert  # noqa: PLC0415
  from jaxdata.conversion.options import ConvertOptions  # noqa: PLC0415
  from jaxdata.conversion.tokenizers import TokenizerSpec  # noqa: PLC0415

  template = (  # renders each call's arguments as JSON: a key the file never held would show as null
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{% for c in m.tool_calls or [] %}"
    "{{ c.function.arguments | tojson }}{% endfor %}{{ m.content }}<|im_end|>\n{% endfor %}"
  )
  (tmp_path / "t.jinja").write_text(template)
  other_call = {"type": "function", "function": {"name": "search", "arguments": {"query": "rain"}}}
  rows = [
    {
      "messages": [
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": None, "tool_calls": [TOOL_CALL]},
        {"role": "tool", "content": "sunny"},
        {"role": "assistant", "content": "It is sunny."},
      ]
    },
    {
      "messages": [
        {"role": "user", "content": "rain?"},
        {"role": "assistant", "content": None, "tool_calls": [other_call]},
        {"role": "tool", "content": "none"},
        {"role": "assistant", "content": "No rain."},
      ]
    },
  ]
  (tmp_path / "chat.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
  pq.write_table(pa.Table.from_pylist(rows), str(tmp_path / "chat.parquet"))
  tokenizer.save_pretrained(str(tmp_path / "tok"))
  options = ConvertOptions(
    tokenizer=TokenizerSpec.parse(f"hf:{tmp_path / 'tok'}"),
    examples="chat",
    chat_template=str(tmp_path / "t.jinja"),
    workers=1,
  )
  out = {}
  for suffix in ("jsonl", "parquet"):
    convert([str(tmp_path / f"chat.{suffix}")], str(tmp_path / suffix), "chat", options)
    with open_dataset(str(tmp_path / suffix)) as dataset:
      out[suffix] = [(dataset[i]["tokens"].tolist(), dataset[i]["mask"].tolist()) for i in range(len(dataset))]
  assert out["jsonl"] == out["parquet"]
  assert "null" not in tokenizer.decode(out["parquet"][1][0])  # no key the file did not hold (Arrow: "city": null)


BLOCKS = {  # what transformers' mask accepts: blocks that touch, an empty block, two blocks to a message
  "touching": "{% for m in messages %}<|im_start|>{{ m.role }}\n{% if m.role == 'assistant' %}"
  "{% generation %}{{ m.content }}{% endgeneration %}{% generation %}<|im_end|>{% endgeneration %}"
  "{% else %}{{ m.content }}<|im_end|>{% endif %}\n{% endfor %}",
  "two-per-message": "{% for m in messages %}<|im_start|>{{ m.role }}\n{% if m.role == 'assistant' %}"
  "{% generation %}{{ m.content }}{% endgeneration %}[sep]{% generation %}<|im_end|>{% endgeneration %}"
  "{% else %}{{ m.content }}<|im_end|>{% endif %}\n{% endfor %}",
  "empty": "{% for m in messages %}<|im_start|>{{ m.role }}\n{% if m.role == 'assistant' %}"
  "{% generation %}{% endgeneration %}{{ m.content }}<|im_end|>"
  "{% else %}{{ m.content }}<|im_end|>{% endif %}\n{% endfor %}",
}


@pytest.mark.parametrize("name", list(BLOCKS))
def test_generation_blocks_as_transformers_accepts_them_with_a_message_left_out(tokenizer, name):
  messages = [
    {"role": "user", "content": "q1"},
    {"role": "assistant", "content": "a1", "weight": 0},
    {"role": "user", "content": "q2"},
    {"role": "assistant", "content": "a2"},
  ]
  encoder = ExampleEncoder("chat", tokenizer, "messages", template=BLOCKS[name])
  assert encoder.mask_rule == "generation blocks"
  ids, mask = encoder.encode({"messages": messages}, "x:1")
  expected_ids, every = oracle(tokenizer, BLOCKS[name], messages)
  assert ids.tolist() == expected_ids
  # the oracle marks both answers; only the second trains, and every token the oracle marks of it
  text = tokenizer.apply_chat_template(messages, chat_template=BLOCKS[name], tokenize=False)
  starts = [a for a, _ in tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]]
  cut = next(k for k, a in enumerate(starts) if a >= text.index("q2"))
  assert mask.tolist() == [0] * cut + every[cut:]
  assert (sum(every[cut:]) > 0) == (name != "empty")  # an empty block marks nothing, and trains nothing


TURN = "<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n"
PROMPT = "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
UNUSUAL = {  # what each trained beside the right turn before it was refused
  "reversed": (
    "{% for m in messages|reverse %}" + TURN + "{% endfor %}" + PROMPT,
    r"messages\[\d\] \(assistant, weight 1\): its turn would hold messages\[\d\]'s content .* out of order",
  ),  # every other message
  "system written last": (
    "{% for m in messages %}{% if m.role != 'system' %}" + TURN + "{% endif %}{% endfor %}"
    "{% for m in messages %}{% if m.role == 'system' %}" + TURN + "{% endif %}{% endfor %}" + PROMPT,
    r"messages\[4\] \(assistant, weight 1\): its turn would hold messages\[0\]'s content \(system, an earlier",
  ),  # the system turn after the last answer
  "last answer first": (
    "{% if messages[-1].role == 'assistant' %}<last>{{ messages[-1].content }}</last>\n{% endif %}"
    "{% for m in messages %}" + TURN + "{% endfor %}" + PROMPT,
    r"messages\[4\] \(assistant, weight 1\): the template writes its content more than once",
  ),  # the whole conversation
  "a clock": (
    "{% for m in messages %}<|im_start|>{{ m.role }} {{ strftime_now('%S.%f') }}\n{{ m.content }}<|im_end|>\n"
    "{% endfor %}" + PROMPT,
    r"the template renders the same conversation differently on each call .* character \d+: a clock",
  ),
}
CONVERSATION = [
  {"role": "system", "content": "be nice"},
  {"role": "user", "content": "hello there"},
  {"role": "assistant", "content": "the weather is sunny"},
  {"role": "user", "content": "and Paris"},
  {"role": "assistant", "content": "Paris is sunny"},
]


@pytest.mark.parametrize("name", list(UNUSUAL))
def test_a_template_whose_turns_cannot_be_located_exactly_is_refused_naming_why(tokenizer, name):
  template, message = UNUSUAL[name]
  encoder = ExampleEncoder("chat", tokenizer, "messages", template=template)
  with pytest.raises(InputFormatError, match="^odd.jsonl:1: " + message):
    encoder.encode({"messages": CONVERSATION}, "odd.jsonl:1")


def test_an_end_of_conversation_token_the_template_appends_does_not_train(tokenizer):
  template = (
    "{% for m in messages %}"
    + TURN
    + "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% else %}<|endoftext|>{% endif %}"
  )
  ids, mask = ExampleEncoder("chat", tokenizer, "messages", template=template).encode({"messages": CONVERSATION}, "x:1")
  trained = tokenizer.decode([i for i, m in zip(ids.tolist(), mask.tolist()) if m])
  assert trained == "the weather is sunny<|im_end|>Paris is sunny<|im_end|>"
