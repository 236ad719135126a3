"""Input formats as registered types: each names the files it reads, how a large file of it is cut into
units, and how a unit's documents are read; its options are its fields (a frozen dataclass), made from a
conversion's options by `from_options`. Planning asks each file's format once (`format_of`); every unit
is read through its format's type, so a new format (images next) is one new class::

    format       options   files                                units of a large local file  documents
    jsonl        field     .jsonl .ndjson .json                 by lines                     texts, or whole records
    text         mode      .txt .text .md                       by lines (mode: line)        the file, paragraphs or lines
    parquet      field     .parquet                             by row groups                texts, or whole records
    arrayrecord  feature   *.array_record[-00000-of-01024]      the whole file               tf.train.Example features
    tfrecord     feature   *.tfrecord[s][-00003-of-00010]       the whole file               tf.train.Example features
    webdataset             .tar (WebDataset shards)             the whole file               samples: an image and its text

(a `.gz` / `.zst` suffix after any of them: read decompressed, one unit).

>>> [format_of(p) for p in ("a.jsonl.gz", "c4-train.array_record-00000-of-01024", "notes.txt")]
['jsonl', 'arrayrecord', 'text']
"""

from __future__ import annotations

import abc
import dataclasses
import json
import os
import re
import tarfile
import zlib
from collections.abc import Callable, Iterator
from typing import Any, ClassVar

from jaxdata.conversion.compressed import open_binary
from jaxdata.conversion.example_records import iter_example_documents
from jaxdata.conversion.input_files import file_sizes, is_compressed
from jaxdata.conversion.inputs import InvalidLog, LineRange, Record, read_jsonl, read_parquet, read_text
from jaxdata.conversion.options import INPUT_FORMATS, ConvertOptions
from jaxdata.conversion.work_units import WorkUnit, limited_lines, line_units, parquet_units
from jaxdata.errors import InputFormatError
from jaxdata.sources.stores import is_remote

__all__ = [
  "INPUT_FORMAT_TYPES",
  "DocumentRead",
  "InputFormat",
  "Jsonl",
  "Text",
  "configured_format",
  "format_of",
  "plan_units",
  "unit_documents",
]


@dataclasses.dataclass(frozen=True)
class DocumentRead:
  """What a unit's read reports to and asks: where invalid documents are counted, who hears the bytes
  read, and whether whole records (fine-tuning examples) are read rather than texts."""

  invalid: InvalidLog
  on_bytes: Callable[[int], None] = lambda n: None
  records: bool = False


@dataclasses.dataclass(frozen=True)
class InputFormat(abc.ABC):
  """One kind of input file (module docstring), with its own options as its fields; its type is registered
  in `INPUT_FORMAT_TYPES` by its name, and `from_options` makes it from a conversion's options."""

  name: ClassVar[str]
  suffixes: ClassVar[tuple[str, ...]] = ()

  @classmethod
  def reads(cls, base: str) -> bool:
    """Whether a file named `base` (its compression suffix removed) is of this format."""
    return os.path.splitext(base)[1].lower() in cls.suffixes

  @classmethod
  def from_options(cls, options: ConvertOptions) -> InputFormat:
    """This format with the options a conversion gives it. Default: a format of no options."""
    return cls()

  def cut(self, unit: WorkUnit, unit_bytes: int, on_scan: Callable[[int], None]) -> list[WorkUnit]:
    """`unit` (a whole local, uncompressed file larger than `unit_bytes`) as units of about `unit_bytes`;
    numbered from `unit.index`. Default: it stays whole."""
    return [unit]

  @abc.abstractmethod
  def documents(self, unit: WorkUnit, read: DocumentRead) -> Iterator[Any]:
    """The valid documents of `unit`, in order (errors name the file and line, row or record)."""


INPUT_FORMAT_TYPES: dict[str, type[InputFormat]] = {}


def _registered(cls: type[InputFormat]) -> type[InputFormat]:
  INPUT_FORMAT_TYPES[cls.name] = cls
  return cls


def configured_format(name: str, options: ConvertOptions) -> InputFormat:
  """The registered format `name` with the options `options` give it."""
  return INPUT_FORMAT_TYPES[name].from_options(options)


@dataclasses.dataclass(frozen=True)
class _LineFormat(InputFormat):
  """A line-oriented file: a unit is a byte range that starts and ends at line starts."""

  def _splits(self) -> bool:
    return True

  def cut(self, unit: WorkUnit, unit_bytes: int, on_scan: Callable[[int], None]) -> list[WorkUnit]:
    return line_units(unit, unit_bytes, on_scan) if self._splits() else [unit]

  def documents(self, unit: WorkUnit, read: DocumentRead) -> Iterator[Any]:
    if unit.end is None:
      yield from self._read(unit.path, read, LineRange())
      return
    with open_binary(unit.path) as f:
      f.seek(unit.start)
      yield from self._read(unit.path, read, LineRange(limited_lines(f, unit.end - unit.start), unit.first))

  @abc.abstractmethod
  def _read(self, path: str, read: DocumentRead, lines: LineRange) -> Iterator[Any]: ...


@_registered
@dataclasses.dataclass(frozen=True)
class Jsonl(_LineFormat):
  """JSON lines; `field`: the key whose string is a document (fine-tuning examples read whole records)."""

  name = "jsonl"
  suffixes = (".jsonl", ".ndjson", ".json")
  field: str = "text"

  @classmethod
  def from_options(cls, options: ConvertOptions) -> InputFormat:
    return cls(field=options.field)

  def _read(self, path: str, read: DocumentRead, lines: LineRange) -> Iterator[Any]:
    return read_jsonl(path, self.field, read.invalid, lines, read.on_bytes, read.records)


@_registered
@dataclasses.dataclass(frozen=True)
class Text(_LineFormat):
  """Plain text; `mode`: a document is the whole file, a paragraph or a line (`TEXT_MODES`)."""

  name = "text"
  suffixes = (".txt", ".text", ".md")
  mode: str = "file"

  @classmethod
  def from_options(cls, options: ConvertOptions) -> InputFormat:
    return cls(mode=options.text_mode)

  def _splits(self) -> bool:
    return self.mode == "line"  # documents or paragraphs may span any cut

  def _read(self, path: str, read: DocumentRead, lines: LineRange) -> Iterator[Any]:
    _no_records(path, self.name, read)
    return read_text(path, self.mode, read.invalid, lines, read.on_bytes)


@_registered
@dataclasses.dataclass(frozen=True)
class Parquet(InputFormat):
  """Parquet; `field`: the column whose string is a document (fine-tuning examples read whole rows)."""

  name = "parquet"
  suffixes = (".parquet",)
  field: str = "text"

  @classmethod
  def from_options(cls, options: ConvertOptions) -> InputFormat:
    return cls(field=options.field)

  def cut(self, unit: WorkUnit, unit_bytes: int, on_scan: Callable[[int], None]) -> list[WorkUnit]:
    return parquet_units(unit, unit_bytes)

  def documents(self, unit: WorkUnit, read: DocumentRead) -> Iterator[Any]:
    row_groups = None if unit.end is None else (unit.start, unit.end)
    first = 0 if unit.end is None else unit.first
    yield from read_parquet(unit.path, self.field, read.invalid, row_groups, first, read.on_bytes, records=read.records)


# MaxText / TFDS shard names: c4-train.array_record-00000-of-01024, data.tfrecord-00003-of-00010, x.tfrecords
_RECORD_NAME = re.compile(r"\.(?:(array_?record)|(tfrecords?))(?:-\d+-of-\d+)?$", re.IGNORECASE)


@dataclasses.dataclass(frozen=True)
class _ExampleRecords(InputFormat):
  """Files of `tf.train.Example` records: read whole; `feature`: the int64 (ids) or bytes (text) feature
  that is a document."""

  group: ClassVar[int]  # which group of _RECORD_NAME names this format
  feature: str = "text"

  @classmethod
  def reads(cls, base: str) -> bool:
    found = _RECORD_NAME.search(os.path.basename(base))
    return found is not None and found.group(cls.group) is not None

  @classmethod
  def from_options(cls, options: ConvertOptions) -> InputFormat:
    return cls(feature=options.field)

  def documents(self, unit: WorkUnit, read: DocumentRead) -> Iterator[Any]:
    _no_records(unit.path, self.name, read)
    yield from iter_example_documents(unit.path, self.name, self.feature, read.invalid, read.on_bytes)


@_registered
@dataclasses.dataclass(frozen=True)
class ArrayRecord(_ExampleRecords):
  name = "arrayrecord"
  group = 1


@_registered
@dataclasses.dataclass(frozen=True)
class TfRecord(_ExampleRecords):
  name = "tfrecord"
  group = 2


IMAGE_EXTENSIONS = ("jpg", "jpeg", "png", "webp", "gif", "bmp", "tif", "tiff")


@_registered
@dataclasses.dataclass(frozen=True)
class WebDataset(InputFormat):
  """WebDataset tar shards (read whole, streamed): a sample's members share a key (a member's name up to
  the first dot of its base name), its extension saying what each holds. A sample is one record: its image
  (jpg, png, webp, ...) as bytes under "image", "txt" as "text", "json" as its fields (a "caption", ...)."""

  name = "webdataset"
  suffixes = (".tar",)

  def documents(self, unit: WorkUnit, read: DocumentRead) -> Iterator[Any]:
    if not read.records:
      raise InputFormatError(f"{unit.path}: WebDataset shards hold image-text samples (--format vision), not texts")
    try:
      yield from self._samples(unit, read)
    except (tarfile.TarError, EOFError, OSError, zlib.error) as error:  # a damaged shard: named, never skipped
      raise InputFormatError(f"{unit.path}: not a readable tar shard ({type(error).__name__}: {error})") from error

  def _samples(self, unit: WorkUnit, read: DocumentRead) -> Iterator[Record]:
    key, members = None, []
    with open_binary(unit.path) as f, tarfile.open(fileobj=f, mode="r|*") as tar:
      for member in tar:
        if not member.isfile():
          continue
        base = os.path.basename(member.name)
        stem, _, extension = base.partition(".")
        sample = os.path.join(os.path.dirname(member.name), stem)
        if sample != key and key is not None:
          yield from _sample_record(unit.path, key, members, read.invalid)
          members = []
        key = sample
        data = tar.extractfile(member)
        members.append((extension.lower(), data.read() if data is not None else b""))
        read.on_bytes(member.size)
    if key is not None:
      yield from _sample_record(unit.path, key, members, read.invalid)


def _sample_record(path: str, key: str, members: list[tuple[str, bytes]], invalid: InvalidLog) -> Iterator[Record]:
  """A WebDataset sample's members as one record, named by the shard and the sample's key (a bad sample
  reported to `invalid`: counted under skip_invalid, else raised)."""
  try:
    yield _sample_values(f"{path}: sample {key}", members)
  except InputFormatError as error:
    invalid.report(str(error))


def _sample_values(where: str, listed: list[tuple[str, bytes]]) -> Record:
  members = dict(listed)
  if len(members) < len(listed):  # as WebDataset's own reader: a sample names each member once
    seen = [extension for extension, _ in listed]
    raise InputFormatError(f"{where}: names its {next(e for e in seen if seen.count(e) > 1)!r} member twice")
  images = [members[e] for e in members if e.rsplit(".", 1)[-1] in IMAGE_EXTENSIONS]
  if len(images) > 1:
    raise InputFormatError(f"{where}: {len(images)} images; a caption sample holds one")
  values: dict[str, Any] = {"image": images[0]} if images else {}
  try:
    if "txt" in members:
      values["text"] = members["txt"].decode("utf-8")
    if "json" in members:
      fields = json.loads(members["json"])
      if not isinstance(fields, dict):
        raise InputFormatError(f"{where}: its json member is {type(fields).__name__}, not an object")
      values = {**fields, **values}
  except (UnicodeDecodeError, json.JSONDecodeError) as error:
    raise InputFormatError(f"{where}: a member is not UTF-8 text or JSON ({error})") from error
  return Record(where, values)


def _no_records(path: str, name: str, read: DocumentRead) -> None:
  if read.records:
    raise InputFormatError(f"{path}: fine-tuning examples are read from JSONL or Parquet, not {name} files")


def format_of(path: str, requested: str = "auto") -> str:
  """The input format of `path`: `requested`, or the registered format that reads its name when "auto"."""
  if requested != "auto":
    if requested not in INPUT_FORMAT_TYPES:
      raise ValueError(f"format: {requested!r} is not one of {INPUT_FORMATS} or 'auto'")
    return requested
  base = os.path.splitext(path)[0] if is_compressed(path) else path
  # The record formats first: "x.array_record-00000-of-00010" has no suffix of the others.
  for fmt in sorted(INPUT_FORMAT_TYPES.values(), key=lambda f: not issubclass(f, _ExampleRecords)):
    if fmt.reads(base):
      return fmt.name
  suffix = os.path.splitext(base)[1].lower()
  raise ValueError(
    f"{path}: cannot tell the input format from the suffix {suffix!r}; give `input_format` ({', '.join(INPUT_FORMATS)})"
  )


def plan_units(
  files: list[str],
  formats: list[InputFormat],
  unit_bytes: int,
  on_scan: Callable[[int], None] = lambda n: None,
  sizes: list[int] | None = None,
) -> list[WorkUnit]:
  """The units of every file, in input order: a remote or compressed file, or one of at most
  `unit_bytes`, is one unit; a larger one is cut as its format cuts."""
  units: list[WorkUnit] = []
  sizes = sizes if sizes is not None else file_sizes(files)
  for file_index, (path, fmt, size) in enumerate(zip(files, formats, sizes)):
    whole = WorkUnit(len(units), file_index, path, fmt.name, size=size)
    if is_remote(path) or is_compressed(path) or size <= unit_bytes:
      units.append(whole)
    else:
      units.extend(fmt.cut(whole, unit_bytes, on_scan))
  return units


def unit_documents(unit: WorkUnit, options: ConvertOptions, read: DocumentRead) -> Iterator[Any]:
  """The valid documents of one unit, in order, read as its format reads them under `options`."""
  return configured_format(unit.fmt, options).documents(unit, read)
