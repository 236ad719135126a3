"""The pipeline state: its format, version and the one validator that reads it.

A pipeline state is JSON, the same on every host, a few KB at most::

    {"version": 2, "step": 120,                        the next step to hand out
     "fingerprint": {...},                             what determines the order (see fingerprint.py)
     "stream": {...},                                  DocumentStream.get_state()
     "packer": {"done": false, "carry": "eJy..."},     pieces waiting for the next step
     "tokens_per_source": {"web": 1234, ...},          cumulative, for statistics
     "digest": "9f2c..."}                              sha256 of all of the above

Version 1 (jaxdata 0.1) is refused with a clear error: its shuffles and
mixture arithmetic differ, so it cannot be continued exactly.
docs/state.md describes every field.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from jaxdata.checkpoint.fingerprint import describe_changes
from jaxdata.config.batch import BatchConfig
from jaxdata.config.validate import check_state_header, is_int
from jaxdata.errors import CheckpointError, ConfigError

__all__ = [
  "STATE_VERSION",
  "epoch_start",
  "pipeline_state",
  "read_pipeline_state",
  "read_saved_state",
  "seal",
  "state_digest",
]

STATE_VERSION = 2
_KEYS = ("step", "fingerprint", "stream", "packer", "tokens_per_source", "digest")


def state_digest(state: Mapping[str, Any]) -> str:
  """sha256 over the state's canonical JSON, its "digest" field left out."""
  content = {k: v for k, v in state.items() if k != "digest"}
  blob = json.dumps(content, sort_keys=True, separators=(",", ":"), allow_nan=False)
  return hashlib.sha256(blob.encode()).hexdigest()


def seal(state: dict[str, Any]) -> dict[str, Any]:
  """The state with its digest: an edited or damaged copy is refused on restore."""
  return {**state, "digest": state_digest(state)}


def _batch_sizes_agree(saved: Any, current: Any, step: int) -> bool:
  """A batch-size schedule may change from the restored step on: the steps before it are kept."""
  try:
    return BatchConfig.from_description(saved).agrees_before(BatchConfig.from_description(current), step)
  except (ValueError, IndexError, ConfigError):
    return False


def epoch_start(start: Mapping[str, Any], epoch: int) -> dict[str, Any]:
  """The sealed state of step 0 (`start`, unsealed) moved to `epoch`."""
  if not isinstance(epoch, int) or isinstance(epoch, bool) or epoch < 0:
    raise ValueError(f"epoch: expected an int >= 0, got {epoch!r}")
  state = json.loads(json.dumps(start))
  state["stream"]["epoch"] = epoch
  return seal(state)


def pipeline_state(
  step: int, fingerprint: Mapping[str, Any], planner: Mapping[str, Any], tokens_per_source: Mapping[str, int]
) -> dict[str, Any]:
  """The state dict of the current format; `planner` holds stream and packer."""
  return {
    "version": STATE_VERSION,
    "step": step,
    "fingerprint": fingerprint,
    "stream": planner["stream"],
    "packer": planner["packer"],
    "tokens_per_source": dict(tokens_per_source),
  }


def read_saved_state(state: Any) -> dict[str, Any]:
  """A saved state's shape checked (format, version, digest, step), not yet compared with any pipeline.
  Raises `CheckpointError` naming what is wrong."""
  if isinstance(state, Mapping) and "offset" in state and "packer" not in state and "stream" in state:
    raise CheckpointError(
      "pipeline state: this is the state of a document iterator (jaxdata.integrations.MixtureDataset's: a "
      "stream and an offset), not of a Pipeline; restore it with that iterator's set_state, or give a state "
      "a Pipeline's get_state() returned"
    )
  try:
    check_state_header(state, "pipeline state", STATE_VERSION, _KEYS)
  except ConfigError as e:
    raise CheckpointError(str(e)) from e
  for key, kind in (("fingerprint", Mapping), ("stream", Mapping), ("packer", Mapping), ("digest", str)):
    if not isinstance(state[key], kind):
      raise CheckpointError(
        f"pipeline state: {key} must be a {'mapping' if kind is Mapping else 'string'}, got {type(state[key]).__name__}"
      )
  try:
    digest = state_digest(state)
  except (TypeError, ValueError) as e:  # not JSON: NaN, a set, ...
    raise CheckpointError(f"pipeline state: not plain JSON ({str(e)[:200]})") from e
  if digest != state["digest"]:
    raise CheckpointError(
      "pipeline state: its digest does not match its content: the state was edited or damaged after it was saved"
    )
  step = state["step"]
  if not is_int(step) or step < 0:
    raise CheckpointError(f"pipeline state: step must be an int >= 0, got {step!r}")
  return dict(state)


def read_pipeline_state(state: Any, fingerprint: Mapping[str, Any], names: Sequence[str]) -> dict[str, Any]:
  """Checks a saved state against this pipeline and returns it in the
  current format. Raises `CheckpointError` naming what is wrong: malformed,
  newer than this jaxdata, or saved with a config or data that orders
  batches differently (the message lists each change)."""
  state = read_saved_state(state)
  step = state["step"]
  changes = describe_changes(state["fingerprint"], fingerprint)
  if any(c.startswith("global_batch_size:") for c in changes) and _batch_sizes_agree(
    state["fingerprint"].get("global_batch_size"), fingerprint.get("global_batch_size"), step
  ):
    changes = [c for c in changes if not c.startswith("global_batch_size:")]  # a change from this step on
  if changes:
    raise CheckpointError(
      "pipeline state: the config or data changed in what determines the order: "
      + "; ".join(changes)
      + "; restore with reconfigure=True to continue with the new config from this state's step"
    )
  cumulative = state["tokens_per_source"]
  if not isinstance(cumulative, Mapping) or set(cumulative) != set(names):
    raise CheckpointError(f"pipeline state: tokens_per_source must name {list(names)}")
  if any(not is_int(v) or v < 0 for v in cumulative.values()):
    raise CheckpointError(f"pipeline state: tokens_per_source must hold ints >= 0, got {dict(cumulative)}")
  return dict(state)
