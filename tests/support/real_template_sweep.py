"""jaxdata's trained-token masks against transformers' assistant mask on the published templates' block
variants (`real_templates`), over generated conversations, per family and tokenizer.

    python tests/support/real_template_sweep.py --conversations 1000

prints, per family and tokenizer, the conversations checked and the disagreements: masks that differ
(whole turns on the published template; generation blocks on the variant with partial training) and
wrong refusals (an `InputFormatError` where the template renders the conversation). Exit status 1 when
any is not 0.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import os
import random
import sys
import tempfile
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import real_templates as real
from jaxdata.conversion.examples import ExampleEncoder
from jaxdata.errors import InputFormatError


@dataclasses.dataclass
class Tally:
  checked: int = 0
  template_refused: int = 0  # the published template raises on the conversation: ours must refuse too
  disagreements: list[str] = dataclasses.field(default_factory=list)


def trained_set(messages: list[dict[str, Any]], train_on: str) -> set[int]:
  assistants = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
  chosen = assistants[-1:] if train_on == "last" else assistants
  return {i for i in chosen if messages[i].get("weight", 1) == 1}


def oracle(tokenizer: Any, family: real.Family, messages: list[dict[str, Any]], tools: Any, trained: set[int]):
  """(ids, mask): the block variant's blocks of the trained messages, by transformers' overlap rule; with
  every assistant message trained, asserted equal to transformers' own `assistant_masks`."""
  variant = real.with_blocks(family)
  text, spans = real.block_spans(tokenizer, variant, messages, tools)
  assistants = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
  assert len(spans) == len(assistants), f"{family.name}: {len(spans)} blocks for {len(assistants)} assistant turns"
  keep = [span for span, i in zip(spans, assistants) if i in trained]
  encoding = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
  mask = real.overlap_mask([tuple(o) for o in encoding["offset_mapping"]], keep)
  if trained == set(assistants):
    clean = [{k: v for k, v in m.items() if k != "weight"} for m in messages]
    own = tokenizer.apply_chat_template(
      clean, tools=tools, chat_template=variant, tokenize=True, return_dict=True, return_assistant_tokens_mask=True
    )
    assert list(own["assistant_masks"]) == mask, f"{family.name}: the oracle's rule differs from transformers'"
  return list(encoding["input_ids"]), mask


def check(tokenizer: Any, family: real.Family, messages, tools, train_on: str, tally: Tally) -> None:
  tally.checked += 1
  record: dict[str, Any] = {"messages": messages, **({"tools": tools} if tools else {})}
  try:
    real.check_same_rendering(tokenizer, family, messages, tools)
  except Exception:  # noqa: BLE001 -- the template's own refusal (raise_exception, a jinja error): ours too
    tally.template_refused += 1
    try:
      ExampleEncoder("chat", tokenizer, "messages", train_on, real.published(family)).encode(record, "x:1")
    except InputFormatError:
      return
    tally.disagreements.append(f"accepted what the template refuses: {messages}")
    return
  trained = trained_set(messages, train_on)
  if not trained:
    return
  expected = oracle(tokenizer, family, messages, tools, trained)
  for rule, template in (("whole turns", real.published(family)), ("blocks", real.with_blocks(family))):
    encoder = ExampleEncoder("chat", tokenizer, "messages", train_on, template)  # type: ignore[arg-type]
    try:
      ids, mask = encoder.encode(record, "x:1")
    except InputFormatError as e:
      tally.disagreements.append(f"{rule}: wrong refusal ({e}): {messages}")
      continue
    if (ids.tolist(), mask.tolist()) != expected:
      tokens = tokenizer.convert_ids_to_tokens(expected[0])
      tally.disagreements.append(
        f"{rule}: mask differs on {messages}\n  oracle {_shown(tokens, expected[1])!r}\n"
        f"  ours   {_shown(tokens, mask.tolist())!r}"
      )


def _shown(tokens: list[str], mask: list[int]) -> str:
  """The tokens a mask trains, the others as "_"."""
  return "".join(t if k else "_" for t, k in zip(tokens, mask))


def sweep(tokenizers: dict[str, Any], conversations: int, seed: int, families: list[str]) -> dict[tuple, Tally]:
  """Per (family, tokenizer, plain | partial): `conversations` generated conversations checked."""
  out: dict[tuple, Tally] = collections.defaultdict(Tally)
  for name in families:
    family = real.FAMILIES[name]
    for kind, base in tokenizers.items():
      tokenizer = real.for_family(base, family)
      rng = random.Random(f"{seed}:{name}:{kind}")
      for _ in range(conversations):
        messages, tools = real.conversation(rng, family)
        check(tokenizer, family, messages, tools, "assistant", out[(name, kind, "plain")])
        partial = real.weighted(rng, messages)
        train_on = rng.choice(["assistant", "last"])
        check(tokenizer, family, partial, tools, train_on, out[(name, kind, "partial")])
  return out


def main() -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--conversations", type=int, default=1000)
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--families", default=",".join(real.FAMILIES))
  args = parser.parse_args()
  with tempfile.TemporaryDirectory() as directory:
    tallies = sweep(real.build_tokenizers(directory), args.conversations, args.seed, args.families.split(","))
  bad = 0
  print(f"{'family':<14}{'tokenizer':<15}{'training':<9}{'checked':>8}{'refused by template':>21}{'disagreements':>15}")
  for (name, kind, training), tally in sorted(tallies.items()):
    bad += len(tally.disagreements)
    print(
      f"{name:<14}{kind:<15}{training:<9}{tally.checked:>8}{tally.template_refused:>21}{len(tally.disagreements):>15}"
    )
    for line in tally.disagreements[:3]:
      print("   ", line[:1500])
  return 1 if bad else 0


if __name__ == "__main__":
  sys.exit(main())
