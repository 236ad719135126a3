"""Reading documents out of JSONL, Parquet and plain-text input files (which files: input_files.py).

Every document comes with a location (``file:line`` or ``file:row``), so a malformed one is reported
precisely. With ``skip_invalid`` a bad document is counted in an `InvalidLog`: nothing is dropped silently.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable, Iterable, Iterator
from typing import IO, Any, cast

from jaxdata.conversion.compressed import CountingReader, open_binary, readable_archive
from jaxdata.conversion.input_files import is_compressed
from jaxdata.conversion.options import TEXT_MODES
from jaxdata.conversion.remote_inputs import open_remote
from jaxdata.errors import Error, InputFormatError, optional_module
from jaxdata.sources.stores import is_remote

__all__ = ["InvalidLog", "LineRange", "Record", "arrow", "read_jsonl", "read_parquet", "read_text"]


@dataclasses.dataclass(frozen=True)
class LineRange:
  """The lines of a line-oriented file to read: `stream` (None: the whole file), the first of them line
  `first` (1-based), so that errors name the true line."""

  stream: Iterable[bytes] | None = None
  first: int = 1


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


def arrow() -> tuple[Any, Any]:
  """pyarrow and pyarrow.parquet (`jaxdata[parquet]`), for Parquet inputs only."""
  return (
    optional_module("pyarrow", "parquet", "reading Parquet"),
    optional_module("pyarrow.parquet", "parquet", "reading Parquet"),
  )


def _arrow_errors() -> tuple[type[BaseException], ...]:
  try:
    return (arrow()[0].ArrowException,)
  except ImportError:
    return ()


def read_jsonl(
  path: str, field: str, invalid: InvalidLog, lines: LineRange, on_bytes: Callable[[int], None], records: bool
) -> Iterator[Any]:
  """The valid documents of a JSONL file (`lines`: the lines to read, else the whole file): the text in
  `field`, or with `records` the whole `Record`. A file that cannot be decompressed or decoded is an
  InputFormatError naming it."""
  with readable_archive(path):
    yield from _iter_jsonl(path, field, invalid, lines.stream, lines.first, on_bytes, records=records)


def read_parquet(
  path: str,
  field: str,
  invalid: InvalidLog,
  row_groups: tuple[int, int] | None,
  first: int,
  on_bytes: Callable[[int], None],
  *,
  records: bool,
) -> Iterator[Any]:
  """The valid documents of a Parquet file's row groups [start, end) (None: all), the first row `first`."""
  with readable_archive(path):
    try:
      yield from _iter_parquet(path, field, invalid, row_groups, first, on_bytes, records=records)
    except _arrow_errors() as e:  # a damaged Parquet row group
      raise InputFormatError(f"{path}: not a readable Parquet file ({str(e)[:200]})") from e


def read_text(
  path: str, text_mode: str, invalid: InvalidLog, lines: LineRange, on_bytes: Callable[[int], None]
) -> Iterator[str]:
  """The documents of a plain-text file, cut as `text_mode` says (the file, paragraphs or lines)."""
  with readable_archive(path):
    yield from _iter_text(path, text_mode, invalid, lines.stream, lines.first, on_bytes)


def _lines(path: str, stream: Iterable[bytes] | None, on_bytes: Callable[[int], None]) -> Iterator[bytes]:
  if stream is not None:
    for line in stream:
      on_bytes(len(line))
      yield line
    return
  if not is_compressed(path):
    with open_binary(path) as f:
      for line in f:
        on_bytes(len(line))
        yield line
    return
  counted = CountingReader(open_remote(path) if is_remote(path) else open(path, "rb"))
  reported = 0
  with open_binary(path, cast(IO[bytes], counted)) as f:  # a RawIOBase reads as a binary file does
    for line in f:
      on_bytes(counted.count - reported)  # compressed bytes: what the file's size (the bar's total) counts
      reported = counted.count
      yield line
  on_bytes(counted.count - reported)


@dataclasses.dataclass(frozen=True)
class Record:
  """A whole input record (a JSONL object, a Parquet row) for fine-tuning examples, named for errors."""

  where: str  # file:line, or file:row N
  values: dict[str, Any]


def _iter_jsonl(
  path: str,
  field: str,
  invalid: InvalidLog,
  stream: Iterable[bytes] | None,
  first: int,
  on_bytes: Callable[[int], None],
  *,
  records: bool = False,
) -> Iterator[Any]:
  for line_number, line in enumerate(_lines(path, stream, on_bytes), start=first):
    if not line.strip():
      continue  # a blank line holds no record
    where = f"{path}:{line_number}"
    try:
      record = json.loads(line, object_pairs_hook=_unique_keys)
    except json.JSONDecodeError as e:
      invalid.report(f"{where}: malformed JSON ({e.msg} at column {e.colno})")
      continue
    except DuplicateKeyError as e:
      invalid.report(f"{where}: {e}")
      continue
    except UnicodeDecodeError as e:
      invalid.report(f"{where}: not valid UTF-8 ({e.reason})")
      continue
    if not isinstance(record, dict):
      invalid.report(f"{where}: expected a JSON object, got {type(record).__name__}")
      continue
    if records:
      yield Record(where, record)
      continue
    if field not in record:
      invalid.report(f"{where}: missing field {field!r}")
      continue
    text = record[field]
    if not isinstance(text, str):
      hint = " (token ids: --format chat or prompt-completion read input_ids with labels or mask)"
      invalid.report(f"{where}: field {field!r} is {type(text).__name__}, not a string" + hint * isinstance(text, list))
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


def _iter_parquet(
  path: str,
  column: str,
  invalid: InvalidLog,
  row_groups: tuple[int, int] | None,
  first: int,
  on_bytes: Callable[[int], None],
  *,
  records: bool = False,
) -> Iterator[Any]:
  pa, pq = arrow()
  try:
    parquet = pq.ParquetFile(open_remote(path) if is_remote(path) else path)
  except (pa.ArrowInvalid, OSError) as e:
    raise InputFormatError(f"{path}: not a readable Parquet file ({e})") from e
  schema = parquet.schema_arrow
  if records:
    yield from _parquet_records(path, parquet, row_groups, first, on_bytes)
    return
  if column not in schema.names:
    raise InputFormatError(f"{path}: no column {column!r} (columns: {', '.join(schema.names)})")
  kind = schema.field(column).type
  if not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
    raise InputFormatError(f"{path}: column {column!r} has type {kind}, not string")
  row = first
  groups = list(range(*row_groups)) if row_groups is not None else None
  batches = parquet.iter_batches(columns=[column], batch_size=4096, row_groups=groups)
  while True:
    try:
      batch = next(batches, None)
    except (pa.ArrowException, OSError) as e:  # a damaged row group: Arrow raises a bare OSError
      raise InputFormatError(f"{path}: not a readable Parquet file near row {row} ({str(e)[:200]})") from e
    if batch is None:
      return
    on_bytes(batch.nbytes)
    for text in batch.column(0).to_pylist():
      if text is None:
        invalid.report(f"{path}:row {row}: column {column!r} is null")
      else:
        yield text
      row += 1


def _parquet_records(
  path: str, parquet: Any, row_groups: tuple[int, int] | None, first: int, on_bytes: Callable[[int], None]
) -> Iterator[Record]:
  pa, _ = arrow()
  groups = list(range(*row_groups)) if row_groups is not None else None
  batches, row = parquet.iter_batches(batch_size=1024, row_groups=groups), first
  while True:
    try:
      batch = next(batches, None)
    except (pa.ArrowException, OSError) as e:
      raise InputFormatError(f"{path}: not a readable Parquet file near row {row} ({str(e)[:200]})") from e
    if batch is None:
      return
    on_bytes(batch.nbytes)
    for values in batch.to_pylist():
      yield Record(f"{path}:row {row}", {k: _without_filled_nulls(v) for k, v in values.items()})
      row += 1


class DuplicateKeyError(Error, ValueError):
  """A JSON object that names a key twice (Python's json would keep the last value, silently)."""


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
  """json's object hook: the object, or DuplicateKeyError naming the key given twice."""
  out = dict(pairs)
  if len(out) != len(pairs):
    seen: set[str] = set()
    twice = next(k for k, _ in pairs if k in seen or seen.add(k))  # type: ignore[func-returns-value]
    raise DuplicateKeyError(f"key {twice!r} appears twice in one JSON object (which value is meant?)")
  return out


def _without_filled_nulls(value: Any) -> Any:
  """A struct inside a list (a message, a tool call, a content part) without its null fields: Arrow
  gives every struct of a column every key, null where the row had none, and a chat template that
  tests `is defined` would see keys the user's file never held. `content` stays (a null content is
  the user's: an assistant message of tool calls only)."""
  if isinstance(value, list):
    return [_without_filled_nulls(v) for v in value]
  if isinstance(value, dict):
    return {k: _without_filled_nulls(v) for k, v in value.items() if v is not None or k == "content"}
  return value


def _iter_text(
  path: str,
  text_mode: str,
  invalid: InvalidLog,
  stream: Iterable[bytes] | None,
  first: int,
  on_bytes: Callable[[int], None],
) -> Iterator[str]:
  if text_mode not in TEXT_MODES:
    raise ValueError(f"text_mode: {text_mode!r} is not one of {TEXT_MODES}")
  if text_mode == "line":
    for line_number, line in enumerate(_lines(path, stream, on_bytes), start=first):
      try:
        yield line.decode("utf-8").rstrip("\r\n")
      except UnicodeDecodeError as e:
        invalid.report(f"{path}:{line_number}: not valid UTF-8 ({e.reason})")
    return
  with open_binary(path) as f:
    raw = f.read()
  on_bytes(len(raw))
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
