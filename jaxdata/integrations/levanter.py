"""Levanter's chat and preference_chat formats -> `jaxdata convert`'s options: the same examples, the same masks.

Levanter (`levanter.data.text`, `ChatLmDatasetFormat`) reads chat transcripts
with these keys; each maps to one conversion option::

    messages_field        ConvertOptions.field                 (default "messages")
    chat_template         ConvertOptions.chat_template_text    (else the tokenizer's own)
    system_prompt         ConvertOptions.system_prompt_field   (a field whose text goes first, as a system turn)
    chat_template_kwargs  ConvertOptions.template_kwargs_field (a field of template arguments)
    mask_user_turns       train_on: true -> "assistant" (its {% generation %} blocks), false -> "all"
    pack                  read, not a conversion option: packing is the pipeline's (docs/fine-tuning.md)

Its `preference_chat` format (`type: preference_chat`) holds two transcripts a record:

    chosen_field, rejected_field   ConvertOptions.pair_fields (examples "preference": a pair a record)
    slice_strategy                 "raise" only, as Levanter requires (a pair longer than a row: packing.pairs.too_long)
    mask_user_turns                true only: a pair's prompt never trains

Any other key is refused with its name (`ConfigError`), so a typo cannot leave a
default in force without a word.

>>> options = levanter_chat_options({"type": "chat", "mask_user_turns": False}, "hf:tokenizer")
>>> options.examples, options.field, options.train_on
('chat', 'messages', 'all')
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from jaxdata.config.validate import short
from jaxdata.conversion.options import ConvertOptions
from jaxdata.conversion.tokenizers import TokenizerSpec
from jaxdata.errors import ConfigError

__all__ = ["levanter_chat_options"]

LEVANTER_PREFERENCE_KEYS = (
  "type",
  "chosen_field",
  "rejected_field",
  "chat_template",
  "system_prompt",
  "chat_template_kwargs",
  "pack",
  "mask_user_turns",
  "slice_strategy",
)
LEVANTER_CHAT_KEYS = (
  "type",
  "messages_field",
  "chat_template",
  "system_prompt",
  "chat_template_kwargs",
  "pack",
  "mask_user_turns",
)


def _string(fmt: Mapping[str, Any], key: str, default: str | None) -> str | None:
  value = fmt.get(key, default)
  if value is not None and (not isinstance(value, str) or not value):
    raise ConfigError(f"levanter format: {key}: expected a non-empty string or null, got {short(value)}")
  return value


def levanter_chat_options(fmt: Mapping[str, Any], tokenizer: str, **options: Any) -> ConvertOptions:
  """`ConvertOptions` that convert Levanter's chat examples (`fmt`: its format's keys, e.g. from its YAML
  config's `format:`) with `tokenizer` ("hf:DIR"); `options`: further `ConvertOptions` fields."""
  if not isinstance(fmt, Mapping):
    raise ConfigError(f"levanter format: expected a mapping of its keys, got {short(fmt)}")
  kind = fmt.get("type", "chat")
  if kind not in ("chat", "preference_chat"):
    raise ConfigError(
      f"levanter format: type {short(kind)}: only Levanter's chat and preference_chat formats convert here "
      "(text: jaxdata convert; supervised: --format prompt-completion)"
    )
  keys = LEVANTER_CHAT_KEYS if kind == "chat" else LEVANTER_PREFERENCE_KEYS
  unknown = sorted(str(k) for k in fmt if k not in keys)
  if unknown:
    raise ConfigError(f"levanter format: {unknown[0]!r} is not a {kind} format key ({', '.join(keys)})")
  mask_user_turns = fmt.get("mask_user_turns", True)
  if not isinstance(mask_user_turns, bool):
    raise ConfigError(f"levanter format: mask_user_turns: expected true or false, got {short(mask_user_turns)}")
  pack = fmt.get("pack")
  if pack is not None and not isinstance(pack, (bool, int, str)):
    raise ConfigError(f"levanter format: pack: expected true, false, an int or 'pad', got {short(pack)}")
  if kind == "preference_chat":
    if not mask_user_turns:
      raise ConfigError("levanter format: mask_user_turns: false would train a pair's prompt; DPO trains answers only")
    if fmt.get("slice_strategy", "raise") != "raise":
      raise ConfigError(
        f"levanter format: slice_strategy: {short(fmt.get('slice_strategy'))}: a pair is never cut; "
        "pairs longer than a row are dropped and counted, or refused (packing.pairs.too_long)"
      )
    options["pair_fields"] = (_string(fmt, "chosen_field", "chosen"), _string(fmt, "rejected_field", "rejected"))
  return ConvertOptions(
    tokenizer=TokenizerSpec.parse(tokenizer),
    examples="chat" if kind == "chat" else "preference",
    field=_string(fmt, "messages_field", "messages") or "messages",
    chat_template_text=_string(fmt, "chat_template", None) or "",
    system_prompt_field=_string(fmt, "system_prompt", None) or "",
    template_kwargs_field=_string(fmt, "chat_template_kwargs", "chat_template_kwargs") or "",
    train_on="assistant" if mask_user_turns else "all",
    **options,
  )
