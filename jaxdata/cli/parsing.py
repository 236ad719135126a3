"""The `jaxdata` command's parser: each handler module registers its own commands, and a mistake
gets a did-you-mean from the parser's own commands, flags and choices.

    root = Parser(prog="jaxdata")
    commands = Commands(root)          # handler modules call commands.add(name, help) -> a Parser
    root.parse_args(argv)              # a mistyped command, flag or choice: "... did you mean 'plan'?"

Every `Parser` remembers the flags and choices it was given (`add_argument`),
so the suggestion comes from them and the command line as typed, never from
argparse's error text or its private attributes.

>>> root = Parser(prog="x"); commands = Commands(root)
>>> sub = commands.add("plan", "plan a run"); _ = sub.add_argument("--tokens")
>>> root.suggestion(["plna"]), root.suggestion(["plan", "--tokes", "5"])
("did you mean 'plan'?", "did you mean '--tokens'?")
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

__all__ = ["Commands", "Parser", "count", "fraction", "parse_size", "positive_count", "positive_number"]

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?i?b?)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}


def parse_size(text: str) -> int:
  """'256MB' -> 256_000_000, '64MiB' -> 67_108_864, '4096' -> 4096.

  >>> parse_size("64MiB"), parse_size("1.5k")
  (67108864, 1500)
  """
  match = _SIZE.match(text)
  if not match:
    raise argparse.ArgumentTypeError(f"size: cannot read {text!r} (try 256MB or 64MiB)")
  number, unit = float(match.group(1)), (match.group(2) or "").lower()
  prefix = unit[:1] if unit[:1] in "kmgt" else ""
  scale = 1024 ** "_kmgt".index(prefix) if "i" in unit else _UNITS[prefix]
  return int(number * scale)


def count(text: str) -> int:
  """An argparse type: an int >= 0 (a one-line error naming the value otherwise).

  >>> count("0"), positive_count("3")
  (0, 3)
  """
  return _int_at_least(text, 0)


def positive_count(text: str) -> int:
  """An argparse type: an int >= 1."""
  return _int_at_least(text, 1)


def _int_at_least(text: str, low: int) -> int:
  try:
    value = int(text)
  except ValueError:
    raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
  if value < low:
    raise argparse.ArgumentTypeError(f"{value} is below {low}")
  return value


def positive_number(text: str) -> float:
  """An argparse type: a finite number > 0."""
  value = _finite(text)
  if value <= 0:
    raise argparse.ArgumentTypeError(f"{text} is not above 0")
  return value


def fraction(text: str) -> float:
  """An argparse type: a number in [0, 1] (a share).

  >>> fraction("0.25")
  0.25
  """
  value = _finite(text)
  if not 0 <= value <= 1:
    raise argparse.ArgumentTypeError(f"{text} is not a share between 0 and 1")
  return value


def _finite(text: str) -> float:
  try:
    value = float(text)
  except ValueError:
    raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
  if value != value or value in (float("inf"), float("-inf")):
    raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
  return value


class Parser(argparse.ArgumentParser):
  """argparse's parser, remembering its flags and choices (and, at the root, its commands)."""

  def __init__(self, *args: Any, **kwargs: Any) -> None:
    # Set before argparse's own __init__, which adds --help through add_argument.
    self.flags: list[str] = [f for parent in kwargs.get("parents", ()) for f in getattr(parent, "flags", ())]
    self.choices: dict[str, tuple[str, ...]] = {}  # flag -> the values it takes
    self.commands: dict[str, Parser] = {}  # at the root: command name -> its parser
    self.root: Parser = self
    self.argv: list[str] = []
    super().__init__(*args, **kwargs)

  def add_argument(self, *names: Any, **kwargs: Any) -> argparse.Action:
    action = super().add_argument(*names, **kwargs)
    flags = [n for n in names if isinstance(n, str) and n.startswith("-")]
    self.flags += flags
    if kwargs.get("choices") is not None:
      self.choices.update(dict.fromkeys(flags, tuple(str(c) for c in kwargs["choices"])))
    return action

  def parse_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> Any:  # type: ignore[override]
    self.argv = list(sys.argv[1:] if args is None else args)
    return super().parse_args(self.argv, namespace)

  def error(self, message: str) -> NoReturn:
    hint = self.root.suggestion(self.root.argv)
    super().error(f"{message}; {hint}" if hint else message)

  def suggestion(self, argv: Sequence[str]) -> str:
    """A did-you-mean for the first mistake in `argv` (a command, a flag or a choice), or ""."""
    words = [w for w in argv if not w.startswith("-")]
    if not words or not self.commands:
      return ""
    if words[0] not in self.commands:
      return _closest(words[0], list(self.commands))
    command = self.commands[words[0]]
    known = command.flags + self.flags
    for i, word in enumerate(argv):
      if not word.startswith("-") or word == "-":
        continue
      flag, _, attached = word.partition("=")
      if flag not in known:
        return _closest(flag, known)
      value = attached or (argv[i + 1] if i + 1 < len(argv) else "")
      if flag in command.choices and value and value not in command.choices[flag]:
        return _closest(value, list(command.choices[flag]))
    return ""


def _closest(word: str, options: list[str]) -> str:
  close = difflib.get_close_matches(word, options, n=1)
  return f"did you mean {close[0]!r}?" if close else ""


# One example per command, shown under its --help (each runs as written, given the files it names).
EXAMPLES = {
  "convert": "jaxdata convert corpus/web.jsonl --out data/web --name web",
  "reference": "jaxdata reference data/pairs --fn my_model:logprobs --model-id sft-v3",
  "index": "jaxdata index shards/ --dtype uint32",
  "inspect": "jaxdata inspect data/web data/code",
  "cache": "jaxdata cache prune --cache-dir /mnt/ssd/jaxdata-cache --dry-run",
  "plan": "jaxdata plan pipeline.yaml --tokens 10B --png plan.png",
  "audit": "jaxdata audit pipeline.yaml --hosts 16 --steps 200",
  "doctor": "jaxdata doctor run/stats.jsonl --config pipeline.yaml",
  "report": "jaxdata report run/stats.jsonl",
  "mesh": "jaxdata mesh --tpu v5p-128 --config pipeline.yaml",
  "bench": "jaxdata bench pipeline.yaml --steps 200",
  "demo": "jaxdata demo",
  "ablate": "jaxdata ablate --candidates uniform.yaml doremi.yaml --tokens 200k",
  "from-megatron": "jaxdata from-megatron --data-path 0.3 data/web 0.7 data/code --out train.yaml",
}


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
  """Keeps an example's lines as written, and shows each flag's default where its help does not say it."""

  def _get_help_string(self, action: argparse.Action) -> str:
    text = action.help or ""
    shown = action.default not in (None, False, argparse.SUPPRESS) and not isinstance(action.default, list)
    if shown and "default" not in text and action.option_strings:
      text += " (default: %(default)s)"
    return text


class Commands:
  """The root parser's commands: `add` gives each its parser, which takes the flags every command takes."""

  def __init__(self, root: Parser, common: Parser | None = None) -> None:
    self.root = root
    self.common = common
    self._subparsers = root.add_subparsers(dest="command", required=True, title="commands", metavar="COMMAND")

  def add(self, name: str, help: str) -> Parser:
    parents = [self.common] if self.common is not None else []
    example = f"example:\n  {EXAMPLES[name]}" if name in EXAMPLES else None
    parser = self._subparsers.add_parser(
      name, help=help, description=help, parents=parents, epilog=example, formatter_class=HelpFormatter
    )
    assert isinstance(parser, Parser)  # argparse makes subparsers of the root's class
    parser.root = self.root
    self.root.commands[name] = parser
    return parser
