"""One name per idea: no two top-level public definitions of the library share a name.

A class, function or constant (an upper-case assignment) named the same in two modules is two
ideas under one word (it was `Phase` for a schedule's and a lifecycle's, `FEATURES` for jaxdata's
and MaxText's) or one idea written twice (`TOKEN_DTYPES`). Lower-case module-level assignments
are imports of a module under a name (`jax = lazy_module("jax")`), not definitions. The names
below are one idea that each module of a kind defines for the same reader, on purpose.
"""

from __future__ import annotations

import ast
import collections
import pathlib
import re

REPO = pathlib.Path(__file__).resolve().parent.parent

# name: (why several modules define it, the modules)
SHARED_BY_DESIGN = {
  "BUILT": ("each C-loop module's: its extension was compiled (read alike by jaxdata.tools.bench)", 2),
  "NATIVE": ("each C-loop module's: its C loop runs (JAXDATA_NATIVE, read alike by jaxdata.tools.bench)", 3),
}


def top_level_definitions() -> dict[str, list[str]]:
  found: dict[str, list[str]] = collections.defaultdict(list)
  for root in ("jaxdata", "transforms"):
    for path in sorted((REPO / root).rglob("*.py")):
      for node in ast.parse(path.read_text(encoding="utf-8")).body:
        names = []
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
          names = [node.name]
        elif isinstance(node, ast.Assign):
          names = [t.id for t in node.targets if isinstance(t, ast.Name) and t.id.isupper()]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id.isupper():
          names = [node.target.id]
        for name in names:
          if not name.startswith("_"):
            found[name].append(str(path.relative_to(REPO)))
  return found


def test_no_two_public_top_level_definitions_share_a_name():
  shared = {name: paths for name, paths in top_level_definitions().items() if len(paths) > 1}
  unexpected = {name: paths for name, paths in shared.items() if name not in SHARED_BY_DESIGN}
  assert not unexpected, f"one name, several definitions: {unexpected}"
  for name, (_, count) in SHARED_BY_DESIGN.items():  # the exceptions stay exactly what they say
    assert len(shared.get(name, [])) == count, (name, shared.get(name))


def test_the_scan_sees_a_name_defined_twice(tmp_path):
  """The scan itself: a duplicate it would miss makes the test above pass for nothing."""
  found = top_level_definitions()
  assert found["Pipeline"] == ["jaxdata/pipeline/pipeline.py"]
  assert len(found["NATIVE"]) == 3 and "jax" not in found  # an import under a name is not counted


def _words(name: str) -> tuple[str, ...]:
  """A name's words in order, lower case: `SpanPlanned` -> ("span", "planned")."""
  spaced = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name)
  return tuple(w.lower() for w in spaced.split("_") if w)


def test_no_two_public_names_are_the_same_words_in_another_order():
  """`PlannedSpan` beside `SpanPlanned` made a reader ask which is which: two ideas get two words. (A
  class and the function that builds it, `CacheKey` / `cache_key`, are the same words in one order.)"""
  orders: dict[tuple[str, ...], set[tuple[str, ...]]] = collections.defaultdict(set)
  for name in top_level_definitions():
    words = _words(name)
    if len(words) > 1:
      orders[tuple(sorted(words))].add(words)
  clashes = {" / ".join("_".join(o) for o in sorted(found)) for found in orders.values() if len(found) > 1}
  assert not clashes, clashes


# One word per idea: the word the API uses, and the synonyms it once had beside it.
ONE_WORD = {
  "reader processes (`StepMaking.reader_processes`)": ("readers", re.compile(r"\bworkers[0-9]\b")),
  "the worker processes' `Lifecycle`": ("lifecycle", re.compile(r"\bpool\.stage\b|\bproducer_phase\b")),
}


def test_each_idea_has_one_word_in_the_library_tests_and_docs():
  texts = [*sorted((REPO / "jaxdata").rglob("*.py")), *sorted((REPO / "tests").rglob("*.py"))]
  texts += [*sorted((REPO / "docs").glob("*.md")), *sorted((REPO / "benchmarks").rglob("*.py")), REPO / "README.md"]
  found = []
  for idea, (word, synonyms) in ONE_WORD.items():
    for path in texts:
      if path.name == "test_names.py":
        continue
      for match in synonyms.finditer(path.read_text(encoding="utf-8")):
        found.append(f"{path.relative_to(REPO)}: {match.group(0)!r} for {idea}; say {word!r}")
  assert not found, "\n".join(found)
