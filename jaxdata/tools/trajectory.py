"""Weight trajectories: what an online controller set (or will set), for planning and for diagnosis.

A trajectory is [(step, {dataset: weight}), ...] in rising step order, read from
either file a run has::

    trajectory.json   [{"step": 0, "weights": {...}}, {"step": 40, "weights": {...}}, ...]
    stats JSONL       the pipeline's per-step records: their target_share wherever it changes
                      (mixture updates, schedule phases, ramps)

`with_trajectory(cfg, trajectory)` is the config whose schedule follows it, so
`jaxdata plan --weights-trajectory FILE` plans exposure under moving weights.

>>> trajectory_phases([(0, {"a": 1, "b": 1}), (40, {"a": 3, "b": 1})])
[{'weights': {'a': 1, 'b': 1}, 'until_step': 40}, {'weights': {'a': 3, 'b': 1}}]
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from jaxdata.config.pipeline_config import PipelineConfig
from jaxdata.errors import InputFormatError
from jaxdata.tools.report import jsonl_records

__all__ = ["Trajectory", "load_trajectory", "with_trajectory"]

Trajectory = list[tuple[int, dict[str, float]]]


def _from_stats(path: str) -> Trajectory:
  """Every step whose target shares differ from the step before's (updates, schedule phases, ramps);
  a step recorded twice (a resumed run) keeps its last record."""
  by_step: dict[int, dict[str, float]] = {}
  for number, record in jsonl_records(path, "stats record"):
    if not isinstance(record, dict) or "step" not in record or "target_share" not in record:
      raise InputFormatError(f"{path}:{number}: a stats record needs a step and its target_share")
    by_step[int(record["step"])] = dict(record["target_share"])
  out: Trajectory = []
  for step in sorted(by_step):
    if not out or by_step[step] != out[-1][1]:
      out.append((step, by_step[step]))
  if out:
    out[0] = (0, out[0][1])  # the first step's weights hold from step 0
  return out


def load_trajectory(path: str) -> Trajectory:
  """A trajectory from a JSON list of {step, weights} or a stats JSONL; errors name the file."""
  with open(path, encoding="utf-8") as f:
    head = f.read(1)
  if head == "[":
    with open(path, encoding="utf-8") as f:
      try:
        raw = json.load(f)
      except json.JSONDecodeError as e:
        raise InputFormatError(f"{path}: not a JSON trajectory ({e.msg})") from e
    try:
      trajectory = [(int(entry["step"]), dict(entry["weights"])) for entry in raw]
    except (KeyError, TypeError, ValueError) as e:
      raise InputFormatError(f"{path}: a trajectory is a list of {{'step': N, 'weights': {{...}}}} ({e})") from e
  else:
    trajectory = _from_stats(path)
  steps = [s for s, _ in trajectory]
  if not trajectory or steps != sorted(set(steps)) or steps[0] != 0:
    raise InputFormatError(f"{path}: a trajectory's steps must rise from 0, got {steps[:10]}")
  return trajectory


def trajectory_phases(trajectory: Sequence[tuple[int, Mapping[str, float]]]) -> list[dict[str, Any]]:
  """The trajectory as a config's mixture.schedule phases."""
  phases: list[dict[str, Any]] = []
  for (_, weights), following in zip(trajectory, [*trajectory[1:], None]):
    phase: dict[str, Any] = {"weights": dict(weights)}
    if following is not None:
      phase["until_step"] = following[0]
    phases.append(phase)
  return phases


def with_trajectory(cfg: PipelineConfig, trajectory: Sequence[tuple[int, Mapping[str, float]]]) -> PipelineConfig:
  """`cfg` with its mixture following `trajectory` (a ConfigError names a bad weight or dataset)."""
  raw = cfg.to_dict()
  raw["mixture"] = {**raw["mixture"], "weights": None, "schedule": trajectory_phases(trajectory)}
  return PipelineConfig.from_dict(raw)
