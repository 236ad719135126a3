"""Terminal output: rich's console, tables and progress bars when `rich` is installed (`jaxdata[rich]`),
plain text otherwise, with the same calls.

>>> table = PlainTable(title="demo")
>>> table.add_column("name"); table.add_column("tokens", justify="right")
>>> table.add_row("web", "1,024")
>>> print(table.render())
demo
name  tokens
web    1,024
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import time
from collections.abc import Iterator
from typing import Any

from jaxdata.errors import installed_module

__all__ = [
  "Console",
  "PlainConsole",
  "PlainTable",
  "Table",
  "check_output_path",
  "flag_words",
  "progress_bar",
  "show",
  "working",
]

# Library errors name parameters (`out_dir`, `force=True`); on the command line the same thing is a flag.
PARAMETER_FLAGS = {
  "`out_dir`": "--out",
  "`force=True`": "--force",
  "`check_dtype=False`": "--no-dtype-check",
  "`overwrite=True`": "--overwrite",
  "`group_by_directory`": "--per-directory",
  "`dtype`": "--dtype",
  "`input_format`": "--format",
  "`check_roundtrip`": "--check-roundtrip N",
  "`tokens`": "--tokens",
  "`eos_id`": "--eos-id",
  "`bos_id`": "--bos-id",
  "`offsets`": "--offsets",
  "`dolma_metadata`": "--dolma-metadata",
}


def flag_words(message: str) -> str:
  """A library message in the CLI's words.

  >>> flag_words("x: already has a manifest.json; `force=True` rebuilds it")
  'x: already has a manifest.json; --force rebuilds it'
  """
  for parameter, flag in PARAMETER_FLAGS.items():
    message = message.replace(parameter, flag)
  return message


_MARKUP = re.compile(r"\[/?[a-z ]+\]")


def _rich(name: str) -> Any:
  return installed_module(f"rich.{name}")


class PlainTable:
  """The part of rich's Table the CLI uses, rendered as aligned columns."""

  def __init__(self, title: str | None = None, **_: Any) -> None:
    self.title = title
    self.columns: list[tuple[str, str]] = []
    self.rows: list[list[str]] = []

  def add_column(self, header: str, justify: str = "left", **_: Any) -> None:
    self.columns.append((header, justify))

  def add_row(self, *cells: Any) -> None:
    self.rows.append([str(c) for c in cells])

  def width(self) -> int:
    """Characters of the widest rendered line."""
    return max(len(line) for line in self.render().split("\n"))

  def stacked(self) -> str:
    """Each row as `column: value` lines: what a terminal too narrow for the table shows."""
    lines = [self.title] if self.title else []
    label = max(len(h) for h, _ in self.columns)
    for row in self.rows:
      lines.append("")
      lines.extend(f"{h.rjust(label)}: {cell}" for (h, _), cell in zip(self.columns, row) if cell)
    return "\n".join(lines)

  def render(self) -> str:
    widths = [max([len(h), *(len(r[i]) for r in self.rows)]) for i, (h, _) in enumerate(self.columns)]

    def line(cells: list[str]) -> str:
      return "  ".join(
        c.rjust(w) if justify == "right" else c.ljust(w) for c, w, (_, justify) in zip(cells, widths, self.columns)
      ).rstrip()

    lines = [self.title] if self.title else []
    return "\n".join([*lines, line([h for h, _ in self.columns]), *(line(r) for r in self.rows)])


class PlainConsole:
  """The part of rich's Console the CLI uses: print text (markup stripped) or a table."""

  def __init__(self, **_: Any) -> None:
    self.width = 120
    self.is_terminal = sys.stdout.isatty()

  def print(self, value: Any = "", style: str | None = None, markup: bool = True, **_: Any) -> None:
    text = value.render() if isinstance(value, PlainTable) else str(value)
    print(_MARKUP.sub("", text) if markup else text)


class _PlainProgress:
  """Progress as a line on stderr at most once a second (and at the end of each phase)."""

  def __init__(self, disable: bool) -> None:
    self.disable, self.shown = disable, 0.0
    self.tasks: dict[str, dict[str, Any]] = {}

  def __enter__(self) -> _PlainProgress:
    return self

  def __exit__(self, *exc: object) -> None:
    pass

  def add_task(self, description: str, total: int = 0, **fields: Any) -> str:
    self.tasks[description] = {"total": total, **fields}
    return description

  def update(self, task: str, completed: int = 0, **fields: Any) -> None:
    now = time.monotonic()
    state = self.tasks[task]
    finished = completed >= state["total"]
    if self.disable or state.get("said_finished") or (now - self.shown < 1.0 and not finished):
      return  # at most once a second, and a finished phase once
    self.shown = now
    state.update(fields, said_finished=finished)
    print(f"{task}: {state.get('amount', completed)}", file=sys.stderr)


_console, _table, _progress = _rich("console"), _rich("table"), _rich("progress")
Console: Any = _console.Console if _console is not None else PlainConsole
Table: Any = PlainTable  # rendered by `show`: rich's table when it fits the console, else stacked rows


def show(console: Any, table: PlainTable) -> None:
  """Prints `table` at the console's width: rich's table (or aligned text) when it fits, else one
  `column: value` block per row, so nothing is cut at 80 columns."""
  if _table is not None and not isinstance(console, PlainConsole):
    rich_table = _table.Table(title=table.title)
    for header, justify in table.columns:
      rich_table.add_column(header, justify=justify)
    for row in table.rows:
      rich_table.add_row(*row)
    natural = console.measure(rich_table, options=console.options.update(max_width=1 << 16)).maximum
    if natural <= console.width:  # rich would squeeze (and cut) columns to fit: stack the rows instead
      console.print(rich_table)
      return
  elif table.width() <= console.width:
    console.print(table.render(), markup=False)
    return
  console.print(table.stacked(), markup=False)


def progress_bar(console: Any, disable: bool) -> Any:
  """A bar per phase of a conversion, its amount in the phase's own unit (the `amount` field, text):
  rich's bar on a terminal, else plain lines on stderr (rich's bar would leave a blank line on stdout)."""
  if _progress is None or not getattr(console, "is_terminal", False):
    return _PlainProgress(disable)
  rich = _progress
  return rich.Progress(
    rich.TextColumn("{task.description}"),
    rich.BarColumn(),
    rich.TextColumn("{task.fields[amount]}"),
    rich.TimeElapsedColumn(),
    console=console,
    disable=disable,
    refresh_per_second=5,
  )


@contextlib.contextmanager
def working(console: Any, quiet: bool, what: str) -> Iterator[None]:
  """While a step of several seconds runs: a spinner on a terminal (rich), else one line on stderr."""
  if quiet:
    yield
  elif hasattr(console, "status") and console.is_terminal:
    with console.status(what):
      yield
  else:
    print(f"{what} ...", file=sys.stderr, flush=True)
    yield


def check_output_path(path: str | None, flag: str) -> None:
  """Fails at once where a file asked for cannot be written, not after the work that makes it."""
  if path is None:
    return
  directory = os.path.dirname(os.path.abspath(path))
  if not os.path.isdir(directory):
    raise FileNotFoundError(f"{flag} {path}: the directory {directory} does not exist")
  if os.path.isdir(path):
    raise IsADirectoryError(f"{flag} {path}: is a directory; give a file name")
