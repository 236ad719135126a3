"""Preference pairs (`jaxdata.conversion.preference`): each side is the fine-tuning path's encoding of its
whole conversation, both sides' prompts are the same tokens, every record shape reads alike, and bad
pairs are refused by file:line. The oracle for a side's mask is the fine-tuning encoder on the same
conversation with only the answer's messages trained (itself held equal to transformers' assistant mask
in tests/test_whole_turns.py)."""

from __future__ import annotations

import numpy as np
import pytest
import transformers
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import chat_families as families
from jaxdata.conversion.examples import ExampleEncoder
from jaxdata.conversion.preference import PreferenceEncoder, pair_record, split_pair
from jaxdata.errors import InputFormatError

WHERE = "pairs.jsonl:7"


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory) -> transformers.PreTrainedTokenizerFast:
  return families.build_tokenizer(str(tmp_path_factory.mktemp("families")))


def encoders(tokenizer, family: str) -> tuple[PreferenceEncoder, ExampleEncoder]:
  sft = ExampleEncoder("chat", tokenizer, "messages", template=families.FAMILIES[family])
  return PreferenceEncoder(sft), sft


def sft_side(sft: ExampleEncoder, prompt: list[dict], answer: list[dict]) -> tuple[list[int], list[int]]:
  """The fine-tuning path's (ids, mask) of the whole conversation, the prompt's assistant turns weighted 0."""
  messages = [{**m, "weight": 0} if m["role"] == "assistant" else m for m in prompt] + answer
  ids, mask = sft.encode({"messages": messages}, WHERE)
  return ids.tolist(), mask.tolist()


PROMPT = [
  {"role": "system", "content": "Be brief."},
  {"role": "user", "content": "Is it sunny?"},
  {"role": "assistant", "content": "Where?"},
  {"role": "user", "content": "Paris."},
]
CHOSEN = [{"role": "assistant", "content": "Yes, it is sunny in Paris."}]
REJECTED = [{"role": "assistant", "content": "No idea."}]


@pytest.mark.parametrize("family", list(families.FAMILIES))
def test_each_side_is_the_fine_tuning_encoding_and_the_prompts_are_the_same_tokens(tokenizer, family):
  pairs, sft = encoders(tokenizer, family)
  example = pairs.encode({"prompt": PROMPT, "chosen": CHOSEN, "rejected": REJECTED}, WHERE)
  assert example.chosen is not None and example.rejected is not None
  for side, answer in ((example.chosen, CHOSEN), (example.rejected, REJECTED)):
    assert (side[0].tolist(), side[1].tolist()) == sft_side(sft, PROMPT, answer)
    assert not side[1][: example.prompt_tokens].any() and side[1][example.prompt_tokens]
  p = example.prompt_tokens
  assert p > 0 and example.chosen[0][:p].tolist() == example.rejected[0][:p].tolist()
  # The implicit prompt (whole conversations that begin alike) reads as the explicit one.
  implicit = pairs.encode({"chosen": PROMPT + CHOSEN, "rejected": PROMPT + REJECTED}, WHERE)
  assert implicit.chosen is not None and implicit.chosen[0].tolist() == example.chosen[0].tolist()
  assert implicit.prompt_tokens == p


contents = st.text(alphabet="ab <>|\n/?!", min_size=1, max_size=10)


@pytest.mark.parametrize("family", list(families.FAMILIES))
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_random_pairs_share_their_prompt_tokens_or_are_refused_naming_the_example(tokenizer, family, data):
  pairs, sft = encoders(tokenizer, family)
  prompt = [{"role": "user", "content": data.draw(contents)}]
  if data.draw(st.booleans()):
    prompt += [{"role": "assistant", "content": data.draw(contents)}, {"role": "user", "content": data.draw(contents)}]
  chosen = [{"role": "assistant", "content": data.draw(contents)}]
  rejected = [{"role": "assistant", "content": data.draw(contents)}]
  record = {"prompt": prompt, "chosen": chosen, "rejected": rejected}
  try:
    example = pairs.encode(record, WHERE)
  except InputFormatError as refused:  # the sides' tokens are the same, or the prompts differ as tokens
    assert str(refused).startswith(WHERE)
    assert "the same tokens" in str(refused) or "prompts differ as tokens" in str(refused)
    return
  assert example.chosen is not None and example.rejected is not None
  p = example.prompt_tokens
  assert example.chosen[0][:p].tolist() == example.rejected[0][:p].tolist()
  assert (example.chosen[0].tolist(), example.chosen[1].tolist()) == sft_side(sft, prompt, chosen)
  assert (example.rejected[0].tolist(), example.rejected[1].tolist()) == sft_side(sft, prompt, rejected)


def test_string_pairs_with_a_template_are_a_user_and_an_assistant_turn(tokenizer):
  pairs, sft = encoders(tokenizer, "chatml")
  example = pairs.encode({"prompt": "Is it sunny?", "chosen": "Yes.", "rejected": "No."}, WHERE)
  expected = sft_side(sft, [{"role": "user", "content": "Is it sunny?"}], [{"role": "assistant", "content": "Yes."}])
  assert example.chosen is not None and (example.chosen[0].tolist(), example.chosen[1].tolist()) == expected


def test_margins_scores_and_kto_labels(tokenizer):
  pairs, _ = encoders(tokenizer, "chatml")
  pair = {"prompt": PROMPT, "chosen": CHOSEN, "rejected": REJECTED}
  assert pairs.encode({**pair, "margin": 1.5}, WHERE).margin == 1.5
  assert pairs.encode({**pair, "score_chosen": 8, "score_rejected": 5.5}, WHERE).margin == 2.5
  assert pairs.encode(pair, WHERE).margin is None
  good = pairs.encode({"prompt": PROMPT, "completion": CHOSEN, "label": True}, WHERE)
  bad = pairs.encode({"prompt": PROMPT, "completion": REJECTED, "label": False}, WHERE)
  assert good.rejected is None and bad.chosen is None and good.prompt_tokens == bad.prompt_tokens > 0


@pytest.mark.parametrize(
  "record, message",
  [
    ({"prompt": PROMPT, "chosen": CHOSEN}, "field 'rejected' is missing"),
    ({"prompt": PROMPT, "chosen": CHOSEN, "rejected": CHOSEN}, "chosen and rejected are the same tokens"),
    ({"chosen": CHOSEN, "rejected": REJECTED}, "share no first message, so no prompt"),
    ({"chosen": PROMPT + CHOSEN, "rejected": PROMPT}, "one side is all prompt"),
    ({"chosen": "Yes.", "rejected": "No."}, "field 'prompt' is missing"),
    ({"prompt": "Hi", "chosen": CHOSEN, "rejected": REJECTED}, "must both be strings or both lists of messages"),
    ({"prompt": PROMPT, "chosen": [{"role": "user", "content": "x"}], "rejected": REJECTED}, "holds no assistant"),
    ({"prompt": PROMPT, "chosen": CHOSEN, "rejected": REJECTED, "margin": "big"}, "margin must be a finite"),
    ({"prompt": PROMPT, "chosen": CHOSEN, "rejected": REJECTED, "score_chosen": 1}, "score_rejected must be"),
    ({"prompt": PROMPT, "completion": CHOSEN, "label": 1}, "label must be true or false"),
    ({"prompt": PROMPT, "label": True}, "field 'completion' is missing"),
    (["not", "an", "object"], "expected an object"),
  ],
)
def test_bad_pairs_are_refused_naming_the_example(tokenizer, record, message):
  pairs, _ = encoders(tokenizer, "chatml")
  with pytest.raises(InputFormatError, match=f"^{WHERE}.*{message}"):
    pairs.encode(record, WHERE)


def test_a_pair_is_one_record_that_splits_back_into_its_sides(tokenizer):
  pairs, _ = encoders(tokenizer, "qwen3")
  example = pairs.encode({"prompt": PROMPT, "chosen": CHOSEN, "rejected": REJECTED}, WHERE)
  ids, marks = pair_record(example)
  assert ids.size == example.chosen[0].size + example.rejected[0].size and set(np.unique(marks)) <= {0, 1, 2, 3}
  chosen, rejected = split_pair(ids, marks)
  for got, want in ((chosen, example.chosen), (rejected, example.rejected)):
    assert got is not None and got[0].tolist() == want[0].tolist() and got[1].tolist() == want[1].tolist()
