"""Reading documents out of JSONL, Parquet and plain-text input files.

Every document comes with a location (``file:line`` or ``file:row``), so a
malformed one is reported precisely. With ``skip_invalid`` a bad document is
counted in an `InvalidLog` instead of raising; nothing is dropped silently.
"""

from __future__ import annotations

import dataclasses
import glob
import gzip
import json
import os
import re
import zlib
from typing import IO, Iterator, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from jaxdata.errors import InputFormatError
from jaxdata.tools.formats import INPUT_FORMATS, TEXT_MODES

__all__ = [
    "INPUT_FORMATS",
    "TEXT_MODES",
    "InvalidLog",
    "detect_format",
    "expand_inputs",
    "iter_documents",
]

_SUFFIX_FORMATS = {
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".json": "jsonl",
    ".parquet": "parquet",
    ".txt": "text",
    ".text": "text",
    ".md": "text",
}
_PARAGRAPH_BREAK = re.compile(r"\n[ \t]*\n")
MAX_EXAMPLES = 20


@dataclasses.dataclass
class InvalidLog:
  """Counts skipped invalid documents and keeps the first few messages."""

  skip_invalid: bool = False
  count: int = 0
  examples: list[str] = dataclasses.field(default_factory=list)

  def report(self, message: str) -> None:
    if not self.skip_invalid:
      raise InputFormatError(message)
    self.count += 1
    if len(self.examples) < MAX_EXAMPLES:
      self.examples.append(message)


def expand_inputs(inputs: Sequence[str]) -> list[str]:
  """Files, directories (recursively) and globs -> sorted unique file list."""
  found: list[str] = []
  for item in inputs:
    if os.path.isdir(item):
      for root, _, names in os.walk(item):
        found.extend(os.path.join(root, n) for n in names)
    elif os.path.isfile(item):
      found.append(item)
    else:
      matches = [m for m in glob.glob(item, recursive=True) if os.path.isfile(m)]
      if not matches:
        raise FileNotFoundError(f"input: {item} does not exist")
      found.extend(matches)
  # Sorting makes the output independent of the order files were listed in.
  return sorted(set(found))


def detect_format(path: str, requested: str = "auto") -> str:
  """The input format of `path`: `requested`, or from its suffix when "auto"."""
  if requested != "auto":
    if requested not in INPUT_FORMATS:
      raise ValueError(f"format: {requested!r} is not one of {INPUT_FORMATS} or 'auto'")
    return requested
  base = path[:-3] if path.endswith(".gz") else path
  suffix = os.path.splitext(base)[1].lower()
  if suffix not in _SUFFIX_FORMATS:
    raise ValueError(
        f"{path}: cannot tell the input format from the suffix {suffix!r}; "
        f"pass --format ({', '.join(INPUT_FORMATS)})"
    )
  return _SUFFIX_FORMATS[suffix]


def iter_documents(
    path: str,
    fmt: str,
    field: str,
    text_mode: str,
    invalid: InvalidLog,
) -> Iterator[str]:
  """Yields the text of every valid document of one input file, in order.
  A file that cannot be decompressed or decoded is an InputFormatError naming it."""
  if fmt not in INPUT_FORMATS:
    raise ValueError(f"format: {fmt!r} is not one of {INPUT_FORMATS}")
  try:
    if fmt == "jsonl":
      yield from _iter_jsonl(path, field, invalid)
    elif fmt == "parquet":
      yield from _iter_parquet(path, field, invalid)
    else:
      yield from _iter_text(path, text_mode, invalid)
  except (EOFError, zlib.error, gzip.BadGzipFile) as e:  # a truncated or foreign .gz
    raise InputFormatError(f"{path}: not a readable gzip file ({str(e)[:200] or type(e).__name__})") from e
  except pa.ArrowException as e:  # a damaged Parquet row group
    raise InputFormatError(f"{path}: not a readable Parquet file ({str(e)[:200]})") from e


def _open_binary(path: str) -> IO[bytes]:
  return gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb")


def _iter_jsonl(path: str, field: str, invalid: InvalidLog) -> Iterator[str]:
  with _open_binary(path) as f:
    for line_number, line in enumerate(f, start=1):
      if not line.strip():
        continue  # a blank line holds no record
      where = f"{path}:{line_number}"
      try:
        record = json.loads(line)
      except json.JSONDecodeError as e:
        invalid.report(f"{where}: malformed JSON ({e.msg} at column {e.colno})")
        continue
      except UnicodeDecodeError as e:
        invalid.report(f"{where}: not valid UTF-8 ({e.reason})")
        continue
      if not isinstance(record, dict):
        invalid.report(f"{where}: expected a JSON object, got {type(record).__name__}")
        continue
      if field not in record:
        invalid.report(f"{where}: missing field {field!r}")
        continue
      text = record[field]
      if not isinstance(text, str):
        invalid.report(
            f"{where}: field {field!r} is {type(text).__name__}, not a string"
        )
        continue
      if b"\\u" in line and _has_lone_surrogate(text):  # only a \u escape can carry one
        invalid.report(f"{where}: field {field!r} holds a lone surrogate (a \\uD800-\\uDFFF escape), not text")
        continue
      yield text


def _has_lone_surrogate(text: str) -> bool:
  try:
    text.encode("utf-8")
  except UnicodeEncodeError:
    return True
  return False


def _iter_parquet(path: str, column: str, invalid: InvalidLog) -> Iterator[str]:
  try:
    parquet = pq.ParquetFile(path)
  except (pa.ArrowInvalid, OSError) as e:
    raise InputFormatError(f"{path}: not a readable Parquet file ({e})") from e
  schema = parquet.schema_arrow
  if column not in schema.names:
    raise InputFormatError(
        f"{path}: no column {column!r} (columns: {', '.join(schema.names)})"
    )
  kind = schema.field(column).type
  if not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
    raise InputFormatError(f"{path}: column {column!r} has type {kind}, not string")
  row = 0
  batches = parquet.iter_batches(columns=[column], batch_size=4096)
  while True:
    try:
      batch = next(batches, None)
    except (pa.ArrowException, OSError) as e:  # a damaged row group: Arrow raises a bare OSError
      raise InputFormatError(f"{path}: not a readable Parquet file near row {row} ({str(e)[:200]})") from e
    if batch is None:
      return
    for text in batch.column(0).to_pylist():
      if text is None:
        invalid.report(f"{path}:row {row}: column {column!r} is null")
      else:
        yield text
      row += 1


def _iter_text(path: str, text_mode: str, invalid: InvalidLog) -> Iterator[str]:
  if text_mode not in TEXT_MODES:
    raise ValueError(f"text_mode: {text_mode!r} is not one of {TEXT_MODES}")
  with _open_binary(path) as f:
    if text_mode == "line":
      for line_number, line in enumerate(f, start=1):
        try:
          yield line.decode("utf-8").rstrip("\r\n")
        except UnicodeDecodeError as e:
          invalid.report(f"{path}:{line_number}: not valid UTF-8 ({e.reason})")
      return
    raw = f.read()
  try:
    text = raw.decode("utf-8")
  except UnicodeDecodeError as e:
    line_number = raw.count(b"\n", 0, e.start) + 1
    invalid.report(f"{path}:{line_number}: not valid UTF-8 ({e.reason})")
    return
  if text_mode == "file":
    yield text
  else:
    yield from (p.strip("\n") for p in _PARAGRAPH_BREAK.split(text))
