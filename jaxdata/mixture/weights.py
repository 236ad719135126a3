"""`MixtureWeights`: the weights each step draws with, apart from the draw itself.

Three sources, each from a step on; the later one wins::

    config     the schedule (`PipelineConfig.schedule`: phases, ramps), built once from the config
    updates    `MixtureUpdates` the training loop made (`Pipeline.update_mixture`), each from its step
    changes    `ConfigChange`s of the run's restores with reconfigure=True (history: the stats name them)

The draw (`DocumentStream`) asks only `exact_at(step)`; the value is frozen,
so a snapshot of the stream shares it.

>>> from jaxdata.config import PipelineConfig
>>> cfg = PipelineConfig.from_dict({"datasets": [{"name": "a"}, {"name": "b"}],
...     "mixture": {"weights": {"a": 1, "b": 1}}})
>>> weights = MixtureWeights.of_config(cfg).with_update(40, {"a": 1, "b": 3})
>>> weights.at(39), weights.at(40)
((0.5, 0.5), (0.25, 0.75))
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from fractions import Fraction

from jaxdata.config.pipeline_config import PipelineConfig
from jaxdata.config.schedule import Schedule
from jaxdata.mixture.changes import ConfigChange
from jaxdata.mixture.updates import MixtureUpdates

__all__ = ["MixtureWeights"]


@dataclasses.dataclass(frozen=True)
class MixtureWeights:
  """The config's schedule, the loop's updates after it, and the run's config changes (module docstring)."""

  schedule: Schedule
  updates: MixtureUpdates
  changes: tuple[ConfigChange, ...] = ()

  @classmethod
  def of_config(cls, cfg: PipelineConfig) -> MixtureWeights:
    return cls(cfg.schedule, MixtureUpdates(tuple(cfg.names)))

  @property
  def names(self) -> tuple[str, ...]:
    return self.updates.names

  def exact_at(self, step: int) -> tuple[Fraction, ...]:
    """The weights in force at `step`: the last mixture update at or before it, else the config's."""
    return self.updates.in_force(step) or self.schedule.exact_weights_at(step)

  def at(self, step: int) -> tuple[float, ...]:
    return tuple(float(w) for w in self.exact_at(step))

  @property
  def constant_from(self) -> int:
    """The first step from which the weights never change again."""
    return max(self.schedule.constant_from, self.updates.last_step)

  def with_update(self, step: int, weights: Mapping[str, float]) -> MixtureWeights:
    """With new weights from `step` on (`MixtureUpdates.added`: a `ValueError` / `ConfigError` names bad
    weights)."""
    return dataclasses.replace(self, updates=self.updates.added(step, weights))

  def update_starting_at(self, step: int) -> dict[str, float] | None:
    """The weights of a mixture update that takes effect at `step` (for the stats), else None."""
    weights = self.updates.starting_at(step)
    return None if weights is None else {n: float(w) for n, w in zip(self.names, weights)}

  def change_starting_at(self, step: int) -> ConfigChange | None:
    """The config change whose first step is `step` (for the stats), else None."""
    return next((c for c in self.changes if c.step == step), None)
