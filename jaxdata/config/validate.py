"""Shared validators: config values and saved-state headers.

Every check raises `ConfigError` (a `ValueError`) whose message starts with
`where`, the dotted name of the field at fault, so every config error and
every state error reads the same way.

>>> is_int(3), is_int(True), is_int(3.0)
(True, False, False)
>>> check_int(0, "batch.global_batch_size", 1)
Traceback (most recent call last):
...
jaxdata.errors.ConfigError: batch.global_batch_size: expected an int >= 1, got 0
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import numbers
import reprlib
from collections.abc import Collection, Mapping, Sequence
from typing import Any, TypeGuard

from jaxdata.errors import ConfigError

__all__ = [
  "MAX_ID",
  "short",
  "check_block_size",
  "check_bool",
  "check_choice",
  "check_int",
  "check_state_header",
  "is_int",
  "mapping",
  "no_unknown_keys",
  "require_keys",
]

BLOCK_SIZE_WORDS = ("auto", "global")
MAX_ID = (1 << 31) - 1  # token ids and counts that int32 batches can hold

_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = 60
_REPR.maxlist = _REPR.maxtuple = _REPR.maxdict = _REPR.maxset = 6
_REPR.maxlevel = 3


def short(value: Any) -> str:
  """A bounded repr of a user-given value for an error message: a huge or
  deeply shared structure (a YAML alias bomb) stays a few hundred characters."""
  return _REPR.repr(value)


def is_int(value: Any) -> TypeGuard[int]:
  """An int that is not a bool (YAML's `true` must not pass as 1)."""
  return isinstance(value, int) and not isinstance(value, bool)


def check_int(value: Any, where: str, minimum: int, maximum: int | None = None) -> None:
  if not is_int(value) or value < minimum or (maximum is not None and value > maximum):
    upper = f" and <= {maximum}" if maximum is not None else ""
    raise ConfigError(f"{where}: expected an int >= {minimum}{upper}, got {short(value)}")


def weight(value: Any, label: str) -> float:
  """A mixture weight: a finite real number >= 0 (not a bool, list or string), as a float;
  errors read "LABEL must be ...", e.g. label "weights: weight of 'web'".

  >>> weight(3, "w")
  3.0
  >>> weight([1], "mixture.json: 'web'.weight")
  Traceback (most recent call last):
  ...
  jaxdata.errors.ConfigError: mixture.json: 'web'.weight must be a number, got [1]
  """
  if isinstance(value, bool) or not isinstance(value, numbers.Real):
    raise ConfigError(f"{label} must be a number, got {short(value)}")
  try:
    number = float(value)
  except OverflowError:  # an int beyond the float range
    raise ConfigError(f"{label} must be finite, got an int of {int(math.trunc(value)).bit_length()} bits") from None
  if not math.isfinite(number):
    raise ConfigError(f"{label} must be finite, got {number}")
  if number < 0:
    raise ConfigError(f"{label} must be >= 0, got {number}")
  return number


def check_bool(value: Any, where: str) -> None:
  if not isinstance(value, bool):
    raise ConfigError(f"{where}: expected true or false, got {short(value)}")


def check_choice(value: Any, choices: Sequence[str], where: str) -> None:
  if value not in choices:
    raise ConfigError(f"{where}: {short(value)} is not one of {', '.join(choices)}")


def check_block_size(value: Any, where: str) -> None:
  """None, a positive int, "auto" or "global"."""
  if value is None or value in BLOCK_SIZE_WORDS:
    return
  if not is_int(value) or value < 1:
    raise ConfigError(f"{where}: expected null, a positive int, 'auto' or 'global', got {short(value)}")


def check_open_shards(open_shards: Any, block_size: Any, where: str) -> None:
  """`open_shards`: an int >= 1, and not above 1 with the global shuffle (which reads every shard at once)."""
  check_int(open_shards, f"{where}open_shards", 1)
  if open_shards > 1 and block_size == "global":
    raise ConfigError(
      f"{where}open_shards: {open_shards} reads that many shards at a time, but shuffle_block_size "
      "'global' reads every shard at once; give an int block size or 'auto' "
      "(or open_shards: 1)"
    )


def mapping(value: Any, where: str) -> Mapping[str, Any]:
  if not isinstance(value, Mapping):
    raise ConfigError(f"{where}: expected a mapping, got {short(value)}")
  return value


# Keys other tools spell their own way (Grain, Hugging Face datasets, MaxText, Megatron, Levanter, OLMo,
# torch loaders): an unknown key found here names jaxdata's key for the same thing.
PEER_SPELLINGS = {
  "probabilities": "mixture.weights",
  "sampling_weights": "mixture.weights",
  "weights": "mixture.weights",
  "blend": "mixture.weights (or `jaxdata from-megatron`)",
  "seq_len": "packing.seq_len",
  "seq_length": "packing.seq_len",
  "sequence_length": "packing.seq_len",
  "max_seq_len": "packing.seq_len",
  "max_seq_length": "packing.seq_len",
  "max_target_length": "packing.seq_len (or jaxdata.integrations.maxtext for MaxText's keys)",
  "context_length": "packing.seq_len",
  "batch_size": "batch.global_batch_size",
  "global_batch_size": "batch.global_batch_size",
  "train_batch_size": "batch.global_batch_size",
  "shuffle": "shuffle_block_size (global by default)",
  "shuffle_buffer_size": "shuffle_block_size",
  "num_epochs": "stop_after_passes",
  "epochs": "stop_after_passes",
  "data_path": "datasets[].path",
  "paths": "datasets[].path",
  "eos_token_id": "packing.eos_id",
  "bos_token_id": "packing.bos_id",
  "pad_token_id": "packing.pad_id",
  "packing_type": "packing.mode",
}


def no_unknown_keys(raw: Mapping[str, Any], allowed: Collection[str], where: str) -> None:
  """A `ConfigError` naming the first key of `raw` not in `allowed`, with the closest allowed one.

  >>> no_unknown_keys({"sed": 1}, ["seed", "datasets"], "config")
  Traceback (most recent call last):
  ...
  jaxdata.errors.ConfigError: config: unknown key 'sed' (did you mean 'seed'? allowed: datasets, seed)
  """
  unknown = sorted(set(raw) - set(allowed), key=str)  # keys may be ints, dates, ... from YAML
  if unknown:
    close = difflib.get_close_matches(str(unknown[0]), [str(a) for a in allowed], n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    peer = PEER_SPELLINGS.get(str(unknown[0]))
    if peer is not None:
      leaf = peer.split(" ")[0].rsplit(".", 1)[-1]
      hint = (
        f"did you mean {leaf!r}? another tool's name; "
        if leaf in allowed
        else f"another tool's name: jaxdata's is {peer}; "
      )
    raise ConfigError(f"{where}: unknown key {short(unknown[0])} ({hint}allowed: {', '.join(sorted(allowed))})")


def build(cls: type, raw: Any, where: str) -> Any:
  """`cls(**raw)` for a frozen dataclass of options, with unknown and missing keys named (not a TypeError)."""
  given = mapping(raw, where)
  fields = dataclasses.fields(cls)
  no_unknown_keys(given, [f.name for f in fields], where)
  missing = [
    f.name
    for f in fields
    if f.name not in given and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
  ]
  if missing:
    raise ConfigError(f"{where}: missing {short(missing[0])}")
  return cls(**given)


def require_keys(given: Any, expected: Sequence[str], where: str, value: str) -> None:
  """Raises unless `given` has exactly the keys `expected`, naming the first
  unknown key or the first missing one ("... has no {value}")."""
  unknown = [k for k in given if k not in expected]
  if unknown:
    raise ConfigError(f"{where}: {short(unknown[0])} is not one of {', '.join(map(repr, expected))}")
  missing = [k for k in expected if k not in given]
  if missing:
    raise ConfigError(f"{where}: {missing[0]!r} has no {value}")


def check_state_header(state: Any, where: str, current: int, keys: Sequence[str]) -> int:
  """Checks a saved state's shape: a mapping with the int `version` this
  jaxdata writes (`current`) and every key of `keys`. Returns the version.

  Older versions are refused: each version bump so far changed the order
  itself, so an older state cannot be continued exactly.

  >>> check_state_header({"version": 9}, "stream state", 1, ())
  Traceback (most recent call last):
  ...
  jaxdata.errors.ConfigError: stream state: format version 9 is newer than this jaxdata reads (1); upgrade jaxdata
  """
  if not isinstance(state, Mapping) or not is_int(state.get("version")):
    raise ConfigError(f"{where}: expected a mapping with an int version, got {short(state)}")
  version = state["version"]
  if version > current:
    raise ConfigError(
      f"{where}: format version {version} is newer than this jaxdata reads ({current}); upgrade jaxdata"
    )
  if version < current:
    raise ConfigError(
      f"{where}: format version {version} was written by an older jaxdata whose shuffles or mixture "
      f"differ from this version's ({current}), so it cannot be continued exactly; start the data "
      "from step 0, or finish that run with the jaxdata that wrote it"
    )
  missing = [k for k in keys if k not in state]
  if missing:
    raise ConfigError(f"{where}: missing {', '.join(missing)}")
  return version
