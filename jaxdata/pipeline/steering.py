"""Mixture steering: a loop's `update_mixture` calls reach the planning, on time and the same on every host.

One room for the feature, talking only to the planning side (`StepMaker.adopt_updates`,
`StepMaker.plan_before`; locally through the planner's mailbox, or by message to a planner process):

    update(state, weights, at_step)  the update's step (default: the next step handed out plus
                                     `mixture.update_lag_steps`), the state with it, and the planning told
    handed_out(state)                each step: the planning stays behind the next update's step (`horizon`)
    UpdateAgreement                  every host made the same updates at the same points

The horizon: while the loop updates, plan only steps that draw no documents of the step the next
default update takes effect at. The next update is expected as far after the last as the last was after
the one before it (the cadence): a loop that updates every k steps lets the pipeline plan and read k steps
further ahead. An update the planning cannot take (a step from its step on is planned) is `replanned`:
the pipeline restarts from the last state handed out.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from jaxdata._lazy import lazy_module
from jaxdata.checkpoint.state import PipelineState
from jaxdata.mixture.updates import MixtureUpdates
from jaxdata.pipeline.producing import StepMaker

if TYPE_CHECKING:  # the type checker sees jax; at run time it is imported on first use
  import jax
else:
  jax = lazy_module("jax")
multihost_utils = lazy_module("jax.experimental.multihost_utils")

__all__ = ["UPDATE_CHECK_EVERY", "MixtureSteering", "Steered"]


UPDATE_CHECK_EVERY = 100  # mixture updates between two agreement checks (one collective each)
_DIGEST_BYTES = 8


class UpdateAgreement:
  """Checks that every host of a multi-process run made the same mixture updates at the same points.

  Each update extends a running sha256 of (step handed out, the update); every UPDATE_CHECK_EVERY
  updates, and at every `check()` (a checkpoint save), the hosts compare the running digests after
  each of the updates since the last check in one collective: the first that differs is named. The
  loop pays one collective per UPDATE_CHECK_EVERY updates instead of one per update (every host's
  loop makes the same calls, so every host takes part in the same checks). A no-op on one process::

      update  u1    u2    u3   ...  u100 -> allgather [count, d1 .. d100] (8 bytes each) -> compare with host 0
      digest  d1 = h(u1), d2 = h(d1, u2), ...        the first index that differs names its update
  """

  def __init__(self, what: str) -> None:
    self.what = what
    self.running = hashlib.sha256()
    self.since_check: list[tuple[int, int, bytes]] = []  # (step handed out, at_step, running digest)
    self._hosts: int | None = None  # jax.process_count(), once asked

  def made(self, handed_out: int, at_step: int, update: Any) -> None:
    if self.hosts() == 1:
      return
    self.running.update(json.dumps([handed_out, update], sort_keys=True).encode())
    self.since_check.append((handed_out, at_step, self.running.digest()[:_DIGEST_BYTES]))
    if len(self.since_check) >= UPDATE_CHECK_EVERY:
      self.check()

  def hosts(self) -> int:
    if self._hosts is None:  # no jax yet: no jax.distributed, one process
      self._hosts = jax.process_count() if "jax" in sys.modules else 1
    return self._hosts

  def check(self) -> None:
    """The collective comparison (every host calls it together); `ValueError` on every host."""
    if self.hosts() == 1:
      return
    mine = np.zeros(1 + UPDATE_CHECK_EVERY * _DIGEST_BYTES, np.uint8)
    mine[0] = len(self.since_check)
    for i, (_, _, digest) in enumerate(self.since_check):
      mine[1 + i * _DIGEST_BYTES : 1 + (i + 1) * _DIGEST_BYTES] = np.frombuffer(digest, np.uint8)
    every = np.asarray(multihost_utils.process_allgather(mine)).reshape(self.hosts(), -1)
    calls, self.since_check = self.since_check, []
    differing = [i for i in range(every.shape[0]) if not np.array_equal(every[i], every[0])]
    if not differing:
      return
    other = every[differing[0]]
    if other[0] != every[0][0]:
      raise ValueError(
        f"{self.what}: process {differing[0]} made {other[0]} updates since the last check, process 0 "
        f"{every[0][0]}; every host must make the same update at the same step"
      )
    first = next(i for i in range(len(calls)) if _differs(every, i))
    handed_out, at_step, _ = calls[first]
    raise ValueError(
      f"{self.what}: the update made after {handed_out} steps (at_step={at_step}) differs between "
      f"hosts (process {differing[0]} disagrees with process 0); every host must make the same update at the same step"
    )


def _differs(every: np.ndarray, index: int) -> bool:
  """Whether some host's running digest after update `index` differs from host 0's."""
  block = every[:, 1 + index * _DIGEST_BYTES : 1 + (index + 1) * _DIGEST_BYTES]
  return bool((block != block[0]).any())


@dataclasses.dataclass(frozen=True)
class Steered:
  """What an update did: its step, the state with it, and whether the planning took it as it was
  (False: the steps made ahead must be planned again, from `state`)."""

  at_step: int
  state: PipelineState
  adopted: bool


class MixtureSteering:
  """A pipeline's mixture updates (see the module docstring).

  Args:
    maker: the step maker whose planning gets the updates.
    what: names the pipeline in an agreement error.
    lag_steps: `mixture.update_lag_steps`.
    draw_reach: steps past the one planned whose documents a plan may draw.
    waited_for: steps the pipeline waits for ahead of the one handed out (its prefetch depth).
  """

  def __init__(self, maker: StepMaker, what: str, lag_steps: int, draw_reach: int, waited_for: int) -> None:
    self.maker, self.lag_steps, self.draw_reach, self.waited_for = maker, lag_steps, draw_reach, waited_for
    self.agreement = UpdateAgreement(what)
    self.steering = False  # the loop updates: planning stays behind the next update's step
    self.updates: MixtureUpdates | None = None  # adopted where planning runs after steps were made ahead
    self.adopted = self.replanned = 0
    # Where the loop made its last update (steps handed out then) and how many steps before that
    # the one before it: the cadence the planning expects (`horizon`).
    self.last_update = self.interval = 0

  def earliest(self, state: PipelineState) -> int:
    """The first step an update can take effect at (documents may be drawn for the next step)."""
    return max(state.step, state.next_step)

  def update(self, state: PipelineState, weights: Mapping[str, float], at_step: int | None) -> Steered:
    """Adds the update (checked by the caller against `earliest`) and tells the planning."""
    step = max(state.step + self.lag_steps, self.earliest(state)) if at_step is None else at_step
    updates = state.updates.added(step, weights)
    self.agreement.made(state.step, step, updates.to_json_at(step))
    self.updates = updates
    self.interval = max(0, state.step - self.last_update) if self.steering else 0  # (0 after a restore back)
    self.last_update, self.steering = state.step, True
    state = state.with_updates(updates)
    # Adopted first, then the planning may move on: the horizon after this call lies past `step`.
    adopted = self.maker.adopt_updates(updates, step)
    if adopted:
      self.adopted += 1
      self.maker.plan_before(self.horizon(state.step))
    else:
      self.replanned += 1
    return Steered(step, state, adopted)

  def handed_out(self, state: PipelineState) -> PipelineState:
    """A step was handed out with `state`: the state with the updates adopted since it was planned, as
    when made after them; the planning moves on behind the next update's step."""
    if self.updates is not None:
      state = state.with_updates(self.updates)
    if self.steering:
      self.maker.plan_before(self.horizon(state.step))
    return state

  def restarted(self, handed_out: int) -> None:
    """Before the maker restarts at `handed_out`: its states hold the updates now; a planner process
    starts behind the horizon."""
    self.updates = None
    if self.steering:
      self.maker.plan_before(self.horizon(handed_out))

  def horizon(self, handed_out: int) -> int:
    """Plan only steps that draw no documents of the step the next default update takes effect at,
    and at least those the pipeline waits for (a planner process that stopped short of them would leave
    it waiting: they are planned, an update then replans)."""
    expected = max(handed_out, self.last_update + self.interval)
    waited_for = 1 + self.waited_for  # steps h .. h + prefetch
    return max(expected + self.lag_steps, handed_out + self.draw_reach + waited_for)
