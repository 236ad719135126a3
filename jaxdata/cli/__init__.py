"""The ``jaxdata`` command: convert, index, inspect, plan, audit, ablate, doctor, report, bench, mesh, demo.

    convert.py    `jaxdata convert`: the local or the Beam runner, progress and a summary
    data.py       `jaxdata index`, `from-megatron` and `inspect`
    planning.py   `jaxdata audit`, `jaxdata doctor`, `jaxdata report`, `jaxdata mesh`, `jaxdata bench`; the parsers
    plan_command.py  `jaxdata plan`: the run a config makes, before it runs
    demo.py       `jaxdata demo` and `ablate`
    parsing.py    `Parser` and `Commands`: each module above registers its commands
                  (its `register_*` function); a mistake gets a did-you-mean from the parser's own choices
    legends.py    what each column of `jaxdata plan` and `jaxdata mesh` means
    output.py     the console, tables and progress bars (rich's when installed)

The handler modules are light and reach what needs jax through
`jaxdata._lazy.lazy_module`, so `jaxdata --help` and `jaxdata inspect` never
load jax, grain, orbax, pyarrow or matplotlib.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from jaxdata import __version__
from jaxdata.cli import convert, data, demo, planning
from jaxdata.cli.output import Console, flag_words
from jaxdata.cli.parsing import Commands, Parser, parse_size
from jaxdata.errors import Error

__all__ = ["build_parser", "main", "parse_size"]


def _common() -> Parser:
  """Flags every command takes, before or after the command's name."""
  common = Parser(add_help=False)
  common.add_argument(
    "-q",
    "--quiet",
    action="store_true",
    default=argparse.SUPPRESS,
    help="no progress output (allowed before or after the command)",
  )
  return common


def build_parser() -> Parser:
  """The `jaxdata` command's argument parser: each handler module registers its own commands."""
  common = _common()
  parser = Parser(prog="jaxdata", description="JAX/TPU-native input pipeline for language models.", parents=[common])
  parser.add_argument("--version", action="version", version=f"jaxdata {__version__}")
  commands = Commands(parser, common)
  for register in (
    convert.register_convert,
    convert.register_reference,
    data.register_data,
    demo.register_demo,
    planning.register_planning,
  ):
    register(commands)
  return parser


def main(argv: Sequence[str] | None = None) -> int:
  args = build_parser().parse_args(argv)
  args.quiet = getattr(args, "quiet", False)
  console = Console(highlight=False)
  if not console.is_terminal and "COLUMNS" not in os.environ:
    console.width = max(console.width, 120)  # logs and pipes: do not squeeze tables (COLUMNS sets a width)
  try:
    return args.handler(args, console)
  except (Error, ValueError, OSError, ImportError) as e:  # ImportError: an extra that is not installed
    # Our errors are `jaxdata.Error`s (a WorkerStartError too), checks of values ValueErrors, and
    # OSErrors missing / existing files; each message names file and problem: one line, no traceback.
    print(f"jaxdata {args.command}: error: {flag_words(str(e))}", file=sys.stderr)
    return 1
  except KeyboardInterrupt:  # Ctrl-C: the commands that write remove what is partial on the way out
    print(f"jaxdata {args.command}: interrupted (Ctrl-C); what it had begun to write was removed", file=sys.stderr)
    return 130


if __name__ == "__main__":
  sys.exit(main())
