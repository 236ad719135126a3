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


def test_without_a_template_string_pairs_join_their_texts_and_conversations_are_refused(tokenizer):
  pairs = PreferenceEncoder(ExampleEncoder("prompt-completion", tokenizer, "messages"))
  example = pairs.encode({"prompt": "Is it sunny? ", "chosen": "Yes.", "rejected": "No."}, WHERE)
  assert example.chosen is not None and example.prompt_tokens > 0
  assert tokenizer.decode(example.chosen[0].tolist()) == "Is it sunny? Yes."
  with pytest.raises(InputFormatError, match=f"^{WHERE}: a conversational pair needs a chat template"):
    pairs.encode({"prompt": PROMPT, "chosen": CHOSEN, "rejected": REJECTED}, WHERE)


def test_a_pair_is_one_record_that_splits_back_into_its_sides(tokenizer):
  pairs, _ = encoders(tokenizer, "qwen3")
  example = pairs.encode({"prompt": PROMPT, "chosen": CHOSEN, "rejected": REJECTED}, WHERE)
  ids, marks = pair_record(example)
  assert ids.size == example.chosen[0].size + example.rejected[0].size and set(np.unique(marks)) <= {0, 1, 2, 3}
  chosen, rejected = split_pair(ids, marks)
  for got, want in ((chosen, example.chosen), (rejected, example.rejected)):
    assert got is not None and got[0].tolist() == want[0].tolist() and got[1].tolist() == want[1].tolist()


def test_jaxdata_convert_writes_a_pair_a_record_and_a_pipeline_refuses_to_pack_them(tokenizer, tmp_path):
  """`--format preference`, JSONL and Parquet: each record is `pair_record` of the pair (read back with
  ArrayRecord's own reader), a bad pair is named and counted, and a Pipeline refuses the dataset."""
  import json  # noqa: PLC0415

  import pyarrow as pa  # noqa: PLC0415 -- the parquet extra
  import pyarrow.parquet as pq  # noqa: PLC0415
  from array_record.python.array_record_module import ArrayRecordReader  # noqa: PLC0415

  from jaxdata import ConfigError, Pipeline, PipelineConfig  # noqa: PLC0415
  from jaxdata.conversion.local_runner import convert  # noqa: PLC0415
  from jaxdata.conversion.options import ConvertOptions  # noqa: PLC0415
  from jaxdata.conversion.tokenizers import TokenizerSpec  # noqa: PLC0415
  from jaxdata.sources.manifest import WITH_PAIR_MARKS  # noqa: PLC0415

  (tmp_path / "t.jinja").write_text(families.CHATML_PLAIN)
  tokenizer.save_pretrained(str(tmp_path / "tok"))
  rows = [
    {"prompt": PROMPT, "chosen": CHOSEN, "rejected": REJECTED},
    {
      "prompt": [{"role": "user", "content": "Rain?"}],
      "chosen": [{"role": "assistant", "content": "None."}],
      "rejected": [{"role": "assistant", "content": "Lots."}],
    },
  ]
  bad = {"prompt": PROMPT, "chosen": CHOSEN}
  (tmp_path / "pairs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in [rows[0], bad, rows[1]]))
  pq.write_table(pa.Table.from_pylist(rows), str(tmp_path / "pairs.parquet"))
  options = ConvertOptions(
    tokenizer=TokenizerSpec.parse(f"hf:{tmp_path / 'tok'}"),
    examples="preference",
    chat_template=str(tmp_path / "t.jinja"),
    skip_invalid=True,
    workers=1,
  )
  encoder = PreferenceEncoder(ExampleEncoder("chat", tokenizer, "messages", template=families.CHATML_PLAIN))
  expected = [pair_record(encoder.encode(r, WHERE)) for r in rows]
  for suffix in ("jsonl", "parquet"):
    manifest = convert([str(tmp_path / f"pairs.{suffix}")], str(tmp_path / suffix), "pairs", options)
    assert manifest.features == WITH_PAIR_MARKS and manifest.holds_pairs
    assert manifest.stats["example_format"] == "preference" and manifest.stats["examples"] == 2
    assert manifest.stats["mask_rule"] == "generation blocks" and len(manifest.stats["chat_template_sha256"]) == 64
    assert manifest.stats["trained_tokens"] == sum(int((marks & 1).sum()) for _, marks in expected)
    assert manifest.stats["pairs"] == 2 and manifest.stats["unpaired_examples"] == 0
    assert manifest.stats["trained_tokens_rejected"] == sum(int((marks == 3).sum()) for _, marks in expected)
    assert manifest.stats["trained_tokens_chosen"] == sum(int((marks == 1).sum()) for _, marks in expected)
    if suffix == "jsonl":
      assert manifest.stats["refused_examples"] == 1 and "pairs.jsonl:2" in manifest.stats["invalid_examples"][0]
    reader = ArrayRecordReader(str(tmp_path / suffix / manifest.shards[0].path))
    records = reader.read_all()
    reader.close()
    itemsize = 2 if manifest.dtype == "uint16" else 4
    for record, (ids, marks) in zip(records, expected, strict=True):
      got_ids = np.frombuffer(record[: ids.size * itemsize], f"<u{itemsize}")
      assert got_ids.tolist() == ids.tolist() and list(record[ids.size * itemsize :]) == marks.tolist()
  cfg = PipelineConfig.from_dict(
    {
      "datasets": [{"name": "pairs", "path": str(tmp_path / "jsonl")}],
      "mixture": {"weights": {"pairs": 1}},
      "packing": {"seq_len": 64},
      "batch": {"global_batch_size": 2},
    }
  )
  with pytest.raises(ConfigError, match="dataset pairs: holds preference pairs"):
    Pipeline(cfg)


def test_levanters_preference_chat_records_convert(tokenizer):
  """Levanter's `preference_chat` format: `chosen` and `rejected` whole transcripts (the prompt implicit), a
  system prompt field and per-example template arguments beside them. Each side is the fine-tuning path's
  encoding of its transcript with the same system prompt and arguments; the prompt is their shared messages."""
  template = families.CHATML_PLAIN.replace("{% for", "{{ greeting | default('') }}{% for", 1)
  options = {"template": template, "system_prompt_field": "system", "template_kwargs_field": "chat_template_kwargs"}
  sft = ExampleEncoder("chat", tokenizer, "messages", **options)
  pairs = PreferenceEncoder(sft)
  user = [{"role": "user", "content": "Is it sunny?"}]
  record = {
    "chosen": user + CHOSEN,
    "rejected": user + REJECTED,
    "system": "Be brief.",
    "chat_template_kwargs": {"greeting": "Hello."},
  }
  example = pairs.encode(record, WHERE)
  assert example.chosen is not None and example.rejected is not None
  for side, answer in ((example.chosen, CHOSEN), (example.rejected, REJECTED)):
    whole = {"messages": user + answer, "system": "Be brief.", "chat_template_kwargs": {"greeting": "Hello."}}
    ids, mask = sft.encode(whole, WHERE)
    assert (side[0].tolist(), side[1].tolist()) == (ids.tolist(), mask.tolist())
    assert tokenizer.decode(side[0].tolist()).startswith("Hello.")
