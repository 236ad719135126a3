"""Where each message's content lies in a template's rendering, found by rendering it again with a
unique sentinel as each content (never by searching for the content's text, which template text may equal)::

    T   the conversation rendered once (what is tokenized)
    R   the same rendered with a sentinel as each message's content
        R = P0 s_a P1 s_b P2 ...   (template text P, sentinels in rendered order)
        aligned with T piece by piece: P0 at 0, then s_a's rendering (its content,
        or the content trimmed), which P1 must follow, ...  -> each content's [a, b) in T

Also the other sentinel probes: where a message without text of its own renders (`sentinel_position`)
and the end-of-turn marker a template writes (`end_of_turn_text`). Used by `turns.assistant_turns`
(whole assistant turns).

>>> common_prefix("<|im_start|>user", "<|im_start|>assistant")
12
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable, Sequence
from typing import Any

from jaxdata.errors import InputFormatError

__all__ = ["Render", "common_prefix", "content_spans", "end_of_turn_text", "sentinel_position", "sentinel_prefix"]

# messages, add_generation_prompt -> the rendering (a template's own error as an InputFormatError)
Render = Callable[[list[dict[str, Any]], bool], str]


@dataclasses.dataclass(frozen=True)
class _Content:
  """One sentinel's place: the message (and text part) it stands for, and its text."""

  message: int
  part: int  # -1: the content is a string; else the index of a text part
  text: str


def sentinel_prefix(messages: Sequence[dict[str, Any]]) -> str:
  """A marker no content holds: a private-use character and digits (no filter changes them), from a
  hash of the conversation, so the same conversation always gets the same sentinels."""
  everything = repr(messages)
  for attempt in range(1000):
    digest = hashlib.blake2b(f"{attempt}:{everything}".encode(), digest_size=6).digest()
    prefix = "\ue000" + str(int.from_bytes(digest, "little"))
    if prefix not in everything:
      return prefix
  raise AssertionError("no sentinel free of the conversation's text")  # 1000 48-bit draws all inside it


def _with_sentinels(
  messages: Sequence[dict[str, Any]], prefix: str
) -> tuple[list[dict[str, Any]], dict[str, _Content]]:
  """The messages with each non-empty text replaced by a sentinel, and what each sentinel stands for."""
  out: list[dict[str, Any]] = []
  contents: dict[str, _Content] = {}
  for i, message in enumerate(messages):
    content = message.get("content")
    if isinstance(content, str) and content:
      sentinel = f"{prefix}{len(contents)}\ue001"
      contents[sentinel] = _Content(i, -1, content)
      out.append({**message, "content": sentinel})
    elif isinstance(content, list):
      parts = []
      for j, part in enumerate(content):
        text = part.get("text") if isinstance(part, dict) else None
        if isinstance(text, str) and text:
          sentinel = f"{prefix}{len(contents)}\ue001"
          contents[sentinel] = _Content(i, j, text)
          part = {**part, "text": sentinel}
        parts.append(part)
      out.append({**message, "content": parts})
    else:
      out.append(dict(message))
  return out, contents


def _renderings(text: str) -> list[str]:
  """How a template may render a content: as given, or trimmed (`| trim`, `.strip()`)."""
  seen: list[str] = []
  for candidate in (text, text.strip(), text.lstrip(), text.rstrip()):
    if candidate not in seen:
      seen.append(candidate)
  return seen


def content_spans(
  messages: list[dict[str, Any]], render: Render, text: str, where: str
) -> tuple[dict[int, tuple[int, int]], set[int]]:
  """Per message with text, its content's [start, end) in `text` (the real rendering), found by
  aligning the sentinel rendering with it; a message whose content the template does not render as
  given (or at all) is left out. And the messages whose content the template writes more than once."""
  prefix = sentinel_prefix(messages)
  marked, contents = _with_sentinels(messages, prefix)
  sentinel_text = render(marked, False)
  twice = {c.message for s, c in contents.items() if sentinel_text.count(s) > 1}
  placed = sorted((sentinel_text.find(s), s) for s in contents if sentinel_text.find(s) >= 0)
  pieces, at = [], 0  # template text before each sentinel, in rendered order
  for start, sentinel in placed:
    pieces.append(sentinel_text[at:start])
    at = start + len(sentinel)
  after_last = sentinel_text[at:]
  spans: dict[int, tuple[int, int]] = {}
  pos = 0
  for k, (_, sentinel) in enumerate(placed):
    before = pieces[k]
    following = pieces[k + 1] if k + 1 < len(placed) else after_last
    content = contents[sentinel]
    found = _place(text, pos, before, content.text, following)
    if found is None:  # the template renders this content some other way (or not at all): no anchor
      continue
    start, end = found
    old = spans.get(content.message)
    spans[content.message] = (min(start, old[0]), max(end, old[1])) if old else (start, end)
    pos = end
  return spans, twice


def _place(text: str, pos: int, before: str, content: str, following: str) -> tuple[int, int] | None:
  """Where a content renders in `text` after `pos`: right after the template text `before`, followed by
  the template text `following` (exactly, then by its head); else the first such place further on."""
  heads = [following, following[:16], following[:1]] if following else [""]
  if text.startswith(before, pos):
    at = pos + len(before)
    for head in heads:
      for rendered in _renderings(content):
        if text.startswith(rendered + head, at):
          return at, at + len(rendered)
    if following:  # rendered some other way (a template that rewrites it): up to the next template text
      end = text.find(following, at)
      if end >= 0:
        return at, end
  for head in heads:
    for rendered in _renderings(content):
      if rendered:
        found = text.find(rendered + head, pos)
        if found >= 0:
          return found, found + len(rendered)
  if following:  # template text before it that depends on the content (reasoning a template moves): the
    # content's rendering ends where the template text after it begins; where it starts is not known
    agreed = pos + common_prefix(text[pos:], before)
    end = text.find(following, agreed)
    if end >= 0:
      return end, end
  return None


def common_prefix(a: str, b: str) -> int:
  """The length of the longest common prefix (a binary search of slice comparisons, in C)."""
  low, high = 0, min(len(a), len(b))
  while low < high:
    middle = (low + high + 1) // 2
    if a[:middle] == b[:middle]:
      low = middle
    else:
      high = middle - 1
  return low


def _probes(messages: list[dict[str, Any]], i: int) -> list[list[dict[str, Any]]]:
  """Message i (no text of its own) given a sentinel as its content: with its tool calls, then without
  them (a template that renders either tool calls or content)."""
  sentinel = sentinel_prefix(messages) + "h\ue001"
  given = {**messages[i], "content": sentinel}
  alone = {k: v for k, v in given.items() if k != "tool_calls"}
  return [[*messages[:i], m, *messages[i + 1 :]] for m in (given, alone)]


def sentinel_position(messages: list[dict[str, Any]], i: int, render: Render, reference: str) -> int | None:
  """Where message i's generated part begins in `reference` (a rendering of `messages`): where a sentinel
  given as its content lands, the rendering agreeing with `reference` before it. Where the two part before
  the sentinel, the part from there is message i's own (tool calls written where the sentinel's layout, or
  a template's text for a content, would be): it begins where they part. None: it renders nowhere."""
  parted: int | None = None
  for probe in _probes(messages, i):
    try:
      probed = render(probe, False)
    except InputFormatError:
      continue
    at = probed.find(probe[i]["content"])
    agreed = common_prefix(reference, probed)
    if 0 <= at <= agreed:
      return at
    if at >= 0 and parted is None and agreed < len(reference):  # the real rendering writes something else there
      parted = agreed
  return parted


def end_of_turn_text(render: Render) -> str:
  """The marker a template writes after an assistant message (`<|im_end|>`, `<|eot_id|>`, `</s>`...):
  what follows its content both when the conversation ends there and when a user message follows,
  less layout whitespace; "" when it writes none (or refuses the probe conversation)."""
  prefix = sentinel_prefix([])
  answer = {"role": "assistant", "content": prefix + "a\ue001"}
  question = {"role": "user", "content": prefix + "q\ue001"}
  follower = {"role": "user", "content": prefix + "f\ue001"}
  try:
    ending, followed = render([question, answer], False), render([question, answer, follower], False)
  except InputFormatError:
    return ""
  at_ending, at_followed = ending.find(answer["content"]), followed.find(answer["content"])
  if at_ending < 0 or at_followed < 0:
    return ""
  tail = ending[at_ending + len(answer["content"]) :]
  common = tail[: common_prefix(tail, followed[at_followed + len(answer["content"]) :])].strip()
  # up to layout whitespace: what follows it may share a head with an end-of-conversation suffix ("<|")
  return common.split()[0] if common else ""
