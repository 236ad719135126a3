"""The pipeline state: its format, version and the one validator that reads it.

A pipeline state is JSON, the same on every host, a few KB at most::

    {"version": 2, "step": 120,                        the next step to hand out
     "fingerprint": {...},                             what determines the order (see fingerprint.py)
     "stream": {...},                                  DocumentStream.get_state()
     "packer": {"done": false, "carry": "eJy..."},     pieces waiting for the next step
     "tokens_per_source": {"web": 1234, ...}}          cumulative, for statistics

Version 1 (jaxdata 0.1) is refused with a clear error: its shuffles and
mixture arithmetic differ, so it cannot be continued exactly.
docs/state.md describes every field.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from jaxdata.checkpoint.fingerprint import describe_changes
from jaxdata.config.validate import check_state_header, is_int
from jaxdata.errors import CheckpointError, ConfigError

__all__ = ["STATE_VERSION", "pipeline_state", "read_pipeline_state"]

STATE_VERSION = 2
_KEYS = ("step", "fingerprint", "stream", "packer", "tokens_per_source")


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


def read_pipeline_state(
    state: Any, fingerprint: Mapping[str, Any], names: Sequence[str]
) -> dict[str, Any]:
  """Checks a saved state against this pipeline and returns it in the
  current format. Raises `CheckpointError` naming what is wrong: malformed,
  newer than this jaxdata, or saved with a config or data that orders
  batches differently (the message lists each change)."""
  try:
    check_state_header(state, "pipeline state", STATE_VERSION, _KEYS)
  except ConfigError as e:
    raise CheckpointError(str(e)) from e
  changes = describe_changes(state["fingerprint"], fingerprint)
  if changes:
    raise CheckpointError(
        "pipeline state: the config or data changed in what determines the order: " + "; ".join(changes)
    )
  step = state["step"]
  if not is_int(step) or step < 0:
    raise CheckpointError(f"pipeline state: step must be an int >= 0, got {step!r}")
  cumulative = state["tokens_per_source"]
  if not isinstance(cumulative, Mapping) or set(cumulative) != set(names):
    raise CheckpointError(f"pipeline state: tokens_per_source must name {list(names)}")
  if any(not is_int(v) or v < 0 for v in cumulative.values()):
    raise CheckpointError(f"pipeline state: tokens_per_source must hold ints >= 0, got {dict(cumulative)}")
  return dict(state)
