"""The interpreter's GIL switch interval while a pipeline's threads run.

A thread that gives up the GIL (jax's transfer does, twice per feature; so
do ArrayRecord's reads) waits to get it back until the thread holding it
is made to let go, after the switch interval (Python's default: 5 ms). A
Python-bound training loop holds the GIL nearly always, so each release
can cost the prefetch thread up to 5 ms: over an 8-device mesh the prefetch
queue ran dry and the loop waited inside `next()` for 2.6-2.9% of its time
(fed 2M tokens/s). At 1 ms the queue stays full (0.2% inside `next()`),
but the loop itself is made to yield more often: its slowdown was no
smaller (+4.9% against +3.3%, medians of five runs), so the default leaves
the interval alone::

    training thread:  python ........ [made to yield] python ........ [yield] ...
    prefetch thread:    (release, wait <= interval)   plan | put ...    (wait) ...

With `Pipeline(switch_interval_s=...)` (e.g. `SWITCH_INTERVAL_S`, 1 ms),
while any pipeline's prefetch thread runs (none with `prefetch=0` or
workers) the interval is lowered to it, never raised: a smaller value set
by the program stays. When the last such thread stops, the program's value
comes back, unless something else changed it meanwhile.

>>> import sys
>>> before = sys.getswitchinterval()
>>> lease = lower_switch_interval(before / 2)
>>> sys.getswitchinterval() == before / 2
True
>>> lease.release(); sys.getswitchinterval() == before
True
"""

from __future__ import annotations

import numbers
import sys
import threading

from jaxdata.config.validate import short

__all__ = ["SWITCH_INTERVAL_S", "SwitchIntervalLease", "check_switch_interval_s", "lower_switch_interval"]

SWITCH_INTERVAL_S = 0.001  # a value to ask for when a loop waits inside next(); not the default

_lock = threading.Lock()
_wanted: list[float] = []  # one entry per lease held: the interval it asks for
_program: list[float] = []  # while any lease is held: the program's own interval
_ours: list[float] = []  # while any lease is held: the interval last set here, as the interpreter reports it


def check_switch_interval_s(value: float | None) -> None:
  """None (leave it alone) or seconds in [1e-6, 1] (the interpreter keeps whole microseconds);
  `ValueError` naming the argument."""
  if value is None:
    return
  if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 1e-6 <= value <= 1:
    raise ValueError(f"switch_interval_s: must be None or a number of seconds in [1e-6, 1], got {short(value)}")


class SwitchIntervalLease:
  """One holder's request for a lower interval; `release()` (idempotent) gives it back."""

  def __init__(self, wanted: float) -> None:
    self._wanted = wanted
    self._held = True

  def release(self) -> None:
    with _lock:
      if not self._held:
        return
      self._held = False
      _wanted.remove(self._wanted)
      _adopt_a_program_change()
      if _wanted:
        _apply()
        return
      _set(_program.pop())
      _ours.clear()


def lower_switch_interval(wanted: float) -> SwitchIntervalLease:
  """Sets the interval to min(the program's, every holder's `wanted`) until the lease is released."""
  check_switch_interval_s(wanted)
  wanted = float(wanted)  # a NumPy or Fraction value as the interpreter takes it
  with _lock:
    if _wanted:
      _adopt_a_program_change()
    else:
      _program.append(sys.getswitchinterval())
    _wanted.append(wanted)
    _apply()
  return SwitchIntervalLease(wanted)


def _adopt_a_program_change() -> None:
  """A value the program set while leases were held becomes its own (restored at the end)."""
  now = sys.getswitchinterval()
  if now != _ours[0]:
    _program[0] = now


def _apply() -> None:
  _set(min(_program[0], *_wanted))
  _ours[:] = [sys.getswitchinterval()]


def _set(seconds: float) -> None:
  """Sets whole microseconds (the interpreter truncates: a value read back and set again would drift)."""
  sys.setswitchinterval((round(seconds * 1e6) + 0.5) / 1e6)
