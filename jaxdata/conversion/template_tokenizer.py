"""The tokenizer a chat template is rendered and tokenized with: transformers' fast tokenizer of a
directory (its config read as JSON first, so a damaged one is named), the template it names, checked to
parse once; or a byte-level / SentencePiece tokenizer called as a transformers one."""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

from jaxdata.errors import InputFormatError, optional_module

__all__ = ["TextOffsetsTokenizer", "check_parses", "default_template", "fast_tokenizer"]


@dataclasses.dataclass(frozen=True)
class TextOffsetsTokenizer:
  """A byte-level or SentencePiece tokenizer (`encode_with_offsets`) called as the examples' path calls a
  transformers one: ids and character offsets, no special tokens added, no chat template."""

  tokenizer: Any
  chat_template: None = None

  def __call__(self, text: str, add_special_tokens: bool = False, return_offsets_mapping: bool = True) -> dict:
    ids, offsets = self.tokenizer.encode_with_offsets(text)
    return {"input_ids": ids.tolist(), "offset_mapping": offsets.tolist()}

  def __len__(self) -> int:
    return int(self.tokenizer.vocab_size)


def fast_tokenizer(path: str) -> Any:
  """transformers' fast tokenizer of `path`: a tokenizer directory, or a tokenizer.json (its directory)."""
  os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")  # its import says "PyTorch was not found": not needed here
  transformers = optional_module("transformers", "chat", "chat and prompt-completion conversion")
  directory = path if os.path.isdir(path) else os.path.dirname(path) or "."
  config = os.path.join(directory, "tokenizer_config.json")
  if os.path.isfile(config):
    try:
      with open(config, encoding="utf-8") as f:
        json.load(f)
    except (ValueError, OSError) as e:  # transformers would raise its parser's error without the file's name
      raise InputFormatError(f"--tokenizer {config}: not a JSON file ({str(e)[:200]})") from e
    return transformers.PreTrainedTokenizerFast.from_pretrained(directory)
  return transformers.PreTrainedTokenizerFast(
    tokenizer_file=path if os.path.isfile(path) else os.path.join(path, "tokenizer.json")
  )


def default_template(tokenizer: Any, tokenizer_path: str) -> str | None:
  """The tokenizer's template when it names several (a list in tokenizer_config.json, which transformers
  allows): its "default", as transformers picks; none of that name is an error listing the names."""
  templates = getattr(tokenizer, "chat_template", None)
  if not isinstance(templates, dict):
    return None
  if isinstance(templates.get("default"), str):
    return str(templates["default"])
  raise InputFormatError(
    f"--tokenizer {tokenizer_path}: has named chat templates ({', '.join(map(str, templates))}) and none named "
    "'default'; give the one to use with --chat-template FILE.jinja"
  )


def check_parses(tokenizer: Any, template: str | None, where: str) -> None:
  """A template that does not parse is one error before any example (not one per example, which
  --skip-invalid would count and leave an empty dataset)."""
  jinja2 = optional_module("jinja2", "chat", "chat templates")
  probe = [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]
  try:
    tokenizer.apply_chat_template(probe, chat_template=template, tokenize=False)
  except jinja2.TemplateSyntaxError as e:
    raise InputFormatError(f"{where}: the chat template does not parse (line {e.lineno}: {e.message})") from e
  except Exception:  # noqa: BLE001 -- a template may refuse this probe conversation (its own checks): it parsed
    return
