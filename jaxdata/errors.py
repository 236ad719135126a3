"""Error types. Each message names the file, field or value at fault.

Every error jaxdata raises of its own is a `jaxdata.Error` (and also the builtin it refines:
a `DatasetError` is a `ValueError`, so `except ValueError` keeps working).
"""

from __future__ import annotations

import importlib
from typing import Any


class Error(Exception):
  """The base of every error jaxdata raises of its own: `except jaxdata.Error` catches them all."""


class DatasetError(Error, ValueError):
  """A dataset directory disagrees with its manifest, or a shard is unreadable.

  The message always names the dataset directory or shard file and the
  problem, for example ``web-00003.array_record: 1200 records in the file,
  1250 in manifest.json``.
  """


class InputFormatError(Error, ValueError):
  """An input document for `jaxdata convert` is malformed.

  The message names the file and line (or row) and what is wrong with it.
  """


class ConfigError(Error, ValueError):
  """An option or config field has an invalid value; the message names it."""


class CheckpointError(Error, ValueError):
  """A saved pipeline state cannot be restored: missing, corrupt, newer
  format, or taken with a config / data that orders batches differently.
  The message names the checkpoint path or what changed."""


class WorkerStartError(Error, RuntimeError):
  """A pipeline's worker or planner process could not be started, or exited
  before it had opened the data; the message names the process and its exit."""


class PipelineClosedError(Error, RuntimeError):
  """A closed pipeline was asked for a batch, a new state or a mixture update.

  Its `get_state()` still answers: the state after the last batch handed out.
  """


def optional_module(name: str, extra: str, purpose: str) -> Any:
  """Imports an optional dependency, or raises an ImportError naming the extra that installs it.

  >>> optional_module("json", "none", "reading JSON").dumps(1)
  '1'
  """
  try:
    return importlib.import_module(name)
  except ImportError as e:
    raise ImportError(f"{purpose} needs {name.split('.')[0]}: pip install 'jaxdata[{extra}]' ({e})") from e


def installed_module(name: str) -> Any:
  """The module if it can be imported, else None (for a feature with a plain fallback).

  >>> installed_module("json").dumps(2), installed_module("no_such_module_here")
  ('2', None)
  """
  try:
    return importlib.import_module(name)
  except ImportError:
    return None
