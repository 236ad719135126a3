"""Preference pairs' loose ends, each closed: an ambiguous record, `train_on` that would train the prompt,
a several-message answer under `train_on="last"`, `tools` passed to the template, TRL's implicit string
shape (Anthropic HH), byte and SentencePiece tokenizers where no template is needed, and which side of
each example a batch holds (KTO examples, one side)."""

from __future__ import annotations

import numpy as np
import pytest
import transformers

import chat_families as families
import real_templates as real
from jaxdata.cli import main
from jaxdata.conversion.examples import ExampleEncoder
from jaxdata.conversion.options import ConvertOptions
from jaxdata.conversion.preference import PreferenceEncoder
from jaxdata.conversion.tokenizers import TokenizerSpec
from jaxdata.errors import InputFormatError
from jaxdata.sources import DatasetWriter
from pipeline_fixtures import sentencepiece_model

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


@pytest.mark.parametrize("layout", ["one_row", "parallel"])
def test_a_batch_says_which_side_of_each_kto_example_it_holds(tokenizer, tmp_path, layout):
  """KTO examples (one side each) beside pairs: `pair_sides` gives the side each holds, which the label
  decided; `sequence_logprobs`' `present` (both sides) is the pairs only."""
  import json  # noqa: PLC0415

  from jaxdata import Pipeline, PipelineConfig, sequence_logprobs  # noqa: PLC0415
  from jaxdata.conversion.local_runner import convert  # noqa: PLC0415
  from jaxdata.pipeline import pair_sides  # noqa: PLC0415

  rows = [
    {"prompt": f"question {i}", "completion": f" answer {i} " * (1 + i % 3), "label": i % 2 == 0} for i in range(12)
  ]
  rows += [{"prompt": f"pair {i}", "chosen": " yes", "rejected": " no no"} for i in range(6)]
  (tmp_path / "mixed.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
  tokenizer.save_pretrained(str(tmp_path / "tok"))
  options = ConvertOptions(tokenizer=TokenizerSpec.parse(f"hf:{tmp_path / 'tok'}"), examples="preference", workers=1)
  convert([str(tmp_path / "mixed.jsonl")], str(tmp_path / "data"), "mixed", options)
  cfg = PipelineConfig.from_dict(
    {
      "datasets": [{"name": "mixed", "path": str(tmp_path / "data")}],
      "mixture": {"weights": {"mixed": 1}},
      "packing": {"mode": "best_fit", "seq_len": 64, "pairs": {"layout": layout}},
      "batch": {"global_batch_size": 2, "drop_remainder": False},
    }
  )
  seen = {"desirable": 0, "undesirable": 0, "pairs": 0}
  with Pipeline(cfg, prefetch=0) as pipe:
    for batch in pipe:
      batch = {k: np.asarray(v) for k, v in batch.items()}
      chosen, rejected = (np.asarray(a) for a in pair_sides(batch, 16))
      logp = (
        {"chosen": np.zeros(batch["chosen_tokens"].shape), "rejected": np.zeros(batch["rejected_tokens"].shape)}
        if layout == "parallel"
        else np.zeros(batch["tokens"].shape)
      )
      present = np.asarray(sequence_logprobs(batch, logp, 16)[2])
      assert (present == (chosen & rejected)).all()
      seen["desirable"] += int((chosen & ~rejected).sum())
      seen["undesirable"] += int((rejected & ~chosen).sum())
      seen["pairs"] += int(present.sum())
  assert seen == {"desirable": 6, "undesirable": 6, "pairs": 6}


@pytest.mark.parametrize("kind", ["byte", "sentencepiece"])
def test_plain_text_pairs_convert_with_byte_and_sentencepiece_tokenizers(tmp_path, kind):
  """MaxText's default tokenizer is a SentencePiece model: string pairs need no template, so any tokenizer
  converts them. Each side is its texts joined and tokenized once; the answer's tokens train, the prompt's
  not, and the two sides share the prompt's tokens."""
  import json  # noqa: PLC0415

  from jaxdata import open_dataset  # noqa: PLC0415
  from jaxdata.conversion.local_runner import convert  # noqa: PLC0415
  from jaxdata.conversion.tokenizers import load_tokenizer  # noqa: PLC0415

  rows = [
    {"prompt": f"Question {i}: is it sunny in Paris?", "chosen": f" Yes, é {i}.", "rejected": " No."} for i in range(20)
  ]
  (tmp_path / "pairs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
  spec = TokenizerSpec("byte")
  if kind == "sentencepiece":
    texts = [r["prompt"] + r["chosen"] + r["rejected"] for r in rows] * 5
    model = sentencepiece_model(texts, str(tmp_path), 60)
    spec = TokenizerSpec("sentencepiece", model)
  convert(
    [str(tmp_path / "pairs.jsonl")],
    str(tmp_path / "data"),
    "pairs",
    ConvertOptions(tokenizer=spec, examples="preference", workers=1),
  )
  tokenizer = load_tokenizer(spec)
  with open_dataset(str(tmp_path / "data")) as dataset:
    assert len(dataset) == 20
    for i, row in enumerate(rows):
      record = dataset[i]
      chosen = (np.asarray(record["chosen"]), np.asarray(record["chosen_mask"]))
      rejected = (np.asarray(record["rejected"]), np.asarray(record["rejected_mask"]))
      for side, answer in ((chosen, row["chosen"]), (rejected, row["rejected"])):
        ids, offsets = tokenizer.encode_with_offsets(row["prompt"] + answer)
        assert side[0].tolist() == ids.tolist()
        expected = [int(end > len(row["prompt"])) for _, end in offsets.tolist()]  # a token overlapping the answer
        assert side[1].tolist() == expected and 0 < sum(expected) < len(expected)
      p = int(np.flatnonzero(chosen[1])[0])
      assert chosen[0][:p].tolist() == rejected[0][:p].tolist()
  with pytest.raises(ValueError, match="with a chat template are rendered and tokenized by a Hugging Face"):
    ConvertOptions(tokenizer=spec, examples="preference", chat_template_text="{{ messages }}")


def test_sentencepiece_pieces_of_no_span_train_with_the_text_they_stand_for(tmp_path):
  """A character NFKC expands (`½` -> `1⁄2`) or that falls back to bytes gives pieces without a span but
  the last: they take the span of the next piece, so an answer starting with one trains whole and a
  pair's prompt stays the same tokens on both sides."""
  from jaxdata.conversion.template_tokenizer import TextOffsetsTokenizer  # noqa: PLC0415
  from jaxdata.conversion.tokenizers import SentencePieceTokenizer  # noqa: PLC0415

  texts = ["Question: café ½ ﬁle 🙂 emoji yes no cup"] * 40 + ["hello world the answer"] * 40
  model = sentencepiece_model(texts, str(tmp_path), 80)
  tokenizer = SentencePieceTokenizer(model)
  ids, offsets = tokenizer.encode_with_offsets("½x")
  assert (offsets[:, 1] > offsets[:, 0]).all()  # every piece has characters
  pairs = PreferenceEncoder(ExampleEncoder("prompt-completion", TextOffsetsTokenizer(tokenizer), "text"))
  example = pairs.encode({"prompt": "Q:", "chosen": "½ cup", "rejected": " no"}, WHERE)
  assert example.chosen is not None
  answer = example.chosen[1][example.prompt_tokens :]
  assert answer.all() and not example.chosen[1][: example.prompt_tokens].any()


@pytest.mark.parametrize(
  ("extra", "message"),
  [
    ({"margin": -0.5}, r"margin -0.5: a margin is how much more the chosen side is preferred"),
    ({"score_chosen": 1, "score_rejected": 3}, r"score_chosen 1 below score_rejected 3"),
  ],
)
def test_a_margin_that_prefers_the_rejected_side_is_refused(tokenizer, extra, message):
  pairs = PreferenceEncoder(ExampleEncoder("prompt-completion", tokenizer, "text"))
  record = {"prompt": "q", "chosen": " yes", "rejected": " no"}
  with pytest.raises(InputFormatError, match=f"pairs.jsonl:3: {message}"):
    pairs.encode({**record, **extra}, WHERE)
  assert pairs.encode({**record, "margin": 0}, WHERE).margin == 0.0


@pytest.mark.parametrize("bad", [0, -3, 2.5, True])
def test_max_pairs_must_be_a_positive_count(bad):
  from jaxdata import sequence_logprobs  # noqa: PLC0415
  from jaxdata.pipeline import pair_references, pair_sides  # noqa: PLC0415

  batch = {"pair_ids": np.array([[1, 1]]), "pair_side": np.array([[0, 1]]), "loss_mask": np.array([[1, 1]])}
  for call in (
    lambda: sequence_logprobs(batch, np.zeros((1, 2)), bad),
    lambda: pair_sides(batch, bad),
    lambda: pair_references({**batch, "ref_logp": np.zeros((1, 2))}, bad),
  ):
    with pytest.raises(ValueError, match=f"max_pairs: {bad!r}; give the most pairs a row can hold"):
      call()


def test_field_is_refused_for_pairs_on_the_command_line(tmp_path, capsys):
  from jaxdata.cli import main  # noqa: PLC0415

  (tmp_path / "p.jsonl").write_text('{"prompt": "q", "chosen": " yes", "rejected": " no"}\n')
  argv = ["convert", str(tmp_path / "p.jsonl"), "--format", "preference", "--out", str(tmp_path / "o"), "-q"]
  argv += ["--name", "p"]
  assert main([*argv, "--field", "pair"]) != 0
  assert "--field pair: preference records are read from their prompt, chosen and rejected" in " ".join(
    capsys.readouterr().err.split()
  )
  assert main(argv) == 0  # the byte tokenizer converts plain-text pairs


@pytest.mark.parametrize("record", [{"prompt": "q", "chosen": "a", "rejected": None}, {"prompt": "q", "chosen": "a"}])
def test_a_pair_record_with_one_side_is_refused_naming_the_side(tokenizer, record):
  # A null side was read as a conversation and refused for wanting a chat template.
  pairs = PreferenceEncoder(ExampleEncoder("chat", tokenizer, "messages", template=families.CHATML))
  state = "is null" if "rejected" in record else "is missing"
  with pytest.raises(InputFormatError, match=rf"pairs.jsonl:3: field 'rejected' {state} .* a KTO example"):
    pairs.encode(record, WHERE)


def test_inspect_counts_the_one_sided_records_of_a_set_written_by_hand(tmp_path, capsys):
  # DatasetWriter(pairs=True) takes a record with one side: a KTO example. inspect says how many there are
  # (it said "2 preference records": a DPO set with a side left out looked whole).
  writer = DatasetWriter(str(tmp_path / "p"), "p", np.dtype("<u2"), {"kind": "byte"}, masks=True, pairs=True)
  writer.write_documents(
    np.array([5, 6, 7, 5, 8, 9, 5, 6]), np.array([5, 3]), np.array([0, 1, 1, 2, 3, 0, 1, 1], np.uint8)
  )
  writer.finish()
  assert main(["inspect", str(tmp_path / "p")]) == 0
  assert "p: 1 preference pairs and 1 one-sided (KTO) examples, 0 refused" in capsys.readouterr().out
