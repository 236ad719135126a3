"""Chat templates in the layout of eight model families and ChatML, each with `{% generation %}` blocks
placed as transformers documents them (the role header outside; inside, all the model generates after
it, through the end-of-turn marker), and a byte-level tokenizer that holds their special tokens.

Written for these tests in each family's layout (headers, trimming, where the system prompt goes,
tool calls, an end-of-conversation token, reasoning dropped from earlier turns); `without_blocks`
gives the stock form a user has: the same rendering, no blocks.
"""

from __future__ import annotations

import re
from typing import Any

NL = "{{ '\\n' }}"

# What ChatML-style layouts (ChatML with tools, Qwen3) write after an assistant's content: its tool calls,
# the end of its turn, and the other roles' turns.
_CHATML_REST = (
  "{% for c in m.tool_calls or [] %}" + NL + "<tool_call>" + NL + '{"name": "{{ c.function.name }}", '
  '"arguments": {{ c.function.arguments | tojson }}}' + NL + "</tool_call>{% endfor %}"
  "<|im_end|>{% endgeneration %}" + NL + ""
  "{% elif m.role == 'tool' %}<|im_start|>user" + NL + "<tool_response>" + NL + "{{ m.content }}" + NL + ""
  "</tool_response><|im_end|>" + NL + ""
  "{% else %}<|im_start|>{{ m.role }}" + NL + "{{ m.content }}<|im_end|>" + NL + "{% endif %}{% endfor %}"
  "{% if add_generation_prompt %}<|im_start|>assistant" + NL + "{% endif %}"
)

CHATML = (
  "{% if tools %}<|im_start|>system" + NL + "# Tools{{ tools | tojson }}<|im_end|>" + NL + "{% endif %}"
  "{% for m in messages %}"
  "{% if m.role == 'assistant' %}<|im_start|>assistant" + NL + "{% generation %}"
  "{% if m.content %}{{ m.content }}{% endif %}" + _CHATML_REST
)

# Qwen3's layout: reasoning (in <think>) kept only for assistant turns after the last user query.
QWEN3 = (
  "{% set ns = namespace(last=-1) %}{% for m in messages %}{% if m.role == 'user' %}"
  "{% set ns.last = loop.index0 %}{% endif %}{% endfor %}"
  "{% for m in messages %}"
  "{% if m.role == 'assistant' %}"
  "{% set content = m.content or '' %}{% set reasoning = '' %}"
  "{% if '</think>' in content %}{% set reasoning = content.split('</think>')[0].split('<think>')[-1].strip() %}"
  "{% set content = content.split('</think>')[-1].lstrip() %}{% endif %}"
  "<|im_start|>assistant" + NL + "{% generation %}"
  "{% if loop.index0 > ns.last and (loop.last or reasoning) %}<think>"
  + NL
  + "{{ reasoning }}"
  + NL
  + "</think>"
  + NL
  + NL
  + "{% endif %}{{ content }}"
  + _CHATML_REST
)

LLAMA31 = (
  "<|begin_of_text|>{% for m in messages %}"
  "{% if m.role == 'assistant' %}<|start_header_id|>assistant<|end_header_id|>" + NL + NL + "{% generation %}"
  "{% if m.tool_calls %}{% for c in m.tool_calls %}"
  '{"name": "{{ c.function.name }}", "parameters": {{ c.function.arguments | tojson }}}{% endfor %}'
  "{% else %}{{ m.content | trim }}{% endif %}<|eot_id|>{% endgeneration %}"
  "{% elif m.role in ['tool', 'ipython'] %}<|start_header_id|>ipython<|end_header_id|>" + NL + NL + ""
  "{{ m.content | trim }}<|eot_id|>"
  "{% else %}<|start_header_id|>{{ m.role }}<|end_header_id|>" + NL + NL + "{{ m.content | trim }}<|eot_id|>"
  "{% endif %}{% endfor %}"
  "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>" + NL + NL + "{% endif %}"
)

# Gemma's layout: the assistant is "model", a system prompt goes into the first user turn, trimmed contents.
GEMMA = (
  "<bos>{% if messages[0].role == 'system' %}{% set first = (messages[0].content | trim) + '\\n\\n' %}"
  "{% set turns = messages[1:] %}{% else %}{% set first = '' %}{% set turns = messages %}{% endif %}"
  "{% for m in turns %}"
  "{% if m.role == 'assistant' %}<start_of_turn>model" + NL + "{% generation %}{{ m.content | trim }}"
  "<end_of_turn>{% endgeneration %}" + NL + ""
  "{% else %}<start_of_turn>user" + NL + "{% if loop.first %}{{ first }}{% endif %}{{ m.content | trim }}"
  "<end_of_turn>" + NL + "{% endif %}{% endfor %}"
  "{% if add_generation_prompt %}<start_of_turn>model" + NL + "{% endif %}"
)

# Mistral v3's layout: the system prompt goes late, into the last user message; no generation prompt.
MISTRAL_V3 = (
  "{% if messages[0].role == 'system' %}{% set system = messages[0].content %}{% set turns = messages[1:] %}"
  "{% else %}{% set system = '' %}{% set turns = messages %}{% endif %}"
  "{% set ns = namespace(last=-1) %}{% for m in turns %}{% if m.role == 'user' %}{% set ns.last = loop.index0 %}"
  "{% endif %}{% endfor %}<s>"
  "{% for m in turns %}"
  "{% if m.role == 'user' %}[INST] {% if loop.index0 == ns.last and system %}{{ system }}" + NL + NL + ""
  "{% endif %}{{ m.content }}[/INST]"
  "{% elif m.role == 'assistant' %}{% generation %}{% if m.tool_calls %}[TOOL_CALLS][{% for c in m.tool_calls %}"
  '{"name": "{{ c.function.name }}", "arguments": {{ c.function.arguments | tojson }}}{% endfor %}]'
  "{% else %}{{ m.content }}{% endif %}</s>{% endgeneration %}"
  "{% elif m.role == 'tool' %}[TOOL_RESULTS]{{ m.content }}[/TOOL_RESULTS]{% endif %}{% endfor %}"
)

# Phi-3's layout: <|end|> ends a turn, and the conversation ends with <|endoftext|>.
PHI3 = (
  "{% for m in messages %}<|{{ m.role }}|>" + NL + "{% if m.role == 'assistant' %}{% generation %}"
  "{{ m.content }}<|end|>{% endgeneration %}{% else %}{{ m.content }}<|end|>{% endif %}" + NL + "{% endfor %}"
  "{% if add_generation_prompt %}<|assistant|>" + NL + "{% else %}<|endoftext|>{% endif %}"
)

DEEPSEEK_V3 = (
  "<｜begin▁of▁sentence｜>{% for m in messages if m.role == 'system' %}{{ m.content }}{% endfor %}"
  "{% for m in messages %}"
  "{% if m.role == 'user' %}<｜User｜>{{ m.content }}"
  "{% elif m.role == 'assistant' %}<｜Assistant｜>{% generation %}"
  "{% if m.tool_calls %}<｜tool▁calls▁begin｜>{% for c in m.tool_calls %}<｜tool▁call▁begin｜>function<｜tool▁sep｜>"
  "{{ c.function.name }}" + NL + "```json" + NL + "{{ c.function.arguments }}" + NL + "```<｜tool▁call▁end｜>"
  "{% endfor %}<｜tool▁calls▁end｜>{% else %}{{ m.content }}{% endif %}<｜end▁of▁sentence｜>{% endgeneration %}"
  "{% elif m.role == 'tool' %}<｜tool▁output▁begin｜>{{ m.content }}<｜tool▁output▁end｜>{% endif %}{% endfor %}"
  "{% if add_generation_prompt %}<｜Assistant｜>{% endif %}"
)

COMMAND_R = (
  "<BOS_TOKEN>{% for m in messages %}"
  "{% if m.role == 'assistant' %}<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>{% generation %}{{ m.content }}"
  "<|END_OF_TURN_TOKEN|>{% endgeneration %}"
  "{% elif m.role == 'system' %}<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>{{ m.content }}<|END_OF_TURN_TOKEN|>"
  "{% else %}<|START_OF_TURN_TOKEN|><|USER_TOKEN|>{{ m.content }}<|END_OF_TURN_TOKEN|>{% endif %}{% endfor %}"
  "{% if add_generation_prompt %}<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>{% endif %}"
)

# ChatML with no generation prompt: where a header ends is told only by the content (or a sentinel) after it
CHATML_PLAIN = (
  "{% for m in messages %}<|im_start|>{{ m.role }}" + NL + "{% if m.role == 'assistant' %}{% generation %}"
  "{{ m.content }}<|im_end|>{% endgeneration %}{% else %}{{ m.content }}<|im_end|>{% endif %}" + NL + "{% endfor %}"
)

FAMILIES: dict[str, str] = {
  "chatml": CHATML,
  "chatml-no-prompt": CHATML_PLAIN,
  "qwen3": QWEN3,
  "llama3.1": LLAMA31,
  "gemma": GEMMA,
  "mistral-v3": MISTRAL_V3,
  "phi3": PHI3,
  "deepseek-v3": DEEPSEEK_V3,
  "command-r": COMMAND_R,
}
TOOL_FAMILIES = ("chatml", "qwen3", "llama3.1", "mistral-v3", "deepseek-v3")

SPECIAL_TOKENS = sorted(
  {token for template in FAMILIES.values() for token in re.findall(r"<[|｜][^<>]*?[|｜]>|<bos>|<s>|</s>", template)}
  | {"<start_of_turn>", "<end_of_turn>", "<BOS_TOKEN>", "[INST]", "[/INST]", "[TOOL_CALLS]", "[TOOL_RESULTS]"}
  | {"[/TOOL_RESULTS]", "<|assistant|>", "<|user|>", "<|system|>", "<|tool|>"}
)
# Template text a hostile content may equal (headers, markers, the layout's newlines).
FRAGMENTS = [
  "<|im_start|>",
  "<|im_end|>",
  "assistant",
  "user",
  "\n",
  "model",
  "<end_of_turn>",
  "[/INST]",
  "</s>",
  "<|eot_id|>",
  "<|end|>",
  "<think>",
  "</think>",
]


def without_blocks(template: str) -> str:
  """The template with its {% generation %} tags taken out: the same rendering, no blocks."""
  return re.sub(r"\{%-?\s*(end)?generation\s*-?%\}", "", template)


def build_tokenizer(directory: str) -> Any:
  """A byte-level BPE tokenizer trained on the templates' text, with every special token (saved there)."""
  import transformers  # noqa: PLC0415 -- the chat extra, imported where a test builds the tokenizer
  from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers  # noqa: PLC0415

  corpus = [*FAMILIES.values(), *FRAGMENTS, "the weather in Paris is sunny lookup city answer think"] * 10
  tok = Tokenizer(models.BPE(unk_token="[UNK]"))
  tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
  tok.decoder = decoders.ByteLevel()
  trainer = trainers.BpeTrainer(
    vocab_size=800, special_tokens=["[UNK]", *SPECIAL_TOKENS], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
  )
  tok.train_from_iterator(corpus, trainer)
  fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok)
  fast.save_pretrained(directory)
  return fast
