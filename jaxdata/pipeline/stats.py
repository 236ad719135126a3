"""`StatsRecorder`: per-step statistics, cumulative token counts, timers, the JSONL file.

One record per step handed out (see docs/state.md for the fields): tokens
per source, realised share (this batch and cumulative) against the target,
padding, split pieces, truncated tokens, passes, and where the time went.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from jaxdata.errors import ConfigError
from jaxdata.mixture.changes import ConfigChange
from jaxdata.pipeline.step_stats import StepStats
from jaxdata.transforms.packing import StepPlan

__all__ = ["StatsRecorder"]

TIMERS = ("plan", "read", "assemble", "wait", "output")
MAX_LISTED_SHARDS = 8  # per source and step: enough for the sawtooth check; a global shuffle touches hundreds


class MixtureTargets(Protocol):
  """What the stats read of the mixture: the weights in force, and an update that starts at a step."""

  def weights_at(self, step: int) -> tuple[float, ...]: ...

  def update_starting_at(self, step: int) -> dict[str, float] | None: ...

  def change_starting_at(self, step: int) -> ConfigChange | None: ...


class StatsRecorder:
  """Builds each step's stats when it is planned; records them when it is handed out."""

  def __init__(
    self,
    names: Sequence[str],
    unit: str,
    targets: MixtureTargets,
    path: str | None,
    record_starts: Sequence[np.ndarray] = (),
    pair_slots: Sequence[np.ndarray] | None = None,
  ) -> None:
    if path is not None:
      _check_stats_file(path)
    self.shards = _ShardNumbering(record_starts) if len(record_starts) else None  # shards read per step
    self.names = tuple(names)
    self.unit = unit
    self.targets = targets
    self.path = path
    self.cumulative = [0] * len(self.names)  # tokens per source, up to the last planned step
    self.timers = dict.fromkeys(TIMERS, 0.0)
    self.last: StepStats | None = None  # the last step handed out (its JSON made only when asked for)
    self.pair_slots = list(pair_slots) if pair_slots is not None else None  # parallel pairs: two rows a row

  def tokens_per_source(self) -> dict[str, int]:
    return dict(zip(self.names, self.cumulative))

  def restore(self, tokens_per_source: Mapping[str, int]) -> None:
    self.cumulative = [int(tokens_per_source[n]) for n in self.names]

  def planned(self, plan: StepPlan, passes: Mapping[str, int], taken: Sequence[int] = ()) -> StepStats:
    """The stats of a step just planned (advances the cumulative counts). `taken`: per dataset, the
    mixture's units drawn through this step (the stream's); under `unit: documents` the shares are
    of documents, as the targets are: begun this step, and drawn since step 0."""
    per_source = np.bincount(plan.pieces.dataset, weights=plan.pieces.length, minlength=len(self.names))
    per_source = per_source.astype(np.int64)
    self.cumulative = [c + int(t) for c, t in zip(self.cumulative, per_source)]
    total = max(1, int(per_source.sum()))
    cumulative_total = max(1, sum(self.cumulative))
    fill = np.bincount(plan.row, weights=plan.pieces.length, minlength=plan.rows)
    longest = int(fill.max(initial=0))
    starts = plan.pieces.offset == 0  # documents begun this step
    documents = np.bincount(plan.pieces.dataset[starts], minlength=len(self.names))
    batch, cumulative = per_source / total, [c / cumulative_total for c in self.cumulative]
    if self.unit == "documents":
      batch = documents / max(1, int(documents.sum()))
      cumulative = [t / max(1, sum(taken)) for t in taken] if len(taken) else cumulative
    shards, shard_count = self._shards(plan)
    return StepStats(
      step=plan.step,
      rows=plan.rows,
      seq_len=plan.seq_len,
      tokens_per_source=dict(zip(self.names, per_source.tolist())),
      share_batch=dict(zip(self.names, batch.tolist())),
      share_cumulative=dict(zip(self.names, cumulative)),
      target_share=dict(zip(self.names, self.targets.weights_at(plan.step))),
      mixture_update=self.targets.update_starting_at(plan.step),  # the updates' history
      config_change=change.to_json() if (change := self.targets.change_starting_at(plan.step)) else None,
      unit=self.unit,
      documents_per_source=dict(zip(self.names, documents.tolist())),
      shards=shards,
      shard_count=shard_count,
      padding_fraction=self._padding(plan),
      # The longest row's tokens: a loop may slice the batch to it (bucketed); what padding that leaves.
      longest_row=longest,
      padding_fraction_to_longest=1.0 - plan.tokens / (plan.rows * longest) if longest else 0.0,
      pieces_split=plan.split_pieces,
      truncated_tokens=plan.truncated_tokens,
      dropped_documents=plan.dropped_documents,
      images_per_source=dict(zip(self.names, plan.images.per_dataset.tolist())) if plan.images else None,
      patch_fill=plan.images.patches / max(plan.images.patch_slots, 1) if plan.images else None,
      final=plan.final,
      passes=dict(passes),
    )

  def _padding(self, plan: StepPlan) -> float:
    """The fraction of the step's slots that hold no token: with `parallel` pairs, of both rows of each row
    (a pair is planned by its longer side; the other side's row is padded after its shorter side)."""
    if self.pair_slots is None:
      return plan.padding_fraction
    filled = 0
    for d, slots in enumerate(self.pair_slots):
      filled += int(slots[plan.pieces.record[plan.pieces.dataset == d]].sum())
    return 1.0 - filled / (2 * plan.rows * plan.seq_len)

  def _shards(self, plan: StepPlan) -> tuple[dict[str, list[int]], dict[str, int]]:
    """Per dataset, the first MAX_LISTED_SHARDS shards this step's pieces lie in and how many
    (for `jaxdata doctor`'s sawtooth check)."""
    if self.shards is None:
      return {}, {}
    ids = np.unique(self.shards.of(plan.pieces.dataset, plan.pieces.record))
    owner = self.shards.dataset[ids]
    counts = np.bincount(owner, minlength=len(self.names))
    first = np.cumsum(counts) - counts  # ids are sorted, so each dataset's shards are one run
    listed, count = {}, {}
    for d in np.flatnonzero(counts).tolist():
      name, run = self.names[d], ids[first[d] : first[d] + min(counts[d], MAX_LISTED_SHARDS)]
      listed[name], count[name] = (run - self.shards.base[d]).tolist(), int(counts[d])
    return listed, count

  def time(self, stats: StepStats, timer: str, seconds: float) -> None:
    stats.time_s[timer] = seconds
    self.timers[timer] += seconds

  def handed_out(self, stats: StepStats) -> None:
    """Keeps `stats` as the last step's and appends it to the JSONL file, if any."""
    self.last = stats
    if self.path is not None:
      with open(self.path, "a") as f:
        f.write(json.dumps(stats.to_json()) + "\n")

  def stats(self) -> dict[str, Any]:
    last = self.last.to_json() if self.last is not None else {}
    return {**last, "time_total_s": dict(self.timers)}


def _check_stats_file(path: str) -> None:
  """Appending is allowed to a new or empty file, or to one this recorder
  wrote (its first line a stats record): never to any other file."""
  if not os.path.lexists(path):
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
      raise ConfigError(f"stats_path: {path}: its directory {directory} does not exist (create it, or fix the path)")
    return
  if not os.path.isfile(path) or os.path.islink(path):
    raise ConfigError(f"stats_path: {path} exists and is not a regular file")
  with open(path, "rb") as f:
    first = f.readline(1 << 16)
  if not first:
    return
  try:
    record = json.loads(first)
  except (UnicodeDecodeError, json.JSONDecodeError):
    record = None
  if not isinstance(record, dict) or "step" not in record or "tokens_per_source" not in record:
    raise ConfigError(
      f"stats_path: {path} exists and is not a jaxdata stats file; not appending to it (choose a new path)"
    )


class _ShardNumbering:
  """Every dataset's shards numbered together, so one search finds the shard of
  any (dataset, record): shard g holds records [start[g], start[g + 1]) of the
  concatenated datasets."""

  def __init__(self, record_starts: Sequence[np.ndarray]) -> None:
    totals = np.array([int(starts[-1]) for starts in record_starts], np.int64)
    self.record_base = np.cumsum(totals) - totals  # the concatenation's first record of each dataset
    counts = np.array([len(starts) - 1 for starts in record_starts], np.int64)
    self.base = np.cumsum(counts) - counts  # the first global shard of each dataset
    self.start = np.concatenate(
      [np.asarray(starts[:-1], np.int64) + offset for starts, offset in zip(record_starts, self.record_base)]
    )
    self.dataset = np.repeat(np.arange(len(counts)), counts)

  def of(self, dataset: np.ndarray, record: np.ndarray) -> np.ndarray:
    """Global shard of each (dataset, record); empty shards are never found."""
    return np.searchsorted(self.start, self.record_base[dataset] + record, side="right") - 1
