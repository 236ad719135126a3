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
