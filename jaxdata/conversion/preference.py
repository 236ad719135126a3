"""Preference examples -> both sides of a pair, each rendered whole once, sharing a token-identical prompt.

The record shapes users of TRL, MaxText and Levanter hold::

    {"prompt": "...", "chosen": "...", "rejected": "..."}         strings (with a chat template: a user
                                                                  turn and an assistant turn each)
    {"prompt": [messages], "chosen": [messages], "rejected": [...]}   conversational, the prompt given
    {"chosen": [messages], "rejected": [messages]}                the prompt implicit: the messages
                                                                  both sides begin with
    {"chosen": "...", "rejected": "..."}                          the prompt implicit in whole texts
                                                                  (Anthropic HH): their common prefix,
                                                                  split as TRL's extract_prompt does
    + "tools": [tool definitions]                                 passed to the template, as for chat
    + "margin": a number, or "score_chosen" and "score_rejected"  (margin = their difference)
    {"prompt": ..., "completion": ..., "label": true | false}     KTO: one side, desirable or not

Each side is one whole conversation (prompt messages, then its answer),
encoded by the fine-tuning path (`ExampleEncoder`): rendered once with the
chat template, tokenized once, its answer's messages trained by that path's
rule (generation blocks, or whole assistant turns), the prompt's not. A
side's prompt is its tokens before the first trained one; the two sides'
must be token for token the same, else the pair is refused naming its
`file:line` and the first position they differ at (a template that renders
the prompt differently by answer, or text whose tokens merge across the
prompt's end):

    chosen:    [p p p p | a a a]       mask 0 0 0 0 1 1 1
    rejected:  [p p p p | b b]         mask 0 0 0 0 1 1      p identical on both sides

`pair_record` lays a pair out as one record (one unit of the order: a pair
is never split by the mixture, a shuffle or an epoch): the chosen side's
ids, then the rejected side's, with one byte per id holding bit 0 (trained)
and bit 1 (the rejected side).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from jaxdata.conversion.example_fields import Example
from jaxdata.conversion.examples import ExampleEncoder, character_range_mask
from jaxdata.errors import InputFormatError

__all__ = ["PreferenceEncoder", "PreferenceExample", "pair_record", "split_pair"]

Context = tuple[list[dict[str, Any]], dict[str, Any]]  # system messages put first, the template's arguments
TRAINED, REJECTED = 1, 2  # the bits of a pair record's byte per id


@dataclasses.dataclass(frozen=True)
class PreferenceExample:
  """One preference example: both sides of a pair, or one side of a KTO example (the other None).

  Attributes:
    chosen: (ids, trained mask) of the preferred side, or None (KTO, label false).
    rejected: (ids, trained mask) of the other side, or None (KTO, label true).
    prompt_tokens: the tokens before the first trained one (the same ids on both sides of a pair).
    margin: how much more the chosen side is preferred, where the record says.
  """

  chosen: Example | None
  rejected: Example | None
  prompt_tokens: int
  margin: float | None = None


@dataclasses.dataclass(frozen=True)
class PreferenceEncoder:
  """Encodes one preference record with `encoder` (the fine-tuning path's; see the module docstring)."""

  encoder: ExampleEncoder
  fields: tuple[str, str] = ("chosen", "rejected")  # the record fields of the two sides (Levanter's chosen_field, ...)

  def __post_init__(self) -> None:
    if self.encoder.train_on == "all":
      raise ValueError("train_on: 'all' would train a pair's prompt; a pair trains its answers ('assistant' or 'last')")

  def encode(self, record: Mapping[str, Any], where: str) -> PreferenceExample:
    if not isinstance(record, Mapping):
      raise InputFormatError(f"{where}: expected an object, got {type(record).__name__}")
    if "label" in record:
      both = [name for name in self.fields if name in record]
      if both:
        raise InputFormatError(
          f"{where}: holds 'label' (a KTO example of one completion) and {' and '.join(map(repr, both))} (a "
          "pair): which one the record is, is not clear; keep label + completion, or the pair's fields"
        )
      return self._unpaired(record, where)
    for name in self.fields:
      if record.get(name) is None:  # missing, or null: a pair with one side (one side is a KTO example's)
        state = "is missing" if name not in record else "is null"
        raise InputFormatError(
          f"{where}: field {name!r} {state} (a preference pair holds chosen and rejected; an example of one "
          "completion is a KTO example: prompt, completion and label)"
        )
    if self.fields != ("chosen", "rejected"):
      record = {**record, "chosen": record[self.fields[0]], "rejected": record[self.fields[1]]}
    prompt, chosen, rejected = _sides(record, where)
    if self.encoder.train_on == "last":
      for name, answer in (("chosen", chosen), ("rejected", rejected)):
        if (
          isinstance(answer, list) and sum(isinstance(m, Mapping) and m.get("role") == "assistant" for m in answer) > 1
        ):
          raise InputFormatError(
            f"{where}: {name}'s answer holds several assistant messages, and train_on 'last' trains only the "
            "last: the others would count as prompt, which the two sides must share; train_on 'assistant' "
            "trains the whole answer"
          )
    context = self._context(record, where)
    sides = [
      self._side(prompt, answer, where, name, context) for name, answer in (("chosen", chosen), ("rejected", rejected))
    ]
    (chosen_ids, chosen_mask), (rejected_ids, rejected_mask) = sides
    if chosen_ids.tolist() == rejected_ids.tolist():
      raise InputFormatError(f"{where}: chosen and rejected are the same tokens (the pair prefers nothing)")
    prompt_tokens = _prompt_length(chosen_mask, where, "chosen")
    if _prompt_length(rejected_mask, where, "rejected") != prompt_tokens or not np.array_equal(
      chosen_ids[:prompt_tokens], rejected_ids[:prompt_tokens]
    ):
      raise InputFormatError(
        f"{where}: the two sides' prompts differ as tokens (at token {_first_difference(sides)}): the template "
        "renders the prompt differently by answer, or the prompt's last tokens merge with the answer's"
      )
    return PreferenceExample(sides[0], sides[1], prompt_tokens, _margin(record, where))

  def _unpaired(self, record: Mapping[str, Any], where: str) -> PreferenceExample:
    label = record["label"]
    if not isinstance(label, bool):
      raise InputFormatError(f"{where}: label must be true or false (desirable or not), got {label!r}")
    if "completion" not in record:
      raise InputFormatError(f"{where}: field 'completion' is missing (an example with a label holds one)")
    prompt = record.get("prompt", "" if isinstance(record["completion"], str) else [])
    side = self._side(prompt, record["completion"], where, "completion", self._context(record, where))
    prompt_tokens = _prompt_length(side[1], where, "completion")
    return PreferenceExample(side if label else None, None if label else side, prompt_tokens)

  def _context(self, record: Mapping[str, Any], where: str) -> Context:
    """The record's system prompt and template arguments (Levanter's fields, and its `tools`, as the chat
    format passes them), where the sides render as chat."""
    if self.encoder.kind != "chat":
      return [], {}
    system, kwargs = self.encoder.record_context(record, where)
    tools = record.get("tools")
    if tools is not None and not isinstance(tools, list):
      raise InputFormatError(f"{where}: field 'tools' must be a list of tool definitions, got {type(tools).__name__}")
    return system, ({**kwargs, "tools": tools} if tools else kwargs)

  def _side(self, prompt: Any, answer: Any, where: str, name: str, context: Context) -> Example:
    """One side, whole: the prompt messages untrained, the answer's trained by the fine-tuning rule."""
    if isinstance(prompt, str) and isinstance(answer, str):
      if not answer:
        raise InputFormatError(f"{where}: {name} is empty: it trains nothing")
      if self.encoder.kind == "prompt-completion":  # no template: the texts joined, as such examples are
        text = prompt + answer
        ids, offsets = self.encoder.tokenized(text)
        return ids, character_range_mask(offsets, [(len(prompt), len(text))])
      prompt = [{"role": "user", "content": prompt}]
      answer = [{"role": "assistant", "content": answer}]
    if self.encoder.kind != "chat":
      raise InputFormatError(f"{where}: a conversational pair needs a chat template (--chat-template FILE.jinja)")
    if not isinstance(prompt, list) or not isinstance(answer, list):
      raise InputFormatError(
        f"{where}: prompt and {name} must both be strings or both lists of messages, got "
        f"{type(prompt).__name__} and {type(answer).__name__}"
      )
    if not any(isinstance(m, Mapping) and m.get("role") == "assistant" for m in answer):
      raise InputFormatError(f"{where}: {name} holds no assistant message (the answer the pair compares)")
    system, kwargs = context
    messages = [*system, *prompt, *answer]
    weights = [0] * (len(system) + len(prompt)) + [1] * len(answer)  # only the answer trains
    return self.encoder.encode_messages(messages, weights, f"{where} ({name})", kwargs)


def _sides(record: Mapping[str, Any], where: str) -> tuple[Any, Any, Any]:
  """(prompt, chosen answer, rejected answer); an implicit prompt is the messages both sides begin with."""
  chosen, rejected = record["chosen"], record["rejected"]
  if "prompt" in record:
    return record["prompt"], chosen, rejected
  if isinstance(chosen, str) and isinstance(rejected, str):
    return _shared_text(chosen, rejected, where)
  if not isinstance(chosen, list) or not isinstance(rejected, list):
    raise InputFormatError(
      f"{where}: field 'prompt' is missing, and chosen and rejected are not both texts or both lists of "
      f"messages ({type(chosen).__name__} and {type(rejected).__name__})"
    )
  shared = 0
  while shared < min(len(chosen), len(rejected)) and chosen[shared] == rejected[shared]:
    shared += 1
  if shared == 0:
    raise InputFormatError(
      f"{where}: chosen and rejected share no first message, so no prompt (give 'prompt', or whole "
      "conversations that begin alike)"
    )
  if shared == min(len(chosen), len(rejected)):
    raise InputFormatError(f"{where}: one side is all prompt: the shared messages leave it no answer")
  return chosen[:shared], chosen[shared:], rejected[shared:]


def _shared_text(chosen: str, rejected: str, where: str) -> tuple[str, str, str]:
  """(prompt, chosen answer, rejected answer) of two whole texts with an implicit prompt (Anthropic HH's
  shape): the prompt is their common prefix, less a space it ends with (the answers keep it), as TRL's
  `extract_prompt` splits them.

  >>> _shared_text("Q: hi A: yes", "Q: hi A: no", "x")
  ('Q: hi A:', ' yes', ' no')
  """
  shared = 0
  while shared < min(len(chosen), len(rejected)) and chosen[shared] == rejected[shared]:
    shared += 1
  if shared and chosen[shared - 1] == " ":
    shared -= 1
  if shared == 0:
    raise InputFormatError(f"{where}: field 'prompt' is missing, and chosen and rejected share no text to take as one")
  if shared in (len(chosen), len(rejected)):
    raise InputFormatError(f"{where}: one side is all prompt: the shared text leaves it no answer")
  return chosen[:shared], chosen[shared:], rejected[shared:]


def _prompt_length(mask: np.ndarray, where: str, name: str) -> int:
  trained = np.flatnonzero(mask)
  if not trained.size:
    raise InputFormatError(f"{where}: {name} trains no token (its answer renders to nothing)")
  return int(trained[0])


def _first_difference(sides: list[Example]) -> int:
  (a, _), (b, _) = sides
  size = min(a.size, b.size)
  differing = np.flatnonzero(a[:size] != b[:size])
  return int(differing[0]) if differing.size else size


def _margin(record: Mapping[str, Any], where: str) -> float | None:
  """The record's `margin`, or `score_chosen - score_rejected`; None where it has neither."""
  if "margin" in record:
    values = {"margin": record["margin"]}
  elif "score_chosen" in record or "score_rejected" in record:
    values = {name: record.get(name) for name in ("score_chosen", "score_rejected")}
  else:
    return None
  for name, value in values.items():
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
      raise InputFormatError(f"{where}: {name} must be a finite number, got {value!r}")
  margin = float(values["margin"]) if "margin" in values else values["score_chosen"] - values["score_rejected"]
  if margin < 0:
    given = (
      f"margin {values['margin']!r}"
      if "margin" in values
      else f"score_chosen {values['score_chosen']!r} below score_rejected {values['score_rejected']!r}"
    )
    raise InputFormatError(
      f"{where}: {given}: a margin is how much more the chosen side is preferred (>= 0); the record prefers "
      "the rejected side (swap chosen and rejected, or fix the scores)"
    )
  return float(margin)


def pair_record(example: PreferenceExample) -> tuple[np.ndarray, np.ndarray]:
  """One record of a pair (or a KTO example's one side): ids, and a byte per id (bit 0 trained, bit 1 the
  rejected side).

  >>> example = PreferenceExample((np.array([5, 6, 7]), np.array([0, 1, 1])), (np.array([5, 8]), np.array([0, 1])), 1)
  >>> ids, marks = pair_record(example)
  >>> ids.tolist(), marks.tolist()
  ([5, 6, 7, 5, 8], [0, 1, 1, 2, 3])
  """
  parts = [(side, flag) for side, flag in ((example.chosen, 0), (example.rejected, REJECTED)) if side is not None]
  ids = np.concatenate([side[0] for side, _ in parts]).astype(np.int64)
  marks = np.concatenate([side[1].astype(np.uint8) | np.uint8(flag) for side, flag in parts])
  return ids, marks


def split_pair(ids: np.ndarray, marks: np.ndarray) -> tuple[Example | None, Example | None]:
  """Inverse of `pair_record`: (chosen, rejected), each (ids, trained mask) or None.

  >>> chosen, rejected = split_pair(np.array([5, 6, 7, 5, 8]), np.array([0, 1, 1, 2, 3], np.uint8))
  >>> chosen[0].tolist(), rejected[1].tolist()
  ([5, 6, 7], [0, 1])
  """
  side = (marks & REJECTED) != 0
  chosen = (ids[~side], marks[~side] & TRAINED) if (~side).any() else None
  rejected = (ids[side], marks[side] & TRAINED) if side.any() else None
  return chosen, rejected
