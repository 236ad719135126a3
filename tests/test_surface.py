"""The top level says what a user needs, sorted, each name documented; what moved still resolves, with a
warning that names its new place."""

from __future__ import annotations

import importlib
import pathlib
import re
import warnings

import pytest

import jaxdata

REPO = pathlib.Path(__file__).resolve().parent.parent
MAX_TOP_LEVEL = 30  # the user API: the pipeline, its config and state, errors, conversion, the pair loss helpers


def _documents() -> str:
  return "\n".join(p.read_text(encoding="utf-8") for p in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))])


def test_the_top_level_is_a_short_sorted_documented_list():
  names = jaxdata.__all__
  assert names == sorted(names, key=str.lower) or names == sorted(names)
  assert len(names) <= MAX_TOP_LEVEL, len(names)
  text = _documents()
  undocumented = [n for n in names if not re.search(rf"\b(jaxdata\.)?{re.escape(n)}\b", text)]
  assert not undocumented, f"in no document: {undocumented}"


@pytest.mark.parametrize("name", sorted(jaxdata.MOVED))
def test_a_moved_name_resolves_to_its_stage_with_a_warning_naming_it(name):
  home = jaxdata.MOVED[name]
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    value = getattr(jaxdata, name)
  assert value is getattr(importlib.import_module(home), name)
  assert [type(w.message) for w in caught] == [DeprecationWarning]
  assert f"{home}.{name}" in str(caught[0].message)
  assert name in importlib.import_module(home).__all__  # its new place lists it
  assert name not in jaxdata.__all__ and name not in dir(jaxdata)


def test_the_public_names_load_without_a_warning():
  with warnings.catch_warnings():
    warnings.simplefilter("error")
    for name in jaxdata.__all__:
      getattr(jaxdata, name)


def test_a_stream_without_metadata_reads_it_with_a_warning_naming_open(tmp_path):
  jaxdata.from_iterable([[1, 2, 3], [4, 5]], out=str(tmp_path / "a"))
  cfg = jaxdata.PipelineConfig.from_dict(
    {"datasets": [{"name": "a", "path": str(tmp_path / "a")}], "mixture": {"weights": {"a": 1}}}
  )
  with pytest.warns(DeprecationWarning, match=r"DocumentStream\.open\(cfg\)"):
    old = jaxdata.mixture.DocumentStream(cfg)
  new = jaxdata.mixture.DocumentStream.open(cfg)
  assert old.take(0, max_docs=5).record.tolist() == new.take(0, max_docs=5).record.tolist()
