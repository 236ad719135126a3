"""The package follows the data flow: stages import only earlier stages, no cycles,
one job per module, lazy heavy dependencies, public names that keep working."""

from __future__ import annotations

import ast
import os
import pathlib
import re
import subprocess
import sys

import pytest

import jaxdata
from pipeline_fixtures import write_coded_dataset

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Each stage may import itself and the stages listed for it (and nothing later).
# `transforms` plans from lengths through a protocol: it never sees the stream.
ALLOWED = {
  "errors": set(),
  "_lazy": set(),
  "_native_switch": set(),
  # _lazy: PyYAML loads at the first load_config; vision: packing.images names an image policy
  "config": {"errors", "_lazy", "_native_switch", "vision"},
  "sources": {"errors", "_lazy", "_native_switch"},
  "vision": {"errors", "_lazy"},  # an image's size, tokens and patches: below every stage that reads images
  "order": {"config", "errors"},
  "mixture": {"config", "sources", "order", "errors", "_native_switch"},
  # _native_switch: every C loop reads the one switch; vision: images decoded into their rows' patches
  "transforms": {"config", "errors", "_native_switch", "vision", "_lazy"},
  "checkpoint": {"config", "order", "mixture", "transforms", "errors", "_lazy"},  # it composes their states
  # conversion: raw inputs named in a config are converted (cached) when a pipeline opens (pipeline/raw_inputs.py)
  "pipeline": {
    "config",
    "sources",
    "order",
    "mixture",
    "transforms",
    "checkpoint",
    "conversion",
    "vision",
    "errors",
    "_lazy",
  },
  "research": {"config", "errors"},
  "conversion": {"sources", "vision", "errors", "_lazy"},  # vision: an image's size and tokens, at conversion
  "tools": {"config", "sources", "order", "mixture", "transforms", "checkpoint", "pipeline", "errors", "_lazy"},
  "demo": {"config", "sources", "checkpoint", "pipeline", "conversion", "tools", "research", "vision", "errors"},
  "integrations": {"config", "sources", "order", "mixture", "checkpoint", "pipeline", "conversion", "errors", "_lazy"},
  "testing": {"pipeline", "errors"},
  "cli": {
    "config",
    "sources",
    "vision",
    "pipeline",
    "conversion",
    "tools",
    "demo",
    "integrations",
    "errors",
    "_lazy",
    "__init__",
  },
  # The package's lazy exports (the public API) name modules of every stage.
  "__init__": {
    "_lazy",
    "config",
    "sources",
    "order",
    "mixture",
    "pipeline",
    "checkpoint",
    "conversion",
    "tools",
    "research",
    "integrations",
    "testing",
    "errors",
  },
  "__main__": {"cli"},
}
HEAVY = ("jax", "grain", "orbax", "pyarrow", "matplotlib")


def _modules(suffix: str = ".py") -> dict[str, str]:
  """Module name -> file, for jaxdata/ and transforms/ (installed as jaxdata.transforms)."""
  found = {}
  for root, package in (("jaxdata", "jaxdata"), ("transforms", "jaxdata.transforms")):
    for directory, _, files in os.walk(os.path.join(REPO, root)):
      for name in files:
        if name.endswith(suffix):
          relative = os.path.relpath(os.path.join(directory, name), os.path.join(REPO, root))[: -len(suffix)]
          parts = [p for p in relative.split(os.sep) if p != "__init__"]
          found[".".join([package, *parts])] = os.path.join(directory, name)
  return found


MODULES = _modules()
# C extensions (transforms/_native.c -> jaxdata.transforms._native): import targets that import nothing.
EXTENSIONS = set(_modules(".c"))


def _stage(module: str) -> str:
  parts = module.split(".")
  if len(parts) == 1:
    return "__init__"
  return parts[1]


def _imports(path: str) -> list[tuple[str, bool]]:
  """(imported jaxdata module, at module level?) for every import in a file."""
  tree = ast.parse(open(path).read())
  # Module level: the module's statements, and those of its module-level try blocks (an optional
  # extension imported with a fallback) and if blocks (`if TYPE_CHECKING: ... else: lazy_module(...)`):
  # they run at import.
  statements = list(tree.body)
  for node in tree.body:
    if isinstance(node, ast.Try):
      statements += node.body
    elif isinstance(node, ast.If):
      statements += [*node.body, *node.orelse]
  top_level = {id(node) for node in statements}
  # Lazy imports (`lazy_module("m")`, `lazy_exports(..., {"name": "m"})`) are imports too: at module level
  # when the call is, though the module loads later.
  top_level |= {
    id(inner)
    for node in statements
    if isinstance(node, (ast.Assign, ast.AnnAssign, ast.Expr))
    for inner in ast.walk(node)
  }
  out = []
  for node in ast.walk(tree):
    names = []
    if isinstance(node, ast.Import):
      names = [a.name for a in node.names]
    elif isinstance(node, ast.ImportFrom) and node.module:
      names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
    elif isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("lazy_module", "lazy_exports"):
      names = [
        c.value
        for arg in node.args
        for c in ast.walk(arg)
        if isinstance(c, ast.Constant) and isinstance(c.value, str) and c.value.startswith("jaxdata.")
      ]
    for name in names:
      if name == "jaxdata" or name.startswith("jaxdata."):
        target = max(
          (m for m in (*MODULES, *EXTENSIONS) if name == m or name.startswith(m + ".")), key=len, default=None
        )
        if target is not None:
          out.append((target, id(node) in top_level))
  return out


def test_every_stage_imports_only_earlier_stages():
  problems = []
  for module, path in MODULES.items():
    stage = _stage(module)
    for target, _ in _imports(path):
      other = _stage(target)
      if other != stage and other not in ALLOWED[stage]:
        problems.append(f"{module} imports {target} ({stage} -> {other})")
  assert not problems, "\n".join(problems)


def test_no_import_cycles_and_no_function_local_imports():
  graph = {m: {t for t, _ in _imports(p) if t != m and t != "jaxdata"} for m, p in MODULES.items()}
  local = [f"{m} imports {t} inside a function" for m, p in MODULES.items() for t, top in _imports(p) if not top]
  assert not local, "\n".join(local)
  state: dict[str, int] = {}

  def visit(node: str, path: list[str]) -> None:
    state[node] = 1
    for nxt in graph.get(node, ()):
      if state.get(nxt) == 1:
        pytest.fail("import cycle: " + " -> ".join([*path, node, nxt]))
      if nxt not in state:
        visit(nxt, [*path, node])
    state[node] = 2

  for module in graph:
    if module not in state:
      visit(module, [])


def test_each_module_says_its_one_job_and_no_two_names_differ_by_a_plural():
  """A module opens with a docstring naming its job; `worker.py` beside `workers.py` is two jobs under one word."""
  silent = [m for m, p in MODULES.items() if not (ast.get_docstring(ast.parse(open(p).read())) or "").strip()]
  assert not silent, silent
  names = {m.rsplit(".", 1)[-1] for m in MODULES}
  assert not {n for n in names if n + "s" in names}


def test_nothing_imports_by_name_outside_the_lazy_and_extras_helpers():
  """`importlib.import_module` hides an import from the layering test above; only the two helpers use it."""
  helpers = {"jaxdata._lazy", "jaxdata.errors"}
  hidden = [m for m, p in MODULES.items() if m not in helpers and "import_module(" in open(p).read()]
  assert not hidden, hidden


def _heavy_modules_after(code: str) -> list[str]:
  probe = f"import sys\n{code}\nprint(sorted(m for m in {HEAVY!r} if m in sys.modules))"
  out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
  return eval(out.stdout.strip().splitlines()[-1])  # a printed list of str literals


@pytest.mark.slow
def test_import_and_cli_load_no_heavy_dependency(tmp_path):
  assert _heavy_modules_after("import jaxdata, jaxdata.cli") == []
  assert (
    _heavy_modules_after("from jaxdata.cli import main\ntry:\n  main(['--help'])\nexcept SystemExit:\n  pass") == []
  )
  write_coded_dataset(str(tmp_path / "d0"), 0, [5, 7, 9])
  assert _heavy_modules_after(f"from jaxdata.cli import main\nmain(['inspect', {str(tmp_path / 'd0')!r}])") == []
  # Planning needs no jax either: the planner, the stream and the packer.
  assert _heavy_modules_after("import jaxdata\njaxdata.pipeline.StepPlanner, jaxdata.mixture.DocumentStream") == []
  # Nor does a worker process (it is started as `python -m jaxdata.pipeline.worker_process`).
  assert _heavy_modules_after("import jaxdata.pipeline.worker_process") == []
  # Nor a pipeline with NumPy output (jax is imported when a mesh is used: ~2 s of start-up saved).
  assert _heavy_modules_after("import jaxdata\njaxdata.Pipeline") == []
  # ... and the heavy ones do arrive when a name needs them.
  assert "jax" in _heavy_modules_after("import jaxdata.pipeline.sharding as s\ns.jax_sharding.Mesh")


def test_every_public_name_resolves_and_is_listed_by_dir():
  for name in jaxdata.__all__:
    assert getattr(jaxdata, name) is not None, name
  assert set(jaxdata.__all__) <= set(dir(jaxdata))
  with pytest.raises(AttributeError, match="has no attribute 'Pipelin'"):
    jaxdata.Pipelin  # noqa: B018 -- a typo is an AttributeError, not a silent None


def test_python_dash_m_jaxdata_runs_the_cli():
  out = subprocess.run([sys.executable, "-m", "jaxdata", "--version"], capture_output=True, text=True)
  assert out.returncode == 0 and out.stdout.strip() == f"jaxdata {jaxdata.__version__}"


# The API: `jaxdata` (its `__all__`) and these packages; every other module is internal.
PUBLIC_MODULES = ("jaxdata", "jaxdata.testing", "jaxdata.research", "jaxdata.integrations", "jaxdata.vision")


def _implementation_modules() -> list[str]:
  roots = [os.path.join(REPO, "jaxdata"), os.path.join(REPO, "transforms")]
  found = []
  for root in roots:
    for folder, _, files in os.walk(root):
      found += [os.path.join(folder, f) for f in files if f.endswith(".py") and f != "__init__.py"]
  return sorted(found)


def _declared_names(path: str) -> tuple[list[str], set[str]]:
  """(the module's `__all__`, the classes and type aliases it defines)."""
  tree = ast.parse(open(path, encoding="utf-8").read())
  types = {n.name for n in tree.body if isinstance(n, ast.ClassDef)}
  types |= {
    t.id
    for n in tree.body
    if isinstance(n, ast.Assign)
    for t in n.targets
    if isinstance(t, ast.Name) and t.id[:1].isupper() and not t.id.isupper()
  }
  for node in tree.body:
    if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets):
      return list(ast.literal_eval(node.value)), types
  return [], types


@pytest.mark.slow  # several seconds: the everyday tier stays short
def test_a_module_exports_only_what_another_file_uses_or_a_type():
  """An internal module's `__all__` is its interface to the rest of the package: a
  function or constant no other file uses is not in it (types stay: values of them are handed out)."""
  texts = {}
  for top in ("jaxdata", "transforms", "tests", "benchmarks", "docs"):
    for folder, _, files in os.walk(os.path.join(REPO, top)):
      for f in files:
        if f.endswith((".py", ".md")):
          texts[os.path.join(folder, f)] = open(os.path.join(folder, f), encoding="utf-8").read()
  texts[os.path.join(REPO, "README.md")] = open(os.path.join(REPO, "README.md"), encoding="utf-8").read()
  unused = []
  for path in _implementation_modules():
    names, types = _declared_names(path)
    for name in set(names) - types:
      word = re.compile(rf"\b{re.escape(name)}\b")
      if not any(word.search(text) for other, text in texts.items() if other != path):
        unused.append(f"{os.path.relpath(path, REPO)}: {name}")
  assert not unused, unused


def test_the_guides_python_imports_only_public_modules():
  """A user's code (the README's and docs' python blocks) imports only the API, never an internal module."""
  imports = re.compile(r"^\s*(?:from|import)\s+(jaxdata(?:\.\w+)*)", re.MULTILINE)
  found = []
  guides = [os.path.join(REPO, "README.md")]
  guides += [os.path.join(REPO, "docs", f) for f in sorted(os.listdir(os.path.join(REPO, "docs"))) if f.endswith(".md")]
  for path in guides:
    if path.endswith("architecture.md"):
      continue  # for contributors: it names the internals on purpose
    text = open(path, encoding="utf-8").read()
    for block in re.findall(r"```python\n(.*?)```", text, re.DOTALL):
      found += [(os.path.basename(path), m) for m in imports.findall(block)]
  assert found  # the guides do import jaxdata
  internal = [(f, m) for f, m in found if not any(m == p or m.startswith(p + ".") for p in PUBLIC_MODULES[1:])]
  internal = [(f, m) for f, m in internal if m != "jaxdata"]
  assert not internal, internal


PIPELINE_MAX_LINES = 400  # a module of pipeline/ holds one concept
PIPELINE_MAX_ATTRIBUTES = 12  # a class of pipeline/ with more has two jobs (records, dataclasses, excepted)


def _attributes_set(cls: ast.ClassDef) -> set[str]:
  return {
    node.attr
    for node in ast.walk(cls)
    if isinstance(node, ast.Attribute)
    and isinstance(node.value, ast.Name)
    and node.value.id == "self"
    and isinstance(node.ctx, ast.Store)
  }


def test_pipeline_modules_stay_small_and_its_classes_keep_one_job():
  """The layout's goals, held: no module of pipeline/ over 400 lines, no class (but a record) holding more
  than 12 attributes. A record is a dataclass: its fields are a message's or a stats line's."""
  too_long, too_wide = [], []
  for path in sorted(pathlib.Path(REPO, "jaxdata", "pipeline").glob("*.py")):
    text = path.read_text(encoding="utf-8")
    if text.count("\n") > PIPELINE_MAX_LINES:
      too_long.append(f"{path.name}: {text.count(chr(10))} lines")
    for node in ast.parse(text).body:
      if isinstance(node, ast.ClassDef) and not any("dataclass" in ast.unparse(d) for d in node.decorator_list):
        attributes = _attributes_set(node)
        if len(attributes) > PIPELINE_MAX_ATTRIBUTES:
          too_wide.append(f"{path.name}: {node.name} holds {len(attributes)}: {sorted(attributes)}")
  assert not too_long and not too_wide, too_long + too_wide
  assert len(_attributes_set(ast.parse("class A:\n  def f(self):\n    self.x = self.y = 1\n").body[0])) == 2


LIBRARY_MAX_LINES = 400  # every module of the library: one concept
# Modules still over the cap, each at most its size now: they may shrink (and leave the list), never grow.
OVER_THE_CAP = {}


def test_no_module_of_the_library_grows_past_the_cap():
  """400 lines a module everywhere, not only in pipeline/: a new module over it fails, and one of those
  still over it fails if it grows (split it instead)."""
  sizes = {}
  for root in ("jaxdata", "transforms"):
    for path in sorted(pathlib.Path(REPO, root).rglob("*.py")):
      if path.is_symlink() or any(p.is_symlink() for p in path.parents):
        continue
      sizes[str(path.relative_to(REPO))] = path.read_text(encoding="utf-8").count("\n")
  over = {name: lines for name, lines in sizes.items() if lines > LIBRARY_MAX_LINES}
  grown = {name: lines for name, lines in over.items() if lines > OVER_THE_CAP.get(name, LIBRARY_MAX_LINES)}
  assert not grown, grown
  assert set(OVER_THE_CAP) <= set(sizes)  # the list names modules that exist


def _library_trees() -> list[tuple[str, ast.Module]]:
  out = []
  for root in ("jaxdata", "transforms"):
    for path in sorted(pathlib.Path(REPO, root).rglob("*.py")):
      if path.is_symlink() or any(p.is_symlink() for p in path.parents):
        continue
      out.append((str(path.relative_to(REPO)), ast.parse(path.read_text(encoding="utf-8"))))
  return out


LIBRARY_MAX_ATTRIBUTES = 12  # a behaviour class (not a record: a dataclass's fields are its data)
LIBRARY_MAX_POSITIONAL = 6  # parameters past it are keyword-only: a call says what each value is
LIBRARY_MAX_FUNCTION_LINES = 60
# Classes and functions still over the caps, each at most its size now: they may shrink, never grow.
WIDER_THAN_THE_CAP: dict[str, int] = {}
LONGER_THAN_THE_CAP: dict[str, int] = {}


def test_every_class_and_function_of_the_library_keeps_to_the_caps():
  """12 attributes a behaviour class, 6 positional parameters and 60 lines a function, everywhere; those
  listed above may not grow."""
  wide, positional, long = {}, [], {}
  for where, tree in _library_trees():
    for node in ast.walk(tree):
      if isinstance(node, ast.ClassDef) and not any("dataclass" in ast.unparse(d) for d in node.decorator_list):
        count = len(_attributes_set(node))
        if count > WIDER_THAN_THE_CAP.get(f"{where}:{node.name}", LIBRARY_MAX_ATTRIBUTES):
          wide[f"{where}:{node.name}"] = count
      if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        args = [*node.args.posonlyargs, *node.args.args]
        if len([a for a in args if a.arg not in ("self", "cls")]) > LIBRARY_MAX_POSITIONAL:
          positional.append(f"{where}:{node.name}")
        lines = (node.end_lineno or node.lineno) - node.lineno + 1
        if lines > LONGER_THAN_THE_CAP.get(f"{where}:{node.name}", LIBRARY_MAX_FUNCTION_LINES):
          long[f"{where}:{node.name}"] = lines
  assert not wide, f"classes over {LIBRARY_MAX_ATTRIBUTES} attributes: {wide}"
  assert not positional, f"functions with more than {LIBRARY_MAX_POSITIONAL} positional parameters: {positional}"
  assert not long, f"functions over {LIBRARY_MAX_FUNCTION_LINES} lines (split them): {long}"
