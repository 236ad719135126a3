"""Fine-tuning examples -> token ids and their trained-token mask, decided from one whole rendering.

::

    {"messages": [...]}           render the whole conversation once with the chat template
      |                           (the tokenizer's, or --chat-template FILE.jinja)
      v
    text  --tokenize once-->  ids, character offsets
      |
      +-- the template marks {% generation %} blocks:  mask = transformers' assistant mask
      +-- it does not:  each trained assistant message's whole turn (`jaxdata.conversion.turns`:
                        content, tool calls, end-of-turn marker; never the header), located by
                        a rendering with sentinel contents, not by searching for the content;
                        a token is trained iff its characters overlap a trained character range

    {"prompt": p, "completion": c}  p + c (with --chat-template, a user and an assistant turn): c trains
    {"input_ids": [...], "labels" | "mask": [...]}  as given: labels of -100 (Hugging Face trainers'
                                    ignore index) or mask 0 do not train

The straddling rule ("overlaps a trained character range") is transformers' own: its assistant mask
marks every token from the one holding a block's first character to the one holding its last. What
trains: `train_on` "assistant" (every assistant message whose `weight` is not 0, OpenAI's fine-tuning
files' per-message weight), "last" (the last assistant message) or "all". Masks never come from token
values (a pad or EOS id also occurs in content) or from turn-by-turn renderings (templates rewrite
earlier turns). Messages reach the template as the record holds them (no key added; roles beyond the
five, e.g. Llama's `ipython`, and content as a list of parts are the template's to take).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from typing import Any, Literal, get_args

import numpy as np

from jaxdata.conversion.example_fields import (
  Example,
  checked_messages,
  given_ids,
  pretokenized,
  trained_messages,
)
from jaxdata.conversion.sentinels import Render, end_of_turn_text
from jaxdata.conversion.template_tokenizer import TextOffsetsTokenizer, check_parses, default_template, fast_tokenizer
from jaxdata.conversion.tokenizers import TokenizerSpec, load_tokenizer
from jaxdata.conversion.turns import assistant_turns
from jaxdata.errors import InputFormatError

__all__ = [
  "EXAMPLE_FORMATS",
  "MaskRule",
  "TRAIN_ON",
  "ExampleEncoder",
  "character_range_mask",
  "example_encoder",
]

ExampleFormat = Literal["text", "chat", "prompt-completion", "preference", "vision"]
TrainOn = Literal["assistant", "last", "all"]
EXAMPLE_FORMATS: tuple[ExampleFormat, ...] = get_args(ExampleFormat)
TRAIN_ON: tuple[TrainOn, ...] = get_args(TrainOn)
MaskRule = Literal["generation blocks", "whole assistant turns"]
MASK_RULES: tuple[MaskRule, ...] = get_args(MaskRule)
GENERATION_BLOCK = re.compile(r"\{%-?\s*generation\s*-?%\}")  # a template that marks what the assistant generates


def character_range_mask(offsets: np.ndarray, ranges: Sequence[tuple[int, int]]) -> np.ndarray:
  """1 for every token whose characters [start, end) overlap a character range [a, b), else 0; a token of
  no characters (offsets trimmed of a space, `trim_offsets=True`) when it lies strictly inside one. This is
  transformers' own rule for its assistant mask.

  >>> character_range_mask(np.array([[0, 3], [3, 5], [5, 9]]), [(4, 6)]).tolist()
  [0, 1, 1]
  >>> character_range_mask(np.array([[0, 3], [4, 4], [4, 9]]), [(4, 9)]).tolist()  # the trimmed space: not
  [0, 0, 1]
  """
  mask = np.zeros(len(offsets), np.uint8)
  if not len(offsets):
    return mask
  start, end = offsets[:, 0], offsets[:, 1]
  empty = end <= start
  for a, b in ranges:
    mask |= np.where(empty, (start > a) & (start < b), (start < b) & (end > a)).astype(np.uint8)
  return mask


@dataclasses.dataclass(frozen=True)
class ExampleEncoder:
  """Encodes one record of `kind` ("chat" or "prompt-completion"), or a pre-tokenized record, into
  (ids, mask); an `InputFormatError` names `where` (file:line) for anything it cannot take."""

  kind: Literal["chat", "prompt-completion"]
  tokenizer: Any  # a transformers fast tokenizer
  field: str
  train_on: TrainOn = "assistant"
  template: str | None = None
  system_prompt_field: str = ""  # a record field whose text goes first, as a system message (Levanter's)
  template_kwargs_field: str = ""  # a record field of keyword arguments for the template (Levanter's)
  max_tokens: int = 0  # > 0: an example of more tokens is refused (the rows' seq_len); 0: any length

  def encode(self, record: Mapping[str, Any], where: str) -> Example:
    return self._within_limit(*self._encoded(record, where), where)

  def encode_messages(
    self, messages: list[Any], weights: list[int], where: str, kwargs: Mapping[str, Any] | None = None
  ) -> Example:
    """A conversation whose messages train only where `weights` says 1 (and their own `weight` allows):
    one side of a preference pair, whose prompt messages never train. `kwargs`: the template's arguments
    (`tools` among them: the tool definitions the template renders)."""
    own = checked_messages(messages, where)
    trained = [a & b for a, b in zip(weights, own)]
    arguments = dict(kwargs or {})
    tools = arguments.pop("tools", None)
    return self._within_limit(*self._chat(messages, trained, tools, where, arguments), where)

  def record_context(self, record: Mapping[str, Any], where: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """(system messages to put first, template arguments) a record gives through `system_prompt_field`
    and `template_kwargs_field` (Levanter's fields), checked."""
    system = record.get(self.system_prompt_field) if self.system_prompt_field else None
    if system is not None and not isinstance(system, str):
      raise InputFormatError(f"{where}: field {self.system_prompt_field!r} must be a string (the system prompt)")
    kwargs = record.get(self.template_kwargs_field) if self.template_kwargs_field else None
    if kwargs is not None and not isinstance(kwargs, dict):
      raise InputFormatError(f"{where}: field {self.template_kwargs_field!r} must be an object of template arguments")
    return ([{"role": "system", "content": system}] if system is not None else []), kwargs or {}

  def tokenized(self, text: str) -> tuple[np.ndarray, np.ndarray]:
    """(ids, character offsets) of `text`, tokenized once, without special tokens added."""
    return self._tokenized(text)

  def _within_limit(self, ids: np.ndarray, mask: np.ndarray, where: str) -> Example:
    if self.max_tokens and ids.size > self.max_tokens:
      raise InputFormatError(
        f"{where}: the example holds {ids.size} tokens, more than the {self.max_tokens} allowed "
        "(max_example_tokens, --max-tokens: a row's seq_len; packing would drop, truncate or split it)"
      )
    return ids, mask

  def _encoded(self, record: Mapping[str, Any], where: str) -> Example:
    if not isinstance(record, Mapping):
      raise InputFormatError(f"{where}: expected an object, got {type(record).__name__}")
    if pretokenized(record):
      return given_ids(record, where, len(self.tokenizer) if self.tokenizer is not None else None)
    if self.kind == "prompt-completion":
      return self._prompt_completion(record, where)
    messages, weights, kwargs = self._conversation(record, where)
    return self._chat(messages, weights, record.get("tools"), where, kwargs)

  def _conversation(
    self, record: Mapping[str, Any], where: str
  ) -> tuple[list[dict[str, Any]], list[int], dict[str, Any]]:
    """(messages with the record's system prompt first, their weights, template arguments) of a chat record."""
    messages = record.get(self.field)
    if not isinstance(messages, list):
      shown = "missing" if self.field not in record else f"{type(messages).__name__}, not a list"
      raise InputFormatError(f"{where}: field {self.field!r} is {shown} (a chat example holds a list of messages)")
    weights = checked_messages(messages, where)
    system, kwargs = self.record_context(record, where)
    return [*system, *messages], [0] * len(system) + weights, kwargs

  def chat_encoding(self, record: Mapping[str, Any], where: str) -> tuple[str, np.ndarray, np.ndarray]:
    """(the rendering, its tokens' character offsets, their trained-token mask) of a chat record: what
    `encode` gives, with the text it tokenized (rendered and tokenized once)."""
    messages, weights, kwargs = self._conversation(record, where)
    text, _, offsets, mask = self._chat_encoding(messages, weights, record.get("tools"), where, kwargs)
    return text, offsets, mask

  def _prompt_completion(self, record: Mapping[str, Any], where: str) -> Example:
    for name in ("prompt", "completion"):
      if not isinstance(record.get(name), str):
        shown = "missing" if name not in record else type(record[name]).__name__
        raise InputFormatError(f"{where}: field {name!r} is {shown}, not a string")
    prompt, completion = str(record["prompt"]), str(record["completion"])
    if not completion:
      raise InputFormatError(f"{where}: an empty completion trains nothing")
    if self.template is not None:  # --chat-template: a user and an assistant turn; else the two texts joined
      messages = [{"role": "user", "content": prompt}, {"role": "assistant", "content": completion}]
      return self._chat(messages, [0, 1], None, where)
    text = prompt + completion
    ids, offsets = self._tokenized(text)
    return ids, character_range_mask(offsets, [(len(prompt), len(text))])

  @property
  def mask_rule(self) -> MaskRule:
    """Which rule decides the trained tokens: the template's generation blocks, or whole turns."""
    return (
      "generation blocks"
      if GENERATION_BLOCK.search(self.template or self.tokenizer.chat_template or "")
      else ("whole assistant turns")
    )

  def end_of_turn_id(self) -> int | None:
    """The id of the single token the template writes after an assistant message, if it is one."""
    if self.kind != "chat":
      return None
    marker = end_of_turn_text(self._renderer(None, "a probe conversation", {}))
    ids = self.tokenizer(marker, add_special_tokens=False)["input_ids"] if marker else []
    return int(ids[0]) if len(ids) == 1 else None

  def _renderer(self, tools: Any, where: str, kwargs: Mapping[str, Any]) -> Render:
    """The template as a function of (messages, add_generation_prompt); its errors name `where`."""

    def render(conversation: list[dict[str, Any]], generation_prompt: bool) -> str:
      try:
        return str(
          self.tokenizer.apply_chat_template(
            conversation,
            tools=tools,
            tokenize=False,
            chat_template=self.template,
            add_generation_prompt=generation_prompt,
            **kwargs,
          )
        )
      except Exception as e:  # a template raises whatever its author wrote (jinja, raise_exception)
        raise InputFormatError(f"{where}: the chat template failed: {type(e).__name__}: {str(e)[:200]}") from e

    return render

  def _default_renderer(self, tools: Any, kwargs: Mapping[str, Any]) -> Render | None:
    """The template without the record's arguments (None when it has none): whole turns look for its
    generation prompt's header too (a `enable_thinking=False` prompt ends inside the turn's reasoning)."""
    return self._renderer(tools, "the template without the record's arguments", {}) if kwargs else None

  def _chat(
    self,
    messages: list[dict[str, Any]],
    weights: list[int],
    tools: Any,
    where: str,
    kwargs: Mapping[str, Any] | None = None,
  ) -> Example:
    _, ids, _, mask = self._chat_encoding(messages, weights, tools, where, kwargs)
    return ids, mask

  def _chat_encoding(
    self,
    messages: list[dict[str, Any]],
    weights: list[int],
    tools: Any,
    where: str,
    kwargs: Mapping[str, Any] | None = None,
  ) -> tuple[str, np.ndarray, np.ndarray, np.ndarray]:
    """(the rendering, its ids, their character offsets, the trained-token mask) of a conversation."""
    kwargs = kwargs or {}
    trained = trained_messages(messages, weights, self.train_on)
    if not trained:
      raise InputFormatError(f"{where}: no assistant message trains (train_on {self.train_on!r}, weights)")

    render = self._renderer(tools, where, kwargs)
    text = render(messages, False)
    try:
      text.encode("utf-8")
    except UnicodeEncodeError as e:
      raise InputFormatError(
        f"{where}: the conversation holds a lone surrogate ({text[e.start : e.end]!r}, a \\uD800-\\uDFFF escape), "
        "not text"
      ) from e
    ids, offsets = self._tokenized(text)
    if self.train_on == "all":
      return text, ids, offsets, np.ones(ids.size, np.uint8)
    if self.mask_rule == "generation blocks":
      return text, ids, offsets, self._generation_mask(messages, tools, ids, offsets, trained, where, kwargs=kwargs)
    turns = assistant_turns(
      messages, trained, render, where, offsets.tolist(), self._default_renderer(tools, kwargs), rendered=text
    )
    return text, ids, offsets, character_range_mask(offsets, turns)

  def _generation_mask(
    self,
    messages: list[dict[str, Any]],
    tools: Any,
    ids: np.ndarray,
    offsets: np.ndarray,
    trained: set[int],
    where: str,
    *,
    kwargs: Mapping[str, Any],
  ) -> np.ndarray:
    """transformers' assistant mask; where some assistant message does not train, only the marked tokens
    inside the whole turns of those that do (blocks may touch, be empty, or be several to a message)."""
    out = self.tokenizer.apply_chat_template(
      messages,
      tools=tools,
      tokenize=True,
      return_dict=True,
      return_assistant_tokens_mask=True,
      chat_template=self.template,
      add_generation_prompt=False,
      **kwargs,
    )
    if list(out["input_ids"]) != ids.tolist():
      raise InputFormatError(f"{where}: the template's tokenized rendering differs from its text tokenized once")
    mask = np.asarray(out["assistant_masks"], np.uint8)
    assistants = {i for i, m in enumerate(messages) if m["role"] == "assistant"}
    if assistants <= trained or not mask.any():
      return mask
    # Which message a marked token belongs to: the trained messages' whole turns, located in the rendering.
    text_mask = character_range_mask(
      offsets,
      assistant_turns(
        messages,
        trained & assistants,
        self._renderer(tools, where, kwargs),
        where,
        offsets.tolist(),
        self._default_renderer(tools, kwargs),
      ),
    )
    return mask & text_mask

  def _tokenized(self, text: str) -> tuple[np.ndarray, np.ndarray]:
    encoding = self.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    return np.asarray(encoding["input_ids"], np.int64), np.asarray(encoding["offset_mapping"], np.int64).reshape(-1, 2)


def example_encoder(
  kind: str,
  tokenizer_path: str,
  field: str,
  train_on: TrainOn,
  template_file: str | None,
  template_text: str = "",
  *,
  system_prompt_field: str = "",
  template_kwargs_field: str = "",
  max_tokens: int = 0,
  tokenizer_kind: str = "huggingface",
) -> ExampleEncoder:
  """The encoder of `jaxdata convert --format chat | prompt-completion | preference` (preference: each side
  renders as chat where there is a template, else as the prompt and answer texts joined). A byte-level or
  SentencePiece tokenizer (`tokenizer_kind`) takes the formats that need no template."""
  if tokenizer_kind != "huggingface":
    if kind == "chat" or template_file or template_text:
      raise InputFormatError(
        f"--tokenizer: a chat template renders with a Hugging Face tokenizer (hf:DIR); a {tokenizer_kind} "
        "tokenizer takes prompt-completion examples and preference pairs of plain text"
      )
    spec = TokenizerSpec(tokenizer_kind, tokenizer_path or None)
    return ExampleEncoder(
      "prompt-completion", TextOffsetsTokenizer(load_tokenizer(spec)), field, train_on, max_tokens=max_tokens
    )
  template = template_text or None
  if template_file:
    try:
      with open(template_file, encoding="utf-8") as f:
        template = f.read()
    except OSError as e:
      raise InputFormatError(f"--chat-template {template_file}: cannot be read ({e.strerror})") from e
    except UnicodeDecodeError as e:
      raise InputFormatError(f"--chat-template {template_file}: not UTF-8 text (byte {e.start}: {e.reason})") from e
    if not template.strip():
      raise InputFormatError(f"--chat-template {template_file}: is empty")
  tokenizer = fast_tokenizer(tokenizer_path)
  if kind in ("chat", "preference") and template is None:
    template = default_template(tokenizer, tokenizer_path)
  if kind == "preference":
    kind = "chat" if template is not None or getattr(tokenizer, "chat_template", None) else "prompt-completion"
  if kind == "chat" and template is None and not getattr(tokenizer, "chat_template", None):
    raise InputFormatError(
      f"--tokenizer {tokenizer_path}: has no chat template (tokenizer_config.json or chat_template.jinja); "
      "give one with --chat-template FILE.jinja"
    )
  if kind == "chat":
    check_parses(tokenizer, template, template_file or tokenizer_path)
  return ExampleEncoder(
    kind,  # type: ignore[arg-type]
    tokenizer,
    field,
    train_on,
    template,
    system_prompt_field,
    template_kwargs_field,
    max_tokens,
  )
