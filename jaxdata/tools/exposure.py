"""Exposure before the run: how often each dataset is seen under its schedule.

For D processed tokens split into steps of T tokens, and dataset d with U_d
unique tokens (U = sum of U_d) and sampling share w_d(step)::

    natural share      U_d / U
    upsampling         w_d / (U_d / U)
    processed tokens   sum over steps of w_d(step) * T
    effective passes   processed tokens / U_d        (= w_d * D / U_d for constant weights)

A run whose pass policies end the stream processes fewer tokens than asked
for: `simulate_end` replays the stream from metadata (the same documents the
pipeline will emit, without packing) to find the step where it ends and the
dataset that ends it; `jaxdata plan` reports exposure up to there.

>>> table = exposure({"web": 50e6, "rest": 950e6}, {"web": 0.025, "rest": 0.975}, 1e9)
>>> round(table.datasets["web"].passes, 3)
0.5
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from jaxdata.config.pipeline_config import PipelineConfig
from jaxdata.config.schedule import Schedule
from jaxdata.config.validate import require_keys
from jaxdata.mixture.stream import DatasetMeta, load_metadata
from jaxdata.pipeline.planner import StepPlanner
from jaxdata.pipeline.vocabulary import resolve_special_ids
from jaxdata.sources.manifest import MANIFEST_NAME, Manifest
from jaxdata.tools.mixture_checks import stored_order_warnings, weight_notices
from jaxdata.tools.numbers import human_count

__all__ = [
  "DatasetExposure",
  "ExposureTable",
  "StreamEnd",
  "expected_unique_fraction",
  "exposure",
  "parse_tokens",
  "plan_run",
  "schedule_exposure",
  "simulate_end",
  "weights_by_step",
]

_TOKENS = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:e[+-]?\d+)?)\s*([kmbt]?)\s*$", re.IGNORECASE)
_SCALE = {"": 1, "k": 1e3, "m": 1e6, "b": 1e9, "t": 1e12}
MAX_PLANNED_TOKENS = 10**18  # a quintillion: a thousand times today's largest runs


def parse_tokens(text: str) -> int:
  """'20e9', '20B', '1.5T', '300M' -> a token count.

  >>> parse_tokens("20B"), parse_tokens("2.5e6")
  (20000000000, 2500000)
  """
  match = _TOKENS.match(str(text))
  if not match:
    raise ValueError(f"tokens: cannot read {text!r} (try 20e9 or 20B)")
  value = float(match.group(1)) * _SCALE[match.group(2).lower()]
  if not math.isfinite(value) or value <= 0:
    raise ValueError(f"tokens: must be a positive number, got {text!r}")
  if value > MAX_PLANNED_TOKENS:
    raise ValueError(f"tokens: {text!r} is more than {MAX_PLANNED_TOKENS:.0e} tokens, beyond any run jaxdata plans")
  return int(round(value))


@dataclasses.dataclass(frozen=True)
class DatasetExposure:
  name: str
  unique_tokens: int
  natural_share: float
  sampling_share: list[float]  # per phase, token-weighted mean over the phase's steps
  upsampling: list[float]  # per phase
  processed_tokens: list[float]  # per phase
  passes: float  # over the whole run
  pass_completed_at_step: list[int]  # step at which pass k (1, 2, ...) completes
  unique_seen: float | None = None  # windows drawn with replacement: expected fraction of U_d seen


@dataclasses.dataclass(frozen=True)
class ExposureTable:
  total_tokens: int
  tokens_per_step: int
  steps: int
  phases: list[tuple[int, int]]  # [start, end) steps of each phase within the run
  datasets: dict[str, DatasetExposure]
  warnings: list[str]

  def to_json(self) -> dict[str, Any]:
    return dataclasses.asdict(self)


def _check_supply(unique_tokens: Mapping[str, float], names: list[str]) -> None:
  require_keys(unique_tokens, names, "unique_tokens", "supply")
  for name, value in unique_tokens.items():
    if not isinstance(value, (int, float, np.integer, np.floating)) or not math.isfinite(value) or value <= 0:
      raise ValueError(f"unique_tokens: dataset {name!r} has supply {value!r}; it must be a positive number")


def step_capacities(cfg: PipelineConfig, steps: int) -> np.ndarray:
  """Row slots of each of the first `steps` steps: constant, or following a batch-size schedule or a
  linear length warmup at constant rows (the figures then follow the steps' real sizes)."""
  linear = cfg.packing.linear_warmup
  until = max(cfg.batch.changes_until, int(linear.steps) if linear is not None else 0)
  head = [cfg.rows_at(s) * cfg.packing.seq_len_at(s) for s in range(min(steps, until))]
  final = cfg.rows_at(until) * cfg.packing.seq_len_at(until)
  return np.concatenate([np.asarray(head, np.float64), np.full(max(0, steps - len(head)), float(final))])


def _tokens_per_step(
  total_tokens: float, tokens_per_step: int, capacities: Callable[[int], np.ndarray] | None, steps: int | None
) -> np.ndarray:
  """The tokens each step processes until `total_tokens` (the last step may be partial): over `steps`
  steps in proportion to their slots where known, else as many steps of `capacities` as reach the total."""
  if steps is not None:
    slots = capacities(steps) if capacities is not None else np.full(steps, float(tokens_per_step))
    per_step = slots * (total_tokens / slots.sum())
  elif capacities is None:
    per_step = np.full(max(1, math.ceil(total_tokens / tokens_per_step)), float(tokens_per_step))
  else:  # smaller early steps: more of them reach the total
    guess = max(1, math.ceil(total_tokens / tokens_per_step))
    per_step = capacities(guess)
    while per_step.sum() < total_tokens:
      guess *= 2
      per_step = capacities(guess)
    per_step = per_step[: int(np.searchsorted(np.cumsum(per_step), total_tokens)) + 1].copy()
  per_step[-1] = total_tokens - per_step[:-1].sum()  # the last step may be partial
  return per_step


def schedule_exposure(
  unique_tokens: Mapping[str, float],
  schedule: Schedule,
  total_tokens: float,
  tokens_per_step: int,
  max_passes: float = 4.0,
  capacities: Callable[[int], np.ndarray] | None = None,
  *,
  steps: int | None = None,
) -> ExposureTable:
  """The exposure table for a schedule over `total_tokens` processed tokens; `capacities(n)` gives the
  tokens of the first n steps when they vary (default: `tokens_per_step` each). `steps`, where known
  (the packer planned them), spreads the tokens over exactly that many steps, in proportion to their slots."""
  names = list(schedule.names)
  _check_supply(unique_tokens, names)
  if not math.isfinite(total_tokens) or total_tokens <= 0:
    raise ValueError(f"total_tokens: must be a positive finite number, got {total_tokens!r}")
  if tokens_per_step <= 0:
    raise ValueError(f"tokens_per_step: must be positive, got {tokens_per_step!r}")
  per_step = _tokens_per_step(total_tokens, tokens_per_step, capacities, steps)
  steps = per_step.size
  weights = weights_by_step(schedule, steps)  # [steps, datasets]
  processed = weights * per_step[:, None]
  supply = np.array([float(unique_tokens[n]) for n in names])
  phases = []
  for start, until in schedule.phase_bounds():
    if start >= steps:
      break
    phases.append((start, steps if until is None else min(until, steps)))
  cumulative = np.cumsum(processed, axis=0)
  table, warnings = {}, []
  for i, name in enumerate(names):
    per_phase = [float(processed[a:b, i].sum()) for a, b in phases]
    phase_tokens = [float(per_step[a:b].sum()) for a, b in phases]
    shares = [p / t for p, t in zip(per_phase, phase_tokens)]
    natural = supply[i] / supply.sum()
    passes = float(cumulative[-1, i] / supply[i])
    completed = np.searchsorted(cumulative[:, i], supply[i] * np.arange(1, math.floor(passes + 1e-12) + 1) - 1e-6)
    table[name] = DatasetExposure(
      name=name,
      unique_tokens=int(supply[i]),
      natural_share=float(natural),
      sampling_share=shares,
      upsampling=[s / natural for s in shares],
      processed_tokens=per_phase,
      passes=passes,
      pass_completed_at_step=completed.astype(int).tolist(),
    )
    if passes > max_passes:
      warnings.append(
        f"{name}: {passes:.2f} passes over {human_count(total_tokens)} tokens exceeds {max_passes:g}: "
        "a small source seen that often is memorised (lower its weight or add data)"
      )
  for (a, b), share_sum in zip(phases, np.sum([t.sampling_share for t in table.values()], axis=0)):
    if abs(share_sum - 1.0) > 1e-9:
      raise AssertionError(f"phase [{a}, {b}): sampling shares sum to {share_sum}")  # a bug, not bad input
  return ExposureTable(int(total_tokens), tokens_per_step, steps, phases, table, warnings)


@dataclasses.dataclass(frozen=True)
class StreamEnd:
  """Where the stream ends: after `steps` steps (`tokens` tokens), because
  of `ended_by` under its pass policy."""

  steps: int
  tokens: int
  ended_by: str
  policy: str
  # documents of the final partial step that batch.drop_remainder drops (never seen), per dataset
  unseen_documents: dict[str, int] = dataclasses.field(default_factory=dict)

  def describe(self) -> str:
    why = {
      "passes": "completed its passes last",
      "stop": "ran out (exhausted_policy: stop)",
      "repeat": "used up its max_repeats",
    }[self.policy]
    text = f"the stream ends after about {self.steps:,} steps ({self.tokens:,} tokens): dataset {self.ended_by} {why}"
    if self.unseen_documents:
      shown = ", ".join(f"{n} {c}" for n, c in self.unseen_documents.items())
      text += (
        f"; batch.drop_remainder drops the partial last step, so {sum(self.unseen_documents.values())} "
        f"documents of the last pass are never seen ({shown}; drop_remainder: false pads the step instead)"
      )
    return text


PACKED_SAMPLE_STEPS = 2000  # planned with the real packer: exact ends within, the fill measured for later


def simulate_end(cfg: PipelineConfig, metadata: Mapping[str, DatasetMeta] | None, max_steps: int) -> StreamEnd | None:
  """Where the stream ends within `max_steps` steps (None if it does not end by then).

  The real packer plans the first PACKED_SAMPLE_STEPS steps: a stream that
  ends there ends exactly where the pipeline's does. Past that, the same
  stream is pulled on step by step as the packer pulls it (until step s's tokens,
  BOS / EOS included, reach (s + 1) x the tokens a step holds, with step
  s's weights), a step holding the share of its slots that the planned
  steps filled (padding: the fit modes leave a few percent empty).
  """
  settings = {s.name: s for s in cfg.dataset_settings()}
  if all(s.policy == "repeat" and s.max_passes is None for s in settings.values()):
    return None  # nothing can end the stream
  planner = StepPlanner(cfg, metadata)
  filled = slots = 0
  with warnings.catch_warnings():  # the end's unseen documents are said by StreamEnd.describe
    warnings.simplefilter("ignore", RuntimeWarning)
    for plan in planner.plans(min(max_steps, PACKED_SAMPLE_STEPS)):
      filled, slots = filled + plan.tokens, slots + plan.rows * plan.seq_len
  if planner.done:
    stream = planner.stream
    name = stream.ended_by or cfg.names[0]
    unseen = {cfg.names[d]: n for d, n in planner.packer.unseen_at_end.items()}
    return StreamEnd(planner.step, filled, name, settings[name].policy, unseen)
  fill = filled / slots if slots else 1.0
  stream = planner.stream  # where the planned steps left it (with the packer's carry pulled ahead)
  for step in range(planner.step, max_steps):
    need = (step + 1) * cfg.tokens_per_step * fill - stream.tokens  # the stream counts what packing keeps
    if need > 0:
      stream.take(step, max_tokens=int(math.ceil(need)))
    if stream.ended:
      name = stream.ended_by or cfg.names[0]
      return StreamEnd(step + 1, stream.tokens, name, settings[name].policy)
  return None


_SUPPLY_CHUNK = 1 << 22  # lengths counted this many at a time (bounded memory)


def kept_supply(meta: DatasetMeta, cfg: PipelineConfig) -> int:
  """Tokens of one pass as the mixture counts them: what packing keeps of each document at the
  final row length (BOS / EOS added, truncated, dropped), so passes are passes of what is trained on."""
  packing = cfg.packing
  if meta.pass_tokens is not None:  # window draws: T tokens each
    return meta.pass_tokens
  count = int(meta.lengths.size)
  if packing.keeps_every_token:
    return meta.supply + packing.special_tokens * count
  total = 0
  for start in range(0, count, _SUPPLY_CHUNK):
    lengths = np.asarray(meta.lengths[np.arange(start, min(count, start + _SUPPLY_CHUNK))], np.int64)
    total += int(packing.kept_tokens(lengths, packing.seq_len).sum())
  return total


def plan_run(cfg: PipelineConfig, tokens: int, max_passes: float) -> tuple[ExposureTable, StreamEnd | None, list[str]]:
  """What `jaxdata plan` shows: exposure over `tokens` tokens, or up to where
  the pass policies end the stream if that comes first, and the warnings."""
  metadata = load_metadata(cfg)
  # the ids packing adds, as a pipeline resolves them: a config the Pipeline refuses is refused here too
  # (local datasets' manifests; a dataset in a bucket is checked when a Pipeline opens it)
  local = [d for d in cfg.datasets if "://" not in d.path and os.path.isfile(os.path.join(d.path, MANIFEST_NAME))]
  if len(local) == len(cfg.datasets):
    resolve_special_ids(cfg, [Manifest.load(d.path).tokenizer for d in local])
  supply = {name: kept_supply(meta, cfg) for name, meta in metadata.items()}
  end = simulate_end(cfg, metadata, -(-tokens // cfg.tokens_per_step))
  if end is not None and end.steps == 0:
    held = sum(meta.supply for meta in metadata.values())
    raise ValueError(
      f"the stream ends before one whole step of {cfg.tokens_per_step:,} tokens (the datasets hold "
      f"{held:,}; dataset {end.ended_by} ends it under its pass policy): no batch would be made "
      "(batch.drop_remainder drops the partial one); use smaller batches or rows, more data, or "
      "exhausted_policy: repeat"
    )
  total = min(tokens, end.tokens, end.steps * cfg.tokens_per_step) if end is not None else tokens
  varies = bool(
    cfg.batch.schedule
    or cfg.batch.ramp
    or (cfg.packing.linear_warmup is not None and cfg.packing.linear_warmup.keep == "rows")
  )
  table = schedule_exposure(
    supply,
    cfg.schedule,
    total,
    cfg.tokens_per_step,
    max_passes,
    (lambda n: step_capacities(cfg, n)) if varies else None,
    steps=end.steps if end is not None and total == end.tokens else None,
  )
  for settings in cfg.dataset_settings():
    meta, row = metadata[settings.name], table.datasets[settings.name]
    if meta.segments is not None and settings.window is not None:  # a sampled dataset
      draws = sum(row.processed_tokens) / settings.window
      seen = expected_unique_fraction(meta.segments, settings.window, draws)
      table.datasets[settings.name] = dataclasses.replace(row, unique_seen=seen)
  warnings = [*weight_notices(cfg), *table.warnings, *stored_order_warnings(cfg, metadata)]
  if end is not None:
    warnings.insert(0, f"{end.describe()}, before the {tokens:,} tokens asked for; exposure is up to there")
  return table, end, warnings


def expected_unique_fraction(segments: np.ndarray, window: int, draws: float) -> float:
  """Expected fraction of the segments' tokens inside at least one of `draws`
  windows of `window` + 1 tokens drawn uniformly over all starts.

  In a segment of L tokens there are E = L - T starts; token j lies in the
  windows starting in [max(0, j - T), min(j, E - 1)]. With K = min(T + 1, E),
  two tokens are covered by exactly k starts for each k < K and the other
  L - 2 (K - 1) by K, so with N starts in all, P(token unseen) = (1 - c / N)^draws::

      c:  1 2 .. K-1  K  K  ...  K  K-1 .. 2 1        (L tokens)

  >>> round(expected_unique_fraction(np.array([13]), 4, 0), 3), round(expected_unique_fraction(np.array([5]), 4, 1), 3)
  (0.0, 1.0)
  """
  segments = np.asarray(segments, np.int64)
  starts = segments - window
  eligible = segments[starts > 0]
  total_tokens = int(segments.sum())
  starts_total = int(starts[starts > 0].sum())
  if not total_tokens or not starts_total:
    return 0.0
  lengths, counts = np.unique(eligible, return_counts=True)
  seen = 0.0
  for length, count in zip(lengths.tolist(), counts.tolist()):
    top = min(window + 1, length - window)
    unseen = np.power(1 - np.arange(1, top + 1, dtype=np.float64) / starts_total, draws)
    seen += count * (2 * float((1 - unseen[:-1]).sum()) + (length - 2 * (top - 1)) * (1 - float(unseen[-1])))
  return seen / total_tokens


def exposure(
  unique_tokens: Mapping[str, float],
  weights: Mapping[str, float],
  total_tokens: float,
  tokens_per_step: int = 1 << 20,
  max_passes: float = 4.0,
) -> ExposureTable:
  """`schedule_exposure` for constant weights (validated like the config's)."""
  schedule = Schedule.from_phases(list(weights), [(weights, None, 0)], where="weights")
  return schedule_exposure(unique_tokens, schedule, total_tokens, tokens_per_step, max_passes)


def weights_by_step(schedule: Schedule, steps: int) -> np.ndarray:
  """Normalised weights for every step, [steps, datasets]: step by step through
  a ramp, one fill for the constant rest of each phase."""
  out = np.empty((steps, len(schedule.names)))
  for start, until in schedule.phase_bounds():
    if start >= steps:
      break
    end = steps if until is None else min(until, steps)
    settled = schedule.weights_at(end - 1)
    step = start
    while step < end and schedule.weights_at(step) != settled:
      out[step] = schedule.weights_at(step)
      step += 1
    out[step:end] = settled
  return out
