"""What a fine-tuning record's fields say before any template: ids and labels given as they are, the
messages checked (roles, content, a per-message `weight` of 0 or 1) and which of them train."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from jaxdata.errors import InputFormatError

__all__ = [
  "Example",
  "checked_messages",
  "given_ids",
  "labels_mask",
  "pretokenized",
  "trained_messages",
]

IGNORE_INDEX = -100  # Hugging Face trainers' label of a token that does not train
Example = tuple[np.ndarray, np.ndarray]  # (int64 ids, uint8 mask)


def pretokenized(record: Mapping[str, Any]) -> bool:
  return isinstance(record.get("input_ids"), list)


def labels_mask(ids: np.ndarray, labels: Any, where: str) -> np.ndarray:
  """The trained-token mask of Hugging Face trainers' labels (unshifted: -100 does not train, any other
  label must be its token id); an `InputFormatError` naming `where` otherwise."""
  given = np.asarray(labels)
  if given.shape != ids.shape or (given.size and given.dtype.kind not in "iu"):
    raise InputFormatError(f"{where}: 'labels' must hold one int per token id ({ids.size})")
  wrong = (given != IGNORE_INDEX) & (given != ids)
  if wrong.any():
    raise InputFormatError(
      f"{where}: labels[{int(np.flatnonzero(wrong)[0])}] is neither -100 nor its token id: jaxdata's targets are "
      "the next ids, so labels must equal the ids where they train (unshifted, as transformers' collators give them)"
    )
  return (given != IGNORE_INDEX).astype(np.uint8)


def given_ids(record: Mapping[str, Any], where: str, vocab_size: int | None) -> Example:
  """An example tokenized elsewhere: `input_ids` with `labels` (-100: not trained) or `mask` (0 / 1)."""
  ids = np.asarray(record["input_ids"])
  if ids.ndim != 1 or not ids.size or ids.dtype.kind not in "iu" or ids.min() < 0:
    raise InputFormatError(f"{where}: 'input_ids' must be a non-empty list of token ids >= 0")
  if vocab_size is not None and int(ids.max()) >= vocab_size:
    raise InputFormatError(f"{where}: 'input_ids' holds id {int(ids.max())}, beyond the vocabulary of {vocab_size}")
  if "labels" in record:
    return ids.astype(np.int64), labels_mask(ids, record["labels"], where)
  mask = np.asarray(record.get("mask", np.ones(ids.size, np.uint8)))
  if mask.shape != ids.shape or mask.dtype.kind not in "biu" or (mask.size and (mask.min() < 0 or mask.max() > 1)):
    raise InputFormatError(f"{where}: 'mask' must hold one 0 or 1 per input id ({ids.size})")
  return ids.astype(np.int64), mask.astype(np.uint8)


def checked_messages(messages: list[Any], where: str) -> list[int]:
  """Each message's weight (0 or 1; absent or null: 1), after checking its form; the messages stay as given."""
  weights = []
  for i, message in enumerate(messages):
    at = f"{where}: messages[{i}]"
    if not isinstance(message, dict):
      raise InputFormatError(f"{at}: expected an object with role and content, got {type(message).__name__}")
    role = message.get("role")
    if not isinstance(role, str) or not role:
      raise InputFormatError(f"{at}: role must be a non-empty string, got {role!r}")
    content = message.get("content")
    parts = isinstance(content, list) and all(isinstance(p, dict) for p in content)
    if not isinstance(content, str) and not parts and not (role == "assistant" and content is None):
      raise InputFormatError(
        f"{at}: content must be a string or a list of parts (an assistant's may be null beside tool_calls)"
      )
    weight = message.get("weight")
    weight = 1 if weight is None else weight  # absent (or null, as Parquet fills a struct's missing field)
    if isinstance(weight, bool) or weight not in (0, 1):
      raise InputFormatError(f"{at}: weight must be 0 or 1, got {weight!r}")
    if message.get("weight") is not None and role != "assistant":
      raise InputFormatError(f"{at}: weight is for assistant messages (only they train)")
    weights.append(int(weight))
  if not weights:
    raise InputFormatError(f"{where}: messages is empty")
  return weights


def trained_messages(messages: list[dict[str, Any]], weights: list[int], train_on: str) -> set[int]:
  """Indices of the messages that train."""
  assistants = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
  if train_on == "all":
    return set(range(len(messages)))
  chosen = assistants[-1:] if train_on == "last" else assistants
  return {i for i in chosen if weights[i] == 1}
