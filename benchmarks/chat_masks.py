"""Chat conversion's mask rules, timed: generation blocks against whole assistant turns.

    python -m benchmarks.chat_masks [--messages 16] [--repetitions 50]

One conversation of `--messages` messages (user / assistant turns), encoded
by `ExampleEncoder` with three template layouts (ChatML, Llama 3.1, Qwen3)
with `{% generation %}` blocks (transformers' assistant mask) and without
them (whole assistant turns located by sentinel renderings, which render
the conversation and its prefixes a few times per trained message): the
milliseconds per conversation of each, and the ratio.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time

from benchmarks import TEST_SUPPORT

sys.path.insert(0, TEST_SUPPORT)
import chat_families
from jaxdata.conversion.examples import ExampleEncoder


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--messages", type=int, default=16)
  parser.add_argument("--repetitions", type=int, default=50)
  args = parser.parse_args()
  tokenizer = chat_families.build_tokenizer(tempfile.mkdtemp())
  conversation = []
  for k in range(args.messages // 2):
    conversation.append({"role": "user", "content": f"question {k} about the weather in Paris"})
    conversation.append({"role": "assistant", "content": f"answer {k}: it is sunny " * 5})
  print(f"{'layout':10s} {'blocks ms':>10s} {'whole turns ms':>15s} {'ratio':>6s}")
  for name in ("chatml", "llama3.1", "qwen3"):
    times = []
    for template in (chat_families.FAMILIES[name], chat_families.without_blocks(chat_families.FAMILIES[name])):
      encoder = ExampleEncoder("chat", tokenizer, "messages", template=template)
      encoder.encode({"messages": conversation}, "x")
      started = time.perf_counter()
      for _ in range(args.repetitions):
        encoder.encode({"messages": conversation}, "x")
      times.append((time.perf_counter() - started) / args.repetitions * 1000)
    print(f"{name:10s} {times[0]:10.2f} {times[1]:15.2f} {times[1] / times[0]:6.1f}")


if __name__ == "__main__":
  main()
