"""Work units of a conversion: input files cut into pieces that tokenize independently.

A unit is a byte range of a line-oriented file (JSONL, or text one document
per line) that starts and ends at line starts, a range of Parquet row
groups, or a whole file (compressed, or a text file read whole). Units are
numbered in input order and every unit knows the line (or row) its first
record has, so errors name the true line and the documents come out in the
same order whatever cuts them::

    big.jsonl (1 GB)   |unit 0: bytes 0..33554471, lines 1..|unit 1: from line 40213 ...|  ...
    small.jsonl        |unit k: the whole file|
    data.parquet       |unit k+1: row groups 0-3, rows 0..|unit k+2: row groups 4-7 ...|

Cutting needs one sequential scan of each splittable file, to count lines
at each cut; it runs before tokenizing and reports its progress.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

from jaxdata.conversion.inputs import arrow

__all__ = ["WorkUnit", "limited_lines", "line_units", "parquet_units"]

SCAN_BLOCK = 16 << 20


@dataclasses.dataclass(frozen=True)
class WorkUnit:
  """Records [start, end) of one input file; `first` is the first record's line (1-based) or row (0-based)."""

  index: int
  file_index: int
  path: str
  fmt: str
  start: int = 0  # byte offset (line formats) or first row group (Parquet)
  end: int | None = None  # None: to the end of the file
  first: int = 1
  size: int = 0  # input bytes the unit covers (for progress)


def _line_cuts(path: str, unit_bytes: int, on_scan: Callable[[int], None]) -> list[tuple[int, int]]:
  """(byte offset, line number) of every cut: the first line start at or after each
  previous cut + unit_bytes, so every unit but the last holds at least unit_bytes."""
  cuts, target, offset, lines = [(0, 1)], unit_bytes, 0, 0  # lines: newlines before `offset`
  with open(path, "rb") as f:
    while block := f.read(SCAN_BLOCK):
      while target - 1 < offset + len(block):
        newline = block.find(b"\n", max(target - 1 - offset, 0))  # a line starting at >= target follows it
        if newline < 0:
          break
        cuts.append((offset + newline + 1, 1 + lines + block.count(b"\n", 0, newline + 1)))
        target = offset + newline + 1 + unit_bytes
      lines += block.count(b"\n")
      offset += len(block)
      on_scan(len(block))
  return [c for c in cuts if c[0] < offset]


def line_units(whole: WorkUnit, unit_bytes: int, on_scan: Callable[[int], None]) -> list[WorkUnit]:
  """A line-oriented file (`whole`, a local uncompressed one) as byte ranges that start at line starts,
  each of at least `unit_bytes` but the last, numbered from `whole.index`."""
  cuts = _line_cuts(whole.path, unit_bytes, on_scan)
  bounds = [c[0] for c in cuts[1:]] + [whole.size]
  return [
    WorkUnit(whole.index + i, whole.file_index, whole.path, whole.fmt, start, end, line, end - start)
    for i, ((start, line), end) in enumerate(zip(cuts, bounds))
  ]


def parquet_units(whole: WorkUnit, unit_bytes: int) -> list[WorkUnit]:
  """A Parquet file (`whole`) as runs of row groups of about unit_bytes (by their compressed size)."""
  first_index, file_index, path = whole.index, whole.file_index, whole.path
  metadata = arrow()[1].ParquetFile(path).metadata
  units: list[WorkUnit] = []
  group, row = 0, 0
  while group < metadata.num_row_groups:
    start, start_row, size = group, row, 0
    while group < metadata.num_row_groups and (size == 0 or size < unit_bytes):
      size += metadata.row_group(group).total_byte_size
      row += metadata.row_group(group).num_rows
      group += 1
    units.append(WorkUnit(first_index + len(units), file_index, path, "parquet", start, group, start_row, size))
  return units


def limited_lines(f: Any, limit: int) -> Iterator[bytes]:  # a binary file
  """The lines of `f` that start in the next `limit` bytes."""
  for line in f:
    if limit <= 0:
      return
    limit -= len(line)
    yield line
