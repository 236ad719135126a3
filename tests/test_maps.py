"""The prose that names code names code that exists: every `jaxdata.x.y` name, every file
(`pipeline/reader.py`, `docs/state.md`, a bare `reader.py`) and every module a package's map
lists, in the library's docstrings, the README and docs/; and each package's map lists all of
its modules. A rename that leaves a stale name behind fails here."""

from __future__ import annotations

import ast
import functools
import importlib
import os
import re
import tomllib

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
with open(os.path.join(REPO, "pyproject.toml"), "rb") as _f:
  # folder -> the package it installs as (transforms/ is jaxdata.transforms), as setuptools maps them
  LIBRARY = {folder: package for package, folder in tomllib.load(_f)["tool"]["setuptools"]["package-dir"].items()}
# Files of the other tools that the docs name (Megatron's tokenizing script).
OTHER_TOOLS_FILES = {"preprocess_data.py"}

DOTTED = re.compile(r"(?<![\w.])jaxdata(?:\.[A-Za-z_]\w*)+")
FILE = re.compile(r"(?<![\w./:-])((?:[\w-]+/)*[\w-]+\.(?:py|md|c))(?![\w/])")
BACKTICKED = re.compile(r"`([a-z_][a-z0-9_]*)`")  # `planner`, as a package's map names a module
LISTED_FILE = re.compile(r"(?<![\w/.])([a-z_][a-z0-9_]*)\.py\b")  # planner.py, as a map block lists it


def _library_modules() -> dict[str, str]:
  """Importable name -> file, for every module of the library."""
  out = {}
  for root, package in LIBRARY.items():
    for folder, _, files in os.walk(os.path.join(REPO, root)):
      for name in files:
        if name.endswith(".py"):
          path = os.path.join(folder, name)
          parts = [*package.split("."), *os.path.relpath(path, os.path.join(REPO, root))[:-3].split(os.sep)]
          if parts[-1] == "__init__":
            parts = parts[:-1]
          out[".".join(parts)] = path
  return out


MODULES = _library_modules()


def _docstrings() -> list[tuple[str, str]]:
  """(where, text) for every module, class and function docstring of the library."""
  out = []
  for path in sorted(MODULES.values()):
    with open(path, encoding="utf-8") as f:
      tree = ast.parse(f.read())
    for node in ast.walk(tree):
      if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
        text = ast.get_docstring(node, clean=False)
        if text:
          out.append((f"{os.path.relpath(path, REPO)}:{getattr(node, 'lineno', 1)}", text))
  return out


def _documents() -> list[tuple[str, str]]:
  """(where, text) of the README and every page of docs/."""
  paths = [os.path.join(REPO, "README.md")]
  paths += sorted(os.path.join(REPO, "docs", n) for n in os.listdir(os.path.join(REPO, "docs")) if n.endswith(".md"))
  out = []
  for path in paths:
    with open(path, encoding="utf-8") as f:
      out.append((os.path.relpath(path, REPO), f.read()))
  return out


@functools.cache
def _repo_files() -> tuple[frozenset[str], frozenset[str]]:
  """(paths relative to the repository, file names) of the files git would carry."""
  paths, names = set(), set()
  for folder, dirs, files in os.walk(REPO):
    dirs[:] = [d for d in dirs if not d.startswith(".") and d not in ("build", "__pycache__") and "egg-info" not in d]
    for name in files:
      paths.add(os.path.relpath(os.path.join(folder, name), REPO))
      names.add(name)
  return frozenset(paths), frozenset(names)


def resolves(dotted: str) -> bool:
  """Whether `jaxdata.a.b.c` is a module, or an attribute reached from the longest module prefix."""
  parts = dotted.split(".")
  for cut in range(len(parts), 0, -1):
    module = ".".join(parts[:cut])
    if module in MODULES:
      value = importlib.import_module(module)
      for name in parts[cut:]:
        if not hasattr(value, name):
          return False
        value = getattr(value, name)
      return True
  return False


def file_exists(mentioned: str) -> bool:
  """A path relative to the repository or to a library folder, or a bare file name found anywhere."""
  paths, names = _repo_files()
  if "/" not in mentioned:
    return mentioned in names or mentioned in OTHER_TOOLS_FILES
  for folder, package in LIBRARY.items():  # jaxdata/transforms/x.py is transforms/x.py
    installed = package.replace(".", "/") + "/"
    if mentioned.startswith(installed) and folder != installed[:-1]:
      mentioned = folder + "/" + mentioned[len(installed) :]
  return any(f"{base}{mentioned}" in paths for base in ("", *(f"{folder}/" for folder in LIBRARY)))


def stale_names(texts: list[tuple[str, str]]) -> list[str]:
  """Every dotted name and file mentioned in `texts` that does not exist, as 'where: name'."""
  stale = []
  for where, text in texts:
    for dotted in sorted(set(DOTTED.findall(text))):
      if not resolves(dotted.rstrip(".")):
        stale.append(f"{where}: {dotted}")
    for mentioned in sorted(set(FILE.findall(text))):
      if not file_exists(mentioned):
        stale.append(f"{where}: {mentioned}")
  return stale


def test_every_name_and_file_the_docstrings_mention_exists():
  stale = stale_names(_docstrings())
  assert not stale, "docstrings name what does not exist:\n  " + "\n  ".join(stale)


def test_every_name_and_file_the_readme_and_docs_mention_exists():
  stale = stale_names(_documents())
  assert not stale, "the README and docs/ name what does not exist:\n  " + "\n  ".join(stale)


PACKAGES = sorted(m for m, path in MODULES.items() if path.endswith("__init__.py"))  # the top package too


def _package_map(package: str) -> tuple[set[str], set[str]]:
  """(the backticked lowercase names of the package's docstring, its modules and subpackages)."""
  with open(MODULES[package], encoding="utf-8") as f:
    doc = ast.get_docstring(ast.parse(f.read())) or ""
  prefix = package + "."
  members = {m[len(prefix) :] for m in MODULES if m.startswith(prefix) and "." not in m[len(prefix) :]}
  return set(BACKTICKED.findall(doc)) | set(LISTED_FILE.findall(doc)), {m for m in members if not m.startswith("_")}


@pytest.mark.parametrize("package", PACKAGES)
def test_each_package_map_lists_its_modules_and_no_other(package):
  mentioned, modules = _package_map(package)
  missing = sorted(modules - mentioned)
  assert not missing, f"{package}'s docstring does not list its modules {missing}"
  # A backticked lowercase name in a map is a module of the package, a name it defines, or a stage
  # of the package (`config`, `sources`: what it depends on).
  stages = {m.split(".")[1] for m in MODULES if m.count(".") >= 1} | {"jaxdata"}
  stale = sorted(
    name
    for name in mentioned - modules - stages
    if not any(hasattr(importlib.import_module(f"{package}.{m}"), name) for m in modules | {""} if m)
    and not hasattr(importlib.import_module(package), name)
  )
  assert not stale, f"{package}'s docstring names modules that do not exist: {stale}"


def test_the_map_checks_catch_a_stale_name():
  # The checks themselves, on names that are gone: a module, an attribute, files.
  stale = stale_names(
    [("x", "see `jaxdata.pipeline.window`, jaxdata.pipeline.pipeline.Nothing and pipeline/workers.py")]
  )
  assert stale == ["x: jaxdata.pipeline.pipeline.Nothing", "x: jaxdata.pipeline.window", "x: pipeline/workers.py"]
  assert stale_names([("x", "jaxdata.pipeline.pipeline.Pipeline, pipeline/reader.py, docs/state.md")]) == []


def _readme_layout() -> list[str]:
  """The paths the README's "## Layout" block names, each under the folder its block says."""
  text = open(os.path.join(REPO, "README.md"), encoding="utf-8").read()
  block = text.split("## Layout", 1)[1].split("```", 2)[1]
  paths, parent = [], ""
  for line in block.splitlines():
    for name in re.findall(r"^(\s*)([\w.]+/|[\w.]+\.py)(?=\s|$)", line):
      indent, entry = name
      if not indent:
        parent = entry if entry.endswith("/") else ""
        paths.append(entry)
      else:
        paths.append(parent + entry)
    for extra in re.findall(r"^(?:\S+/)\s+(\w+/)\s*$", line):  # "tests/  benchmarks/"
      paths.append(extra)
  return paths


def test_the_readme_layout_names_every_package_and_nothing_else():
  listed = _readme_layout()
  assert "jaxdata/pipeline/" in listed and "transforms/" in listed  # the parse found the block
  missing_on_disk = [p for p in listed if not os.path.exists(os.path.join(REPO, p))]
  assert not missing_on_disk, f"the README's layout names what does not exist: {missing_on_disk}"
  packages = sorted(
    f"jaxdata/{name}/"
    for name in os.listdir(os.path.join(REPO, "jaxdata"))
    if os.path.isfile(os.path.join(REPO, "jaxdata", name, "__init__.py"))
  )
  unlisted = [p for p in packages if p not in listed]
  assert not unlisted, f"the README's layout leaves out {unlisted}"
