"""Input formats are registered types: the registry is the formats the options name, each file's format
comes from the one type that reads its name, and a new format is one new class (shown with CSV)."""

from __future__ import annotations

import csv
import dataclasses
from collections.abc import Iterator
from typing import Any

import pytest

from jaxdata.conversion import ConvertOptions, TokenizerSpec, convert, load_tokenizer
from jaxdata.conversion.formats import (
  INPUT_FORMAT_TYPES,
  DocumentRead,
  InputFormat,
  Jsonl,
  Text,
  configured_format,
  format_of,
  plan_units,
  unit_documents,
)
from jaxdata.conversion.inputs import InvalidLog
from jaxdata.conversion.options import INPUT_FORMATS
from jaxdata.conversion.work_units import WorkUnit
from jaxdata.sources import TokenDataset


def test_the_registry_holds_every_format_the_options_name():
  assert sorted(INPUT_FORMAT_TYPES) == sorted(INPUT_FORMATS)
  assert all(INPUT_FORMAT_TYPES[name].name == name for name in INPUT_FORMAT_TYPES)


@pytest.mark.parametrize(
  ("path", "expected"),
  [
    ("a/web.jsonl", "jsonl"),
    ("web.ndjson.zst", "jsonl"),
    ("notes.TXT", "text"),
    ("rows.parquet", "parquet"),
    ("c4-train.array_record-00000-of-01024", "arrayrecord"),
    ("data.tfrecord-00003-of-00010.gz", "tfrecord"),
    ("x.tfrecords", "tfrecord"),
    ("captions-000001.tar", "webdataset"),
  ],
)
def test_exactly_one_registered_format_reads_each_name(path, expected):
  assert format_of(path) == expected
  base = path.rsplit(".", 1)[0] if path.endswith((".gz", ".zst")) else path
  assert [f.name for f in INPUT_FORMAT_TYPES.values() if f.reads(base)] == [expected]


def test_an_unknown_suffix_or_format_is_refused_by_name():
  with pytest.raises(ValueError, match=r"report\.csv: cannot tell the input format from the suffix '\.csv'"):
    format_of("report.csv")
  with pytest.raises(ValueError, match="format: 'csv' is not one of"):
    format_of("report.csv", "csv")


@dataclasses.dataclass(frozen=True)
class Csv(InputFormat):
  """A format of the test's own, with an option of its own: the column of every row that is a document."""

  name = "csv"
  suffixes = (".csv",)
  column: int = 0

  def documents(self, unit: WorkUnit, read: DocumentRead) -> Iterator[Any]:
    with open(unit.path, newline="", encoding="utf-8") as f:
      for row in csv.reader(f):
        read.on_bytes(sum(len(c) for c in row))
        yield row[self.column]


def test_a_new_format_is_one_class_registered(tmp_path, monkeypatch):
  monkeypatch.setitem(INPUT_FORMAT_TYPES, "csv", Csv)
  path = tmp_path / "rows.csv"
  path.write_text("hello,1\nworld,2\n", encoding="utf-8")
  assert format_of(str(path)) == "csv"
  units = plan_units([str(path)], [Csv()], unit_bytes=4)  # not cut: a format cuts only if it says how
  assert len(units) == 1
  read = DocumentRead(InvalidLog(skip_invalid=False))
  assert list(unit_documents(units[0], ConvertOptions(), read)) == ["hello", "world"]
  assert list(Csv(column=1).documents(units[0], read)) == ["1", "2"]  # its own option
  manifest = convert([str(path)], str(tmp_path / "out"), "rows", ConvertOptions(tokenizer="byte", workers=1))
  assert manifest.num_records == 2
  byte = load_tokenizer(TokenizerSpec.parse("byte"))
  with TokenDataset(str(tmp_path / "out")) as dataset:
    assert [byte.decode(dataset[i].tolist()) for i in range(2)] == ["hello", "world"]


def test_each_format_takes_its_own_options_from_a_conversions():
  """A format's options are its fields: the conversion's `field` is JSONL's key and the record formats'
  feature, its `text_mode` the text format's mode; a format of no options takes none."""
  options = ConvertOptions(field="body", text_mode="line")
  assert configured_format("jsonl", options) == Jsonl(field="body")
  assert configured_format("text", options) == Text(mode="line")
  assert configured_format("arrayrecord", options).feature == "body"  # type: ignore[attr-defined]
  assert configured_format("text", ConvertOptions()) == Text()
  with pytest.raises(dataclasses.FrozenInstanceError):
    Jsonl().field = "other"  # type: ignore[misc]


def test_a_text_file_is_cut_only_where_its_mode_allows(tmp_path):
  """Line documents may be cut at any line; whole-file or paragraph documents stay whole."""
  path = tmp_path / "notes.txt"
  path.write_text("".join(f"line {i}\n" for i in range(400)), encoding="utf-8")
  assert len(plan_units([str(path)], [Text(mode="line")], unit_bytes=500)) > 1
  assert len(plan_units([str(path)], [Text(mode="paragraph")], unit_bytes=500)) == 1


def test_convert_options_read_a_tokenizer_as_text_and_refuse_anything_else():
  assert ConvertOptions(tokenizer="byte").tokenizer == TokenizerSpec.parse("byte")
  with pytest.raises(ValueError, match="tokenizer: expected a TokenizerSpec or its text"):
    ConvertOptions(tokenizer=3)  # type: ignore[arg-type]
