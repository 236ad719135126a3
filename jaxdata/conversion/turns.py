"""Where each assistant turn lies in one whole rendering, for templates without `{% generation %}` blocks.

An assistant message trains its whole rendered turn: what follows its role
header (its content, tool calls, reasoning the template writes there) and
the end-of-turn marker after it, up to where the next message's text
begins, less the layout whitespace after the marker. Never the header,
never template text that merely equals its content. Located without
searching for content::

    T   the conversation rendered once (what is tokenized)
    R   the same rendered with a unique sentinel as each message's content
        R = P0 s_a P1 s_b P2 ...   (template text P, sentinels in rendered order)
        aligned with T piece by piece: P0 at 0, then s_a's rendering (its content,
        or the content trimmed), which P1 must follow, ...  -> each content's [a, b) in T
    G_i messages[:i] with the generation prompt: its common prefix with T ends at
        message i's header (where the model starts generating)
    F_i messages[:i + 1]: after its own content, the turn's end as the template
        writes it; its common prefix with T past b_i ends the turn

A content the template renders in some other way than as given (or drops,
as Llama 3.1 drops the text beside a tool call) has no anchor: its turn is
measured from where its generated part begins. A trained turn that renders
nothing is an `InputFormatError`: never a silent empty mask.

>>> from jinja2 import Template
>>> chatml = Template("{% for m in messages %}<|im_start|>{{ m.role }}\\n{{ m.content }}<|im_end|>\\n{% endfor %}"
...                   "{% if add_generation_prompt %}<|im_start|>assistant\\n{% endif %}")
>>> render = lambda ms, prompt=False: chatml.render(messages=ms, add_generation_prompt=prompt)
>>> text = render([{"role": "user", "content": "t"}, {"role": "assistant", "content": "t"}])
>>> [text[a:b] for a, b in assistant_turns([{"role": "user", "content": "t"},
...                                         {"role": "assistant", "content": "t"}], {1}, render, "x")]
['t<|im_end|>']
"""

from __future__ import annotations

import bisect
import dataclasses
import hashlib
from collections.abc import Callable, Sequence
from typing import Any

from jaxdata.errors import InputFormatError

__all__ = ["Render", "assistant_turns", "end_of_turn_text"]

# messages, add_generation_prompt -> the rendering (a template's own error as an InputFormatError)
Render = Callable[[list[dict[str, Any]], bool], str]


@dataclasses.dataclass(frozen=True)
class _Content:
  """One sentinel's place: the message (and text part) it stands for, and its text."""

  message: int
  part: int  # -1: the content is a string; else the index of a text part
  text: str


def _sentinel_prefix(messages: Sequence[dict[str, Any]]) -> str:
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


def content_spans(messages: list[dict[str, Any]], render: Render, text: str, where: str) -> dict[int, tuple[int, int]]:
  """Per message with text, its content's [start, end) in `text` (the real rendering), found by
  aligning the sentinel rendering with it; a message whose content the template does not render as
  given (or at all) is left out."""
  prefix = _sentinel_prefix(messages)
  marked, contents = _with_sentinels(messages, prefix)
  sentinel_text = render(marked, False)
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
  return spans


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
    agreed = pos + _common_prefix(text[pos:], before)
    end = text.find(following, agreed)
    if end >= 0:
      return end, end
  return None


def _common_prefix(a: str, b: str) -> int:
  """The length of the longest common prefix (a binary search of slice comparisons, in C)."""
  low, high = 0, min(len(a), len(b))
  while low < high:
    middle = (low + high + 1) // 2
    if a[:middle] == b[:middle]:
      low = middle
    else:
      high = middle - 1
  return low


def assistant_turns(
  messages: list[dict[str, Any]],
  trained: set[int],
  render: Render,
  where: str,
  token_offsets: Sequence[tuple[int, int]] = (),
) -> list[tuple[int, int]]:
  """The character ranges of the trained assistant messages' whole turns in `render(messages, False)`.
  `token_offsets` (each token's [start, end) in the rendering, in order): a turn's end that falls inside
  a token of template text after the turn (`<|user|>` sharing `<|` with `<|endoftext|>`) moves back to
  that token's start."""
  token_starts = [int(start) for start, _ in token_offsets]
  token_ends = [int(end) for _, end in token_offsets]
  text = render(messages, False)
  spans = content_spans(messages, render, text, where)
  ranges, previous_end = [], 0
  for i in range(len(messages)):
    span = spans.get(i)
    if i not in trained:
      previous_end = span[1] if span else previous_end
      continue
    start = _turn_start(messages, i, render, text, previous_end, span)
    if start is None:  # no content, generation prompt or sentinel places it: the template leaves it out
      raise InputFormatError(
        f"{where}: messages[{i}] (assistant, weight 1) is absent from the template's rendering (nothing of it "
        "is placed there: no content, no generation prompt, no tool call); give it weight 0, or a template that renders it"
      )
    end = _turn_end(messages, i, render, text, start, span, where)
    end = _at_token_start(text, end, span[1] if span else start, token_starts, token_ends)
    if end <= start:
      raise InputFormatError(
        f"{where}: messages[{i}] (assistant, weight 1) renders nothing the model could learn: the template "
        "writes no content, tool call or end-of-turn marker for it (absent from its rendering); give it "
        "content or weight 0, or mark what trains with {% generation %} blocks"
      )
    ranges.append((start, end))
    previous_end = end
  return ranges


def _at_token_start(text: str, end: int, floor: int, token_starts: list[int], token_ends: list[int]) -> int:
  """`end`, moved back to the start of a token it falls inside when that token lies past `floor`."""
  if not token_starts:
    return end
  k = bisect.bisect_right(token_starts, end - 1) - 1  # the last token that starts before `end`
  if k >= 0 and token_starts[k] >= floor and token_starts[k] < end < token_ends[k]:
    end = int(token_starts[k])
    while end > floor and text[end - 1].isspace():
      end -= 1
  return end


def _turn_start(
  messages: list[dict[str, Any]], i: int, render: Render, text: str, floor: int, span: tuple[int, int] | None
) -> int | None:
  """Where the model starts generating message i: the end of the generation prompt after messages[:i]
  (kept between the previous message's end and the content's start). A template without a generation
  prompt does not say where the header ends: then the content's start, or for a message without text
  where a sentinel given as its content lands (the header never trains). None: nothing places the
  message in the rendering (a template that leaves it out)."""
  ceiling = span[0] if span else len(text)
  try:
    prompt = render(messages[:i], True)
    before = render(messages[:i], False)
  except InputFormatError:  # a template may refuse a conversation that ends before an assistant turn
    prompt = before = ""
  if prompt != before:
    start = _common_prefix(text, prompt)
    if floor <= start <= ceiling:
      return start
  if span:
    return ceiling
  at = _sentinel_position(messages, i, render, text)
  return at if at is not None and at >= floor else None


def _probes(messages: list[dict[str, Any]], i: int) -> list[list[dict[str, Any]]]:
  """Message i (no text of its own) given a sentinel as its content: with its tool calls, then without
  them (a template that renders either tool calls or content)."""
  sentinel = _sentinel_prefix(messages) + "h\ue001"
  given = {**messages[i], "content": sentinel}
  alone = {k: v for k, v in given.items() if k != "tool_calls"}
  return [[*messages[:i], m, *messages[i + 1 :]] for m in (given, alone)]


def _sentinel_position(
  messages: list[dict[str, Any]], i: int, render: Render, reference: str, keep_tool_calls: bool = False
) -> int | None:
  """Where message i's generated part begins in `reference` (a rendering of `messages`): where a sentinel
  given as its content lands, the rendering agreeing with `reference` before it; None if it renders nowhere."""
  for probe in _probes(messages, i)[: 1 if keep_tool_calls else 2]:
    try:
      probed = render(probe, False)
    except InputFormatError:
      continue
    at = probed.find(probe[i]["content"])
    if 0 <= at <= _common_prefix(reference, probed):
      return at
  return None


def _turn_end(
  messages: list[dict[str, Any]],
  i: int,
  render: Render,
  text: str,
  start: int,
  span: tuple[int, int] | None,
  where: str,
) -> int:
  """The end of message i's turn: what the template writes after its content (tool calls, the end-of-turn
  marker) both when the conversation ends there and when a user message follows (the part the two share:
  not the next header, not an end-of-conversation suffix), as far as the whole rendering agrees, less
  trailing layout whitespace. A message without text is measured with a sentinel as its content where the
  template renders one beside its tool calls, else from where its generated part begins in each rendering."""
  follower = {"role": "user", "content": _sentinel_prefix(messages) + "f\ue001"}
  anchor, conversation, tail = span[1] if span is not None else start, messages, None
  if span is None and _sentinel_position(messages, i, render, text, keep_tool_calls=True) is not None:
    conversation = _probes(messages, i)[0]  # measured from the sentinel, which the whole rendering places
    anchor = _sentinel_position(messages, i, render, text, keep_tool_calls=True) or anchor
    span = (anchor, anchor)
  ending = render(conversation[: i + 1], False)
  try:
    followed = render([*conversation[: i + 1], follower], False)
  except InputFormatError:  # a template that refuses a user message here: the conversation's end decides
    followed = ending
  if span is not None:
    own = content_spans(conversation[: i + 1], render, ending, where).get(i)
    other = content_spans([*conversation[: i + 1], follower], render, followed, where).get(i)
    if own is not None and other is not None:
      tail = ending[own[1] : own[1] + _common_prefix(ending[own[1] :], followed[other[1] :])]
  else:
    at_ending = _sentinel_position(conversation[: i + 1], i, render, ending)
    at_followed = _sentinel_position([*conversation[: i + 1], follower], i, render, followed)
    if at_ending is not None and at_followed is not None:
      tail = ending[at_ending : at_ending + _common_prefix(ending[at_ending:], followed[at_followed:])]
  if tail is not None:
    end = anchor + _common_prefix(text[anchor:], tail)
  else:  # nothing to measure from: the renderings' common prefixes from the start
    end = min(_common_prefix(text, ending), _common_prefix(ending, followed))
  while end > anchor and text[end - 1].isspace():
    end -= 1
  return max(end, anchor)


def end_of_turn_text(render: Render) -> str:
  """The marker a template writes after an assistant message (`<|im_end|>`, `<|eot_id|>`, `</s>`...):
  what follows its content both when the conversation ends there and when a user message follows,
  less layout whitespace; "" when it writes none (or refuses the probe conversation)."""
  prefix = _sentinel_prefix([])
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
  common = tail[: _common_prefix(tail, followed[at_followed + len(answer["content"]) :])]
  return common.strip()
