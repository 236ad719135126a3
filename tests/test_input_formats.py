"""Input formats are registered types: the registry is the formats the options name, each file's format
comes from the one type that reads its name, and a new format is one new class (shown with CSV)."""

from __future__ import annotations

import csv
from collections.abc import Iterator
from typing import Any

import pytest

from jaxdata.conversion import ConvertOptions, TokenizerSpec, convert, load_tokenizer
from jaxdata.conversion.formats import (
  INPUT_FORMAT_TYPES,
  DocumentRead,
  InputFormat,
  format_of,
  plan_units,
  unit_documents,
)
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


class Csv(InputFormat):
  """A format of the test's own: the first column of every row is a document."""

  name = "csv"
  suffixes = (".csv",)

  def documents(self, unit: WorkUnit, read: DocumentRead) -> Iterator[Any]:
    with open(unit.path, newline="", encoding="utf-8") as f:
      for row in csv.reader(f):
        read.on_bytes(sum(len(c) for c in row))
        yield row[0]


def test_a_new_format_is_one_class_registered(tmp_path, monkeypatch):
  monkeypatch.setitem(INPUT_FORMAT_TYPES, "csv", Csv())
  path = tmp_path / "rows.csv"
  path.write_text("hello,1\nworld,2\n", encoding="utf-8")
  assert format_of(str(path)) == "csv"
  units = plan_units([str(path)], ["csv"], "document", unit_bytes=4)  # not cut: a format cuts only if it says how
  assert len(units) == 1
  assert list(unit_documents(units[0], DocumentRead("text", "document", None))) == ["hello", "world"]  # type: ignore[arg-type]
  manifest = convert([str(path)], str(tmp_path / "out"), "rows", ConvertOptions(tokenizer="byte", workers=1))
  assert manifest.num_records == 2
  byte = load_tokenizer(TokenizerSpec.parse("byte"))
  with TokenDataset(str(tmp_path / "out")) as dataset:
    assert [byte.decode(dataset[i].tolist()) for i in range(2)] == ["hello", "world"]


def test_convert_options_read_a_tokenizer_as_text_and_refuse_anything_else():
  assert ConvertOptions(tokenizer="byte").tokenizer == TokenizerSpec.parse("byte")
  with pytest.raises(ValueError, match="tokenizer: expected a TokenizerSpec or its text"):
    ConvertOptions(tokenizer=3)  # type: ignore[arg-type]
