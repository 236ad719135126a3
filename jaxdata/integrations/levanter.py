"""Levanter's chat dataset format -> `jaxdata convert`'s options: the same examples, the same masks.

Levanter (`levanter.data.text`, `ChatLmDatasetFormat`) reads chat transcripts
with these keys; each maps to one conversion option::

    messages_field        ConvertOptions.field                 (default "messages")
    chat_template         ConvertOptions.chat_template_text    (else the tokenizer's own)
    system_prompt         ConvertOptions.system_prompt_field   (a field whose text goes first, as a system turn)
    chat_template_kwargs  ConvertOptions.template_kwargs_field (a field of template arguments)
    mask_user_turns       train_on: true -> "assistant" (its {% generation %} blocks), false -> "all"
    pack                  read, not a conversion option: packing is the pipeline's (docs/fine-tuning.md)

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
  unknown = sorted(str(k) for k in fmt if k not in LEVANTER_CHAT_KEYS)
  if unknown:
    raise ConfigError(f"levanter format: {unknown[0]!r} is not a chat format key ({', '.join(LEVANTER_CHAT_KEYS)})")
  if fmt.get("type", "chat") != "chat":
    raise ConfigError(
      f"levanter format: type {short(fmt.get('type'))}: only Levanter's chat format converts here "
      "(text: jaxdata convert; supervised: --format prompt-completion)"
    )
  mask_user_turns = fmt.get("mask_user_turns", True)
  if not isinstance(mask_user_turns, bool):
    raise ConfigError(f"levanter format: mask_user_turns: expected true or false, got {short(mask_user_turns)}")
  pack = fmt.get("pack")
  if pack is not None and not isinstance(pack, (bool, int, str)):
    raise ConfigError(f"levanter format: pack: expected true, false, an int or 'pad', got {short(pack)}")
  return ConvertOptions(
    tokenizer=TokenizerSpec.parse(tokenizer),
    examples="chat",
    field=_string(fmt, "messages_field", "messages") or "messages",
    chat_template_text=_string(fmt, "chat_template", None) or "",
    system_prompt_field=_string(fmt, "system_prompt", None) or "",
    template_kwargs_field=_string(fmt, "chat_template_kwargs", "chat_template_kwargs") or "",
    train_on="assistant" if mask_user_turns else "all",
    **options,
  )
