"""Lazy imports: a module is imported the first time one of its names is used.

`import jaxdata` and the CLI stay light (no jax, grain, orbax, pyarrow or
matplotlib) until a name that needs them is touched. This module (and
`jaxdata.errors.optional_module` for optional extras) is the only place
that imports by name; every other import is a statement at module level.
`tests/test_layout.py` reads the string literals given to `lazy_exports`
and `lazy_module` as imports, so the layering rule covers them too.

>>> getattr_, dir_ = lazy_exports("demo", {"sqrt": "math"}, {"jsonmod": "json"})
>>> getattr_("sqrt")(9.0), getattr_("jsonmod").__name__, dir_()
(3.0, 'json', ['jsonmod', 'sqrt'])
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["LazyModule", "lazy_exports", "lazy_module", "user_function"]


def lazy_exports(
  package: str,
  attributes: Mapping[str, str],
  modules: Mapping[str, str] | None = None,
  package_globals: Mapping[str, Any] | None = None,
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
  """Module-level `__getattr__` and `__dir__` for `package`.

  `attributes` maps a public name to the module that defines it (same
  name); `modules` maps a public name to a module exported whole;
  `package_globals` (the package's `globals()`) adds its eager names to `dir`.
  """
  modules = dict(modules or {})
  eager = package_globals if package_globals is not None else {}

  def getattr_(name: str) -> Any:
    if name in attributes:
      return getattr(importlib.import_module(attributes[name]), name)
    if name in modules:
      return importlib.import_module(modules[name])
    raise AttributeError(f"module {package!r} has no attribute {name!r}")

  def dir_() -> list[str]:
    return sorted({*attributes, *modules, *eager})

  return getattr_, dir_


class LazyModule:
  """A module imported on its first attribute access.

  >>> json_module = lazy_module("json")
  >>> json_module.dumps([1])
  '[1]'
  """

  def __init__(self, name: str) -> None:
    self._name = name
    self._module: Any = None

  def __getattr__(self, attribute: str) -> Any:
    # Kept after the first use: a hot path (jax calls every step) then pays one attribute lookup.
    if self._module is None:
      self._module = importlib.import_module(self._name)
    return getattr(self._module, attribute)

  def __repr__(self) -> str:
    return f"<lazy module {self._name!r}>"


def lazy_module(name: str) -> LazyModule:
  """`name` (a literal module name), imported when one of its attributes is first used."""
  return LazyModule(name)


def user_function(spec: str) -> Callable[..., Any]:
  """The user's function named "MODULE:FUNCTION" (a command-line flag's value), imported from the
  import path (the working directory first, as `python -m` finds modules); ValueError naming `spec`.

  >>> user_function("math:sqrt")(16.0)
  4.0
  """
  module_name, _, function_name = spec.partition(":")
  if not module_name or not function_name:
    raise ValueError(f"{spec!r}: give MODULE:FUNCTION")
  if "" not in sys.path and os.getcwd() not in sys.path:
    sys.path.insert(0, os.getcwd())
  try:
    function = getattr(importlib.import_module(module_name), function_name)
  except (ImportError, AttributeError) as error:
    raise ValueError(f"{spec}: {error}") from error
  if not callable(function):
    raise ValueError(f"{spec}: {type(function).__name__} is not a function")
  return function
