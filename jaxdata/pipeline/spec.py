"""`PipelineSpec`: everything that decides a pipeline's batches, as one object.

A pipeline and each of its planner / reader processes open their parts from
the same spec (`open_parts(spec)`), so a process reproduces the in-process
pipeline exactly. The spec crosses the process boundary whole, as JSON
(`to_dict` / `from_dict`, versioned): an option that changes the order is a
field here, never a separate argument with a default that a process could
silently miss (a held-out split once reached the workers as "train")::

    Pipeline(cfg, split=..., epoch=..., read_threads=...)
      -> PipelineSpec (frozen, validated)
           -> open_parts(spec)                               in this process
           -> {"pipeline": spec.to_dict(), "worker": ...}    to every worker -> open_parts(spec)

>>> cfg = PipelineConfig.from_dict({"datasets": [{"name": "a"}], "mixture": {"weights": {"a": 1}}})
>>> spec = PipelineSpec(cfg, split="eval", epoch=2)
>>> PipelineSpec.from_dict(spec.to_dict()) == spec
True
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from jaxdata.config.pipeline_config import PipelineConfig
from jaxdata.errors import ConfigError
from jaxdata.mixture.holdout import SPLITS

__all__ = ["PipelineSpec"]

SPEC_VERSION = 1


@dataclasses.dataclass(frozen=True)
class PipelineSpec:
  """What a pipeline's parts are opened from (see the module docstring).

  Attributes:
    config: the pipeline config as given (for split="eval" the parts derive
      the eval config from it).
    split: "train", or "eval": each dataset's held-out documents once.
    epoch: the pass every dataset's keyed order starts at.
    read_threads: threads reading one dataset's shards at once.
  """

  config: PipelineConfig
  split: str = "train"
  epoch: int = 0
  read_threads: int = 1

  def __post_init__(self) -> None:
    if not isinstance(self.config, PipelineConfig):
      raise ConfigError(f"config: expected a PipelineConfig, got {type(self.config).__name__}")
    if self.split not in SPLITS:
      raise ConfigError(f"split: must be one of {', '.join(SPLITS)}, got {self.split!r}")
    if isinstance(self.epoch, bool) or not isinstance(self.epoch, int) or not 0 <= self.epoch < 2**62:
      raise ConfigError(f"epoch: must be an int in [0, 2**62), got {self.epoch!r}")
    if isinstance(self.read_threads, bool) or not isinstance(self.read_threads, int) or self.read_threads < 0:
      raise ConfigError(f"read_threads: must be an int >= 0, got {self.read_threads!r}")

  def to_dict(self) -> dict[str, Any]:
    """Plain JSON-able data that `from_dict` reads back to an equal spec."""
    return {
      "version": SPEC_VERSION,
      "config": self.config.to_dict(),
      "split": self.split,
      "epoch": self.epoch,
      "read_threads": self.read_threads,
    }

  @classmethod
  def from_dict(cls, raw: Mapping[str, Any]) -> PipelineSpec:
    if raw.get("version") != SPEC_VERSION:
      raise ConfigError(
        f"pipeline spec: version {raw.get('version')!r}, this jaxdata reads {SPEC_VERSION} "
        "(a worker process runs another jaxdata than the pipeline)"
      )
    fields = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(raw) - fields - {"version"})
    if unknown:
      raise ConfigError(f"pipeline spec: unknown fields {unknown}")
    values = {k: v for k, v in raw.items() if k in fields}
    values["config"] = PipelineConfig.from_dict(raw["config"])
    return cls(**values)
