"""Where each assistant turn lies in one whole rendering, for templates without `{% generation %}` blocks.

An assistant message trains its whole rendered turn: what follows its role
header (its content, tool calls, reasoning the template writes there) and
the end-of-turn marker after it, up to where the next message's text
begins, less the layout whitespace after the marker. Never the header,
never template text that merely equals its content. Located without
searching for content::

    T   the conversation rendered once (what is tokenized)
    R   the same with a sentinel as each content -> each content's [a, b) in T (sentinels.py)
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
from collections.abc import Sequence
from typing import Any

from jaxdata.conversion.sentinels import (
  Render,
  common_prefix,
  content_spans,
  end_of_turn_text,
  sentinel_position,
  sentinel_prefix,
)
from jaxdata.errors import InputFormatError

__all__ = ["assistant_turns"]


@dataclasses.dataclass(frozen=True)
class _Rendering:
  """One conversation rendered once: what every turn is located in. `renders` is the template as given,
  then (if any) under its default arguments; `spans` each content's [a, b) in `text` (`content_spans`)."""

  messages: list[dict[str, Any]]
  renders: tuple[Render, ...]
  text: str
  spans: dict[int, tuple[int, int]]
  marker: str
  token_starts: list[int]
  token_ends: list[int]
  where: str


def _rendered_once(
  messages: list[dict[str, Any]], trained: set[int], renders: tuple[Render, ...], where: str, rendered: str | None
) -> tuple[str, dict[int, tuple[int, int]]]:
  """(the rendering, each content's span in it), refused where the template renders the conversation
  differently from call to call or writes a trained content twice."""
  text = renders[0](messages, False)
  if rendered is not None and rendered != text:
    at = common_prefix(rendered, text)
    raise InputFormatError(
      f"{where}: the template renders the same conversation differently on each call ({rendered[at : at + 30]!r} "
      f"then {text[at : at + 30]!r} at character {at}: a clock, a random draw); its turns cannot be located in "
      "what is tokenized: give a template that renders a conversation one way"
    )
  spans, twice = content_spans(messages, renders[0], text, where)
  for i in sorted(twice & trained):
    raise InputFormatError(
      f"{where}: messages[{i}] ({messages[i].get('role')}, weight 1): the template writes its content more than "
      "once, so which place is the turn is not clear; give it weight 0, or mark what trains with "
      "{% generation %} blocks"
    )
  return text, spans


def _whole_turn(r: _Rendering, i: int, placed: tuple[int, int] | None) -> tuple[int, int]:
  """Trained message i's [start, end): from where the model starts generating it to its turn's end."""
  role = r.messages[i].get("role")
  if placed is None:
    raise InputFormatError(
      f"{r.where}: messages[{i}] ({role}, weight 1) is absent from the template's rendering "
      "(nothing of it is placed there: no content, no generation prompt, no tool call; the conversation may "
      "render the same without it); give it weight 0, or a template that renders it"
    )
  start, span = placed[0], r.spans.get(i)
  anchor = max(start, span[1]) if span else start
  limit = _next_message_start(r.messages, i, r.renders, r.text, r.spans, anchor, marker=r.marker)
  end, marked = _turn_end(r.text, anchor, limit, r.marker)
  if not marked:
    end = _at_token_start(r.text, end, anchor, r.token_starts, r.token_ends)
  if end <= start:
    wrote = r.text[max(0, start - 40) : limit + 40]
    raise InputFormatError(
      f"{r.where}: messages[{i}] ({role}, weight 1) renders nothing the model could learn: "
      f"the template writes no content, tool call or end-of-turn marker for it; around its place it wrote "
      f"{wrote!r}; give it content or weight 0, or mark what trains with {{% generation %}} blocks"
    )
  _check_holds_no_other(r.messages, i, (start, end), r.spans, r.where)
  return start, end


def assistant_turns(
  messages: list[dict[str, Any]],
  trained: set[int],
  render: Render,
  where: str,
  token_offsets: Sequence[tuple[int, int]] = (),
  default_render: Render | None = None,
  *,
  rendered: str | None = None,
) -> list[tuple[int, int]]:
  """The character ranges of the trained messages' whole turns in `render(messages, False)`.
  `token_offsets` (each token's [start, end) in the rendering, in order): a turn without an end-of-turn
  marker whose end falls inside a token of template text after it moves back to that token's start.
  `default_render`: the template without the record's arguments, whose generation prompt's header is
  looked for too. `rendered`: the caller's own rendering of `messages` (what it tokenized), which must
  be this one. What cannot be located exactly is refused, naming the template's behaviour: a rendering
  that differs from call to call, a trained content written twice, a turn that would hold another
  message's content (messages rendered out of order)."""
  renders = (render,) if default_render is None else (render, default_render)
  text, spans = _rendered_once(messages, trained, renders, where, rendered)
  starts, ends = [int(a) for a, _ in token_offsets], [int(b) for _, b in token_offsets]
  r = _Rendering(messages, renders, text, spans, end_of_turn_text(render), starts, ends, where)
  ranges: list[tuple[int, int]] = []
  floor = 0  # nothing of message i renders before this point
  for i in range(len(messages)):
    span = spans.get(i)
    if i not in trained and messages[i].get("role") != "assistant":
      # a content a template moves later (a system prompt into the last user turn) sets no floor
      in_order = span is not None and span[1] <= min((spans[k][0] for k in spans if k > i), default=len(text))
      floor = max(floor, span[1]) if span and in_order else floor
      continue
    placed = _turn_start(
      messages, i, renders, text, floor, _ceiling(spans, i, len(text)), span=span, token_starts=starts
    )
    if i not in trained:  # its header is passed, so that the next turn's header is searched after it
      floor = max(floor, span[1] if span else placed[0] if placed else floor)
      continue
    ranges.append(_whole_turn(r, i, placed))
    floor = ranges[-1][1]
  return ranges


def _check_holds_no_other(
  messages: list[dict[str, Any]], i: int, turn: tuple[int, int], spans: dict[int, tuple[int, int]], where: str
) -> None:
  """An `InputFormatError` where message i's turn as located holds another message's content: a template
  that renders messages out of order (reversed, a system prompt written after the last turn)."""
  for j, (a, b) in sorted(spans.items()):
    if j != i and b > a and max(a, turn[0]) < min(b, turn[1]):
      order = "an earlier" if j < i else "a later"
      raise InputFormatError(
        f"{where}: messages[{i}] ({messages[i].get('role')}, weight 1): its turn would hold messages[{j}]'s "
        f"content ({messages[j].get('role')}, {order} message): the template renders messages out of order, "
        "and the turn cannot be told from it; give it weight 0, or mark what trains with {% generation %} blocks"
      )


def _ceiling(spans: dict[int, tuple[int, int]], i: int, length: int) -> int:
  """Where message i's header must end by: its content's start, else the next placed content's start."""
  for j in sorted(spans):
    if j >= i:
      return spans[j][0]
  return length


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
  messages: list[dict[str, Any]],
  i: int,
  renders: Sequence[Render],
  text: str,
  floor: int,
  ceiling: int,
  *,
  span: tuple[int, int] | None,
  token_starts: Sequence[int] = (),
) -> tuple[int, int] | None:
  """(where the model starts generating message i, the length of the header before it). That is where the
  generation prompt after messages[:i] ends: the whole prompt where the rendering starts with it, else its
  own text (the header, which a template may write after layout the prompt lacks, or after earlier turns
  it rewrites) found between the previous message and `ceiling`; `renders[1:]` (the template under its
  default arguments) give more headers to look for (a prompt that `enable_thinking=False` ends with an
  empty reasoning block the turn does not hold). A template without a generation prompt: the content's
  start, or where a sentinel given as its content lands. None: nothing places it, or the conversation
  renders the same without it."""
  render = renders[0]
  without_it = _renders_without(messages, i, render) if span is None else None
  if without_it == text:
    return None
  reach = max(ceiling, span[1]) if span else ceiling
  whole, headers, before = _generation_prompts(messages[:i], renders, text, floor, reach)
  if whole is not None:
    return whole
  for _, header in headers:
    for own in dict.fromkeys((header, header.lstrip())):
      at = text.find(own, floor, ceiling) if own else -1
      if at >= 0:
        return at + len(own), len(own)
  partial = _partial_header(text, *headers[0], floor, ceiling, token_starts) if headers else None
  if partial is not None:
    return partial
  if span:
    return span[0], 0
  probed = sentinel_position(messages, i, render, text)
  if probed is None:  # no probe renders (a template that checks the roles' order): where the rendering without
    # message i parts from the whole one (from the start of the token there), or the one of messages[:i] ends
    for other in (r for r in (without_it, before) if r):
      at = _token_start(common_prefix(text, other), token_starts)
      while at < ceiling and text[at].isspace():
        at += 1
      if floor <= at <= ceiling:
        return at, 0
    return None
  return (probed, 0) if floor <= probed <= ceiling else None


def _generation_prompts(
  earlier: list[dict[str, Any]], renders: Sequence[Render], text: str, floor: int, reach: int
) -> tuple[tuple[int, int] | None, list[tuple[str, str]], str]:
  """(the turn's start and header length where the template's whole generation prompt after `earlier`
  begins `text` and ends in [floor, reach], else None; each rendering's (prompt, its own text); the first
  rendering of `earlier` without a prompt)."""
  headers: list[tuple[str, str]] = []
  before = ""
  for each in renders:
    try:
      prompt, without = each(earlier, True), each(earlier, False)
    except InputFormatError:  # a template may refuse a conversation that ends before an assistant turn
      continue
    before = before or without
    if prompt == without:
      continue
    header = prompt[common_prefix(prompt, without) :]
    # the whole prompt agreeing is the strongest sign; it may end inside a content placed only roughly (one a
    # template renders otherwise, where the template's text depends on a content: SmolLM3's /no_think)
    if each is renders[0] and common_prefix(text, prompt) == len(prompt) and floor <= len(prompt) <= reach:
      return (len(prompt), len(header)), [], before
    headers.append((prompt, header))
  return None, headers, before


def _partial_header(
  text: str, prompt: str, header: str, floor: int, ceiling: int, token_starts: Sequence[int]
) -> tuple[int, int] | None:
  """Where the rendering agrees with the generation prompt through part of its header only (a prompt
  that opens reasoning the turn writes otherwise: `<think>` against `<tool_call>`): the turn starts where
  they part when that is a line's end, else after the last whole line agreed on, else at the token where
  they part."""
  begins, agreed = len(prompt) - len(header), common_prefix(text, prompt)
  if not floor <= begins < agreed <= ceiling:
    return None
  matched = text[begins:agreed]
  line = matched.rfind("\n")
  if line == len(matched) - 1:
    start = agreed
  else:
    start = begins + line + 1 if line >= 0 else max(begins, _token_start(agreed, token_starts))
  return start, start - begins


def _renders_without(messages: list[dict[str, Any]], i: int, render: Render) -> str | None:
  """The conversation rendered without message i; None where the template refuses that."""
  try:
    return render([*messages[:i], *messages[i + 1 :]], False)
  except InputFormatError:
    return None


def _token_start(at: int, token_starts: Sequence[int]) -> int:
  """The start of the token `at` falls in (`at` itself without tokens)."""
  k = bisect.bisect_right(token_starts, at) - 1
  return int(token_starts[k]) if k >= 0 else at


def _header_before_content(messages: list[dict[str, Any]], j: int, render: Render, marker: str) -> str:
  """The template text written just before message j's content (its header, layout included) when message
  j ends the conversation: from where that rendering parts from the one without message j, or from the
  last end-of-turn marker, whichever is later (a template may write the turn before a last message some
  other way); "" when a template refuses that conversation or writes no content for it."""
  sentinel = sentinel_prefix(messages) + "c\ue001"
  try:
    before = render(messages[:j], False)
    with_it = render([*messages[:j], {**messages[j], "content": sentinel}], False)
  except InputFormatError:
    return ""
  at = with_it.find(sentinel)
  if at < 0:
    return ""
  begins = common_prefix(before, with_it)
  ended = with_it.rfind(marker, 0, at) if marker else -1
  return with_it[max(begins, ended + len(marker) if ended >= 0 else 0) : at]


def _next_message_start(
  messages: list[dict[str, Any]],
  i: int,
  renders: Sequence[Render],
  text: str,
  spans: dict[int, tuple[int, int]],
  anchor: int,
  *,
  marker: str,
) -> int:
  """Where the message after message i begins in `text` (its header's start), or the rendering's end: what
  lies between `anchor` and it is message i's tool calls, end-of-turn marker and layout. A header measured
  where the previous turn renders otherwise (a template that writes a last turn differently) starts after
  the last end-of-turn marker in it."""
  for j in range(i + 1, len(messages)):
    span = spans.get(j)
    if span is None and messages[j].get("role") == "assistant":  # no placed text: where its header begins
      placed = _turn_start(messages, j, renders, text, anchor, _ceiling(spans, j, len(text)), span=None)
      if placed is not None and placed[0] - placed[1] >= anchor:
        return placed[0] - placed[1]
      continue
    # its content's start; a message without text: where a sentinel given as its content lands
    content = span[0] if span is not None else sentinel_position(messages, j, renders[0], text)
    if content is None or content < anchor:
      continue
    header = _header_before_content(messages, j, renders[0], marker)
    for own in (header, header.lstrip()):
      if own and content - len(own) >= anchor and text.startswith(own, content - len(own)):
        return content - len(own)
    return content
  return len(text)


def _turn_end(text: str, anchor: int, limit: int, marker: str) -> tuple[int, bool]:
  """(the end of the turn whose own text ends by `anchor` and whose message's rendering ends by `limit`,
  whether an end-of-turn marker closes it): past the last `marker` in between (a content may hold the
  marker, but `anchor` is past the content); else up to `limit`, less layout whitespace."""
  if marker:
    at = text.rfind(marker, anchor, limit)
    if at >= 0:
      return at + len(marker), True
  end = limit
  while end > anchor and text[end - 1].isspace():
    end -= 1
  return end, False
