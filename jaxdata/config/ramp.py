"""A value that rises linearly with the step: the batch-size ramp and the sequence-length warmup.

::

    value                                 final
      |                          ________________
      |                    __|‾‾   (rounded down to multiples of granularity, never below start)
      |              __|‾‾
    start ____|‾‾‾‾‾
      +----------------------|-----------------> step
      0                    steps

>>> ramp_value(500, start=64, final=256, steps=1000, granularity=32)
160
>>> ramp_value(1000, start=64, final=256, steps=1000, granularity=32)
256
"""

from __future__ import annotations

from typing import Any

from jaxdata.config.validate import check_int
from jaxdata.errors import ConfigError

__all__ = ["check_ramp_steps", "ramp_value"]


def check_ramp_steps(steps: Any, where: str) -> None:
  """Steps of a ramp: an int >= 1, or a float fraction of the run in (0, 1] (resolved to steps later)."""
  if isinstance(steps, float):
    if not 0 < steps <= 1:
      raise ConfigError(f"{where}: a fraction of the run must lie in (0, 1], got {steps}")
  else:
    check_int(steps, where, 1)


def ramp_value(step: int, start: int, final: int, steps: int | float, granularity: int) -> int:
  """`start` at step 0 rising linearly to `final` at `steps`, rounded down to `granularity`, never below `start`."""
  if step >= steps:
    return final
  grown = start + (final - start) * step // int(steps)
  return min(final, max(start, grown // granularity * granularity))
