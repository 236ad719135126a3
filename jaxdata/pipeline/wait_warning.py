"""A one-line warning when the training loop waits long for a step (and one when a stream ends
before its first whole step).

A loop that waits seconds for its batch is input-bound; the line says which
step, how long, and how many steps were ready ahead when `next()` was called
(0: the pipeline is slower than the loop; more: something else held it, such
as a restart after an update at an early step)::

    jaxdata: next() waited 12.4 s for step 1200 (0 of 2 steps were ready ahead); the input is slower
    than the loop here: see docs/performance.md

>>> message = wait_message(step=1200, waited_s=12.4, ready=0, depth=2)
>>> message.startswith("next() waited 12.4 s for step 1200 (0 of 2 steps were ready ahead)")
True
"""

from __future__ import annotations

import logging
import numbers
import warnings

from jaxdata.config.validate import short

__all__ = ["WAIT_WARNING_S", "check_wait_warning_s", "warn_if_no_step", "warn_if_waited"]

WAIT_WARNING_S = 10.0  # Pipeline(wait_warning_s=...): longer waits for one step are logged
LOGGER = logging.getLogger("jaxdata")


def check_wait_warning_s(value: float | None) -> None:
  """None (no warning) or a number of seconds > 0; `ValueError` naming the argument."""
  if value is None:
    return
  if isinstance(value, bool) or not isinstance(value, numbers.Real) or not value > 0:
    raise ValueError(f"wait_warning_s: must be None or a number of seconds > 0, got {short(value)}")


def wait_message(step: int, waited_s: float, ready: int, depth: int) -> str:
  """The warning's text: the step (counted from 0), the wait, and steps ready of those made ahead."""
  ahead = f"{ready} of {depth} steps were ready ahead" if depth else "prefetch=0: no step is made ahead"
  where = "the input is slower than the loop here" if ready == 0 else "the steps ahead were not handed out in time"
  return f"next() waited {waited_s:.3g} s for step {step} ({ahead}); {where}: see docs/performance.md"


def warn_if_waited(threshold_s: float | None, step: int, waited_s: float, ready: int, depth: int) -> bool:
  """Logs the line on the "jaxdata" logger if `waited_s` exceeds `threshold_s`; whether it did."""
  if threshold_s is None or waited_s <= threshold_s:
    return False
  LOGGER.warning("jaxdata: %s", wait_message(step, waited_s, ready, depth))
  return True


def warn_if_no_step(step: int, tokens_per_step: int) -> None:
  """At the stream's end: a `RuntimeWarning` if it ended before one whole step (no batch at all)."""
  if step == 0:
    warnings.warn(
      f"jaxdata: the stream ended before one whole step ({tokens_per_step:,} tokens): no batch "
      "(batch.drop_remainder drops the partial one); the datasets are smaller than a step under "
      "their pass policies",
      RuntimeWarning,
      stacklevel=3,
    )


def ended_message(step: int, passes: dict[str, int]) -> str:
  """Why `next()` raises StopIteration: the data ran out under the pass policies, after `step` steps."""
  done = ", ".join(f"{name} {count}" for name, count in passes.items())
  return (
    f"the data ended after {step:,} steps: a dataset ran out under its pass policy (passes completed: {done}); "
    "exhausted_policy: repeat, or more passes, keeps a run going"
  )


def warn_ended(step: int, passes: dict[str, int]) -> str:
  """Says once, on the "jaxdata" logger and as a `RuntimeWarning`, that the stream ended after whole steps
  (a loop asking for more would otherwise stop without a word); returns the message."""
  message = ended_message(step, passes)
  if step > 0:
    LOGGER.warning("jaxdata: %s", message)
    warnings.warn(f"jaxdata: {message}", RuntimeWarning, stacklevel=3)
  return message
