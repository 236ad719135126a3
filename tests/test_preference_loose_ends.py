"""Preference pairs' loose ends, each closed: an ambiguous record, `train_on` that would train the prompt,
a several-message answer under `train_on="last"`, `tools` passed to the template, TRL's implicit string
shape (Anthropic HH), byte and SentencePiece tokenizers where no template is needed, and which side of
each example a batch holds (KTO examples, one side)."""

from __future__ import annotations

import pytest
import transformers

import chat_families as families
import real_templates as real
from jaxdata.conversion.examples import ExampleEncoder
from jaxdata.conversion.options import ConvertOptions
from jaxdata.conversion.preference import PreferenceEncoder
from jaxdata.conversion.tokenizers import TokenizerSpec
from jaxdata.errors import InputFormatError

WHERE = "pairs.jsonl:3"


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory) -> transformers.PreTrainedTokenizerFast:
  return families.build_tokenizer(str(tmp_path_factory.mktemp("families")))


def test_a_record_with_a_label_and_a_pair_is_refused_not_stored_as_kto(tokenizer):
  pairs = PreferenceEncoder(ExampleEncoder("chat", tokenizer, "messages", template=families.CHATML))
  record = {"prompt": "q", "completion": "a", "label": True, "chosen": "yes", "rejected": "no"}
  with pytest.raises(InputFormatError, match=r"pairs.jsonl:3: holds 'label' .* and 'chosen' and 'rejected'"):
    pairs.encode(record, WHERE)


def test_train_on_all_is_refused_for_pairs(tokenizer):
  with pytest.raises(ValueError, match="train_on: 'all' would train"):
    PreferenceEncoder(ExampleEncoder("chat", tokenizer, "messages", train_on="all", template=families.CHATML))
  with pytest.raises(ValueError, match="train_on: 'all' would train a preference pair's prompt"):
    ConvertOptions(tokenizer=TokenizerSpec("huggingface", "t.json"), examples="preference", train_on="all")
  ConvertOptions(tokenizer=TokenizerSpec("huggingface", "t.json"), examples="chat", train_on="all")  # chat: allowed


def test_train_on_last_with_a_two_message_answer_names_the_cause(tokenizer):
  pairs = PreferenceEncoder(ExampleEncoder("chat", tokenizer, "messages", train_on="last", template=families.CHATML))
  record = {
    "prompt": [{"role": "user", "content": "weather?"}],
    "chosen": [{"role": "assistant", "content": "Let me see."}, {"role": "assistant", "content": "Sunny."}],
    "rejected": [{"role": "assistant", "content": "No idea."}],
  }
  with pytest.raises(InputFormatError, match=r"chosen's answer holds several assistant messages.*train_on 'last'"):
    pairs.encode(record, WHERE)
  one = {**record, "chosen": record["chosen"][1:]}  # one message a side: train_on last is fine
  assert pairs.encode(one, WHERE).chosen is not None


def test_a_pairs_tools_reach_the_template_as_the_chat_format_passes_them(tmp_path):
  tokenizer = real.for_family(real.build_tokenizers(str(tmp_path))["byte-level"], real.QWEN25)
  template = real.published(real.QWEN25)
  tools = [{"type": "function", "function": {"name": "lookup", "description": "weather", "parameters": {}}}]
  call = {"type": "function", "function": {"name": "lookup", "arguments": {"city": "Paris"}}}
  record = {
    "prompt": [{"role": "user", "content": "weather in Paris?"}],
    "chosen": [{"role": "assistant", "content": None, "tool_calls": [call]}],
    "rejected": [{"role": "assistant", "content": "I cannot know."}],
    "tools": tools,
  }
  example = PreferenceEncoder(ExampleEncoder("chat", tokenizer, "messages", template=template)).encode(record, WHERE)
  chat = ExampleEncoder("chat", tokenizer, "messages", template=template)
  ids, mask = chat.encode({"messages": record["prompt"] + record["chosen"], "tools": tools}, WHERE)
  assert example.chosen is not None
  assert (example.chosen[0].tolist(), example.chosen[1].tolist()) == (ids.tolist(), mask.tolist())
  assert '"description": "weather"' in tokenizer.decode(example.chosen[0][: example.prompt_tokens].tolist())
  with pytest.raises(InputFormatError, match="field 'tools' must be a list"):
    PreferenceEncoder(chat).encode({**record, "tools": "lookup"}, WHERE)


def test_trl_implicit_string_pairs_split_at_the_shared_prefix(tokenizer):
  """Anthropic HH's shape: whole texts; the prompt is their common prefix less a trailing space, as TRL's
  `extract_prompt` splits them, so the pair is the explicit one."""
  pairs = PreferenceEncoder(ExampleEncoder("prompt-completion", tokenizer, "text"))
  chosen = "\n\nHuman: Is it sunny?\n\nAssistant: Yes, very."
  rejected = "\n\nHuman: Is it sunny?\n\nAssistant: No."
  implicit = pairs.encode({"chosen": chosen, "rejected": rejected}, WHERE)
  explicit = pairs.encode(
    {"prompt": "\n\nHuman: Is it sunny?\n\nAssistant:", "chosen": " Yes, very.", "rejected": " No."}, WHERE
  )
  for a, b in ((implicit.chosen, explicit.chosen), (implicit.rejected, explicit.rejected)):
    assert a is not None and b is not None
    assert a[0].tolist() == b[0].tolist() and a[1].tolist() == b[1].tolist()
  assert implicit.prompt_tokens == explicit.prompt_tokens
  with pytest.raises(InputFormatError, match="field .prompt. is missing, and chosen and rejected share no text"):
    pairs.encode({"chosen": "yes", "rejected": "no"}, WHERE)
  with pytest.raises(InputFormatError, match="all prompt"):
    pairs.encode({"chosen": "same text", "rejected": "same text more"}, WHERE)
