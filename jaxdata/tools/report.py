"""`jaxdata report`: plots and deviations from a run's per-step stats (JSONL).

Reads what `Pipeline(stats_path=...)` (or the config's `stats_path`) wrote,
one JSON object per step, and writes:

    shares.png    realised cumulative share vs the cumulative target, per dataset
    sources.png   per-batch share of tokens per source over steps (stacked)
    padding.png   padding fraction over steps
    report.json   the series plotted, and the largest deviations
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from jaxdata.errors import InputFormatError, optional_module
from jaxdata.mixture.changes import changes_from_json
from jaxdata.pipeline.step_stats import StepStats, trained_totals
from jaxdata.tools.numbers import human_count

__all__ = [
  "ablation_figure",
  "ablation_plot",
  "change_lines",
  "jsonl_records",
  "load_stats",
  "plan_plot",
  "planned_of",
  "share_allowance",
  "unit_counts",
  "write_report",
]


def _figure(**kwargs: Any) -> Any:
  """A matplotlib Figure (no pyplot: the caller's backend stays as it is); plots are an extra."""
  return optional_module("matplotlib.figure", "plots", "plotting").Figure(**kwargs)


TEXT_SIZE = 9  # tick labels and legends: readable in a report at 100 dpi


def _legend_beside(ax: Any, **kwargs: Any) -> None:
  """The legend right of the axes, off the data; tick labels at TEXT_SIZE."""
  ax.tick_params(labelsize=TEXT_SIZE)
  ax.legend(fontsize=TEXT_SIZE, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, **kwargs)


def _mark_config_changes(ax: Any, steps: Sequence[int]) -> None:
  """A red dashed line where a restore changed the config (`set_state(reconfigure=True)`)."""
  for k, step in enumerate(steps):
    ax.axvline(step, color="red", ls="--", lw=1.2, alpha=0.8, label="config changed at a restore" if k == 0 else None)


def jsonl_records(path: str, what: str) -> Iterator[tuple[int, Any]]:
  """(line number, parsed object) of every non-blank line; a line that is not JSON names file and line."""
  with open(path) as f:
    for number, line in enumerate(f, start=1):
      if line.strip():
        try:
          yield number, json.loads(line)
        except json.JSONDecodeError as e:
          raise InputFormatError(f"{path}:{number}: not a JSON {what} ({e.msg})") from e


def load_stats(path: str) -> list[StepStats]:
  """The step records of a stats JSONL file (files of earlier versions too); errors name the file and line."""
  records = []
  for number, record in jsonl_records(path, "stats record"):
    if not isinstance(record, dict):
      raise InputFormatError(f"{path}:{number}: a stats record is an object, got {type(record).__name__}")
    try:
      records.append(StepStats.from_json(record))
    except KeyError as e:
      raise InputFormatError(f"{path}:{number}: stats record has no {e.args[0]!r}") from None
    except TypeError as e:  # a field of the wrong shape
      raise InputFormatError(f"{path}:{number}: not a stats record ({e})") from None
  if not records:
    raise InputFormatError(f"{path}: no stats records")
  return records


def unit_counts(records: Sequence[StepStats]) -> tuple[list[str], np.ndarray, str]:
  """(dataset names, per step and dataset the mixture's units, the unit): tokens in the batch,
  or documents begun when the mixture counts documents (its targets are document shares)."""
  names = list(dict.fromkeys(n for r in records for n in r.tokens_per_source))  # (a change of course adds some)
  unit = records[0].unit
  field = "documents_per_source" if unit == "documents" else "tokens_per_source"
  return names, np.array([[getattr(r, field).get(n, 0) for n in names] for r in records], dtype=float), unit


def share_allowance(records: Sequence[StepStats], per_step: np.ndarray, target: np.ndarray) -> np.ndarray:
  """Per dataset, the largest gap of a realised share from its target that a correct run shows:
  the exact interleave draws within one document of the targets, and packing holds back less than a
  step plus a document (the carry), which lands under the next weights at a change (2 steps' worth
  each); a random interleave adds 4 binomial sigma over the documents drawn."""
  total = max(float(per_step.sum()), 1.0)
  changes = sum(1 for a, b in zip(records[1:], records[:-1]) if a.target_share != b.target_share)
  documents = float(sum(sum(r.documents_per_source.values()) for r in records))
  spread = 4 * np.sqrt(np.maximum(target * (1 - target), 0) / max(documents, 1.0))
  return (1 + changes) * 2 * float(per_step.max(initial=0)) / total + spread


def report_series(records: list[StepStats]) -> dict[str, Any]:
  """Per-dataset series in the mixture's unit: batch share, cumulative share, cumulative target;
  deviations, and the datasets whose final gap is larger than a correct run shows."""
  names, tokens, unit = unit_counts(records)
  targets = np.array([[r.target_share.get(n, 0.0) for n in names] for r in records], dtype=float)
  step_tokens = tokens.sum(axis=1)
  cumulative = np.cumsum(tokens, axis=0)
  cumulative_share = cumulative / np.maximum(cumulative.sum(axis=1, keepdims=True), 1)
  cumulative_target = np.cumsum(targets * step_tokens[:, None], axis=0) / np.maximum(np.cumsum(step_tokens)[:, None], 1)
  batch_share = tokens / np.maximum(step_tokens[:, None], 1)
  deviation = cumulative_share - cumulative_target
  smoothing = max(1, min(50, len(records) // 20))  # about 20 averages over the run
  kernel = np.ones(smoothing)
  counts = np.convolve(np.ones(len(records)), kernel, mode="same")  # fewer steps at the edges: no dip there
  smoothed = {n: (np.convolve(batch_share[:, i], kernel, mode="same") / counts).tolist() for i, n in enumerate(names)}
  passes = [r.passes for r in records]
  boundaries = {
    n: [records[k].step for k in range(1, len(records)) if passes[k].get(n, 0) > passes[k - 1].get(n, 0)] for n in names
  }
  config_steps = [r.step for r in records if r.config_change is not None]  # restores onto another config
  phase_changes = [  # the schedule's own phases (a config change that moves the weights is marked as one)
    records[k].step
    for k in range(1, len(records))
    if records[k].target_share != records[k - 1].target_share and records[k].step not in config_steps
  ]
  worst = np.abs(deviation).argmax(axis=0)
  allowed = share_allowance(records, step_tokens, cumulative_target[-1])
  return {
    "unit": unit,
    "steps": [r.step for r in records],
    "datasets": names,
    "batch_share": {n: batch_share[:, i].tolist() for i, n in enumerate(names)},
    "cumulative_share": {n: cumulative_share[:, i].tolist() for i, n in enumerate(names)},
    "cumulative_target": {n: cumulative_target[:, i].tolist() for i, n in enumerate(names)},
    "smoothed_share": smoothed,
    "smoothing_steps": smoothing,
    "target_share": {n: targets[:, i].tolist() for i, n in enumerate(names)},
    "pass_boundaries": boundaries,
    "phase_changes": phase_changes,
    "config_change_steps": config_steps,
    "config_changes": change_lines([r.config_change for r in records if r.config_change is not None]),
    "padding_fraction": [r.padding_fraction for r in records],
    "largest_deviation": {
      n: {"step": records[worst[i]].step, "deviation": float(deviation[worst[i], i])} for i, n in enumerate(names)
    },
    "final_deviation": {n: float(deviation[-1, i]) for i, n in enumerate(names)},
    "allowed_deviation": {n: float(allowed[i]) for i, n in enumerate(names)},
    "off_target": [n for i, n in enumerate(names) if abs(deviation[-1, i]) > allowed[i] + 1e-12],
    # fine-tuning data (a dataset with trained-token masks): the tokens that trained, per source, in all
    "trained_tokens": trained_totals(records, names),
  }


def change_lines(changes: Any) -> list[str]:
  """One line per config change of a run (a state's `stream.changes`, or the stats' `config_change` records):
  "step 40000: added math; packing: seq_len=2048 -> seq_len=4096". A malformed list is an InputFormatError."""
  try:
    return [c.summary() for c in changes_from_json(changes)]
  except ValueError as e:
    raise InputFormatError(f"config changes: {e}") from e


def write_report(stats_path: str, out_dir: str) -> dict[str, Any]:
  """Writes the plots and report.json; returns the series (with file paths)."""
  series = report_series(load_stats(stats_path))
  os.makedirs(out_dir, exist_ok=True)
  steps = series["steps"]
  paths = {name: os.path.join(out_dir, f"{name}.png") for name in ("shares", "sources", "padding")}

  fig = _figure(figsize=(8, 4.5))
  ax = fig.subplots()
  for i, n in enumerate(series["datasets"]):
    ax.plot(steps, series["cumulative_share"][n], color=f"C{i}", lw=2, label=f"{n} realised")
    ax.plot(steps, series["cumulative_target"][n], color=f"C{i}", ls="--", label=f"{n} target")
  _mark_config_changes(ax, series["config_change_steps"])
  ax.set(xlabel="step", ylabel=f"cumulative share of {series['unit']}", title="realised vs target mixture")
  _legend_beside(ax)
  fig.tight_layout()
  fig.savefig(paths["shares"], dpi=100, bbox_inches="tight")

  fig = _figure(figsize=(9, 4.5))
  ax = fig.subplots()
  for i, n in enumerate(series["datasets"]):
    ax.plot(
      steps,
      series["smoothed_share"][n],
      color=f"C{i}",
      lw=2,
      label=f"{n} (mean of {series['smoothing_steps']} step{'s' if series['smoothing_steps'] != 1 else ''})",
    )
    ax.plot(steps, series["target_share"][n], color=f"C{i}", ls="--", lw=1, label=f"{n} target")
    for boundary in series["pass_boundaries"][n]:
      ax.axvline(boundary, color=f"C{i}", ls=":", lw=0.8, alpha=0.7)
  changes = series["phase_changes"]
  if len(changes) <= MAX_PHASE_LINES:  # an online run changes weights every step: a wall of lines, left out
    for change in changes:
      ax.axvline(change, color="black", lw=1.2, alpha=0.6)
  _mark_config_changes(ax, series["config_change_steps"])
  marked = "black: a phase change" if len(changes) <= MAX_PHASE_LINES else f"{len(changes)} weight changes, not drawn"
  ax.set(
    xlabel=f"step (dotted: a pass of that source ends; {marked})",
    ylabel=f"share of the batch's {series['unit']}",
    title="sources per batch, smoothed, against the target",
    ylim=(0, 1),
  )
  _legend_beside(ax)
  fig.tight_layout()
  fig.savefig(paths["sources"], dpi=100, bbox_inches="tight")

  _plot_padding(series, paths["padding"])
  series["plots"] = paths
  with open(os.path.join(out_dir, "report.json"), "w") as f:
    json.dump(series, f, indent=1)
  return series


def _plot_padding(series: dict[str, Any], path: str) -> None:
  fig = _figure(figsize=(8, 3))
  ax = fig.subplots()
  padding = np.asarray(series["padding_fraction"])
  ax.plot(series["steps"], padding, lw=0.8, label="per batch")
  ax.axhline(float(padding.mean()), color="C3", ls="--", label=f"mean {padding.mean():.4f}")
  _mark_config_changes(ax, series["config_change_steps"])
  ax.set(xlabel="step", ylabel="padding fraction", title="padding per batch")
  _legend_beside(ax)
  fig.tight_layout()
  fig.savefig(path, dpi=100, bbox_inches="tight")


HATCHES = ("", "//", "..", "xx", "\\\\", "oo", "--", "++")  # bars told apart without colour too
MAX_PHASE_LINES = 12  # more phase changes than this (a weights trajectory): the lines are left out
MAX_PHASE_TICKS = 10  # more phases than this: every k-th bar group labelled


def planned_of(planned: int, asked: int) -> str:
  """The tokens planned, and those asked for when the stream ended first.

  >>> planned_of(883_000, 20 * 10**9), planned_of(10**6, 10**6)
  ('883k of the 20B tokens asked (the stream ends first)', '1M tokens')
  """
  if 0 < planned < asked:
    return f"{human_count(planned)} of the {human_count(asked)} tokens asked (the stream ends first)"
  return f"{human_count(planned)} tokens"


def plan_plot(table: Any, weights_by_step: np.ndarray, names: list[str], path: str, asked: int = 0) -> Any:
  """Weights over steps and cumulative passes per dataset, and passes per phase (for `jaxdata plan`);
  returns the figure (saved at `path`). `asked`: the tokens asked for, said beside those planned when the
  stream ends first."""
  fig = _figure(figsize=(10, 8))
  top, middle, bottom = fig.subplots(3, 1, gridspec_kw={"height_ratios": [2, 2, 1.6]})
  steps = np.arange(weights_by_step.shape[0])
  per_step = np.full(steps.size, float(table.tokens_per_step))
  for i, name in enumerate(names):
    top.plot(steps, weights_by_step[:, i], label=name)
    passes = np.cumsum(weights_by_step[:, i] * per_step) / table.datasets[name].unique_tokens
    middle.plot(steps, passes, label=name)
  changes = [start for start, _ in table.phases[1:]]
  if 0 < len(changes) <= MAX_PHASE_LINES:  # phase changes, on both step axes
    for start in changes:
      for ax in (top, middle):
        ax.axvline(start, color="grey", lw=1, alpha=0.6)
  plural = "s" if len(changes) > 1 else ""
  said = f" (grey lines: {len(changes)} phase change{plural})" if 0 < len(changes) <= MAX_PHASE_LINES else ""
  top.set(xlabel="step", ylabel="sampling share", title=f"jaxdata plan: {planned_of(table.total_tokens, asked)}{said}")
  middle.set(xlabel="step", ylabel="cumulative passes")
  _legend_beside(top)
  _legend_beside(middle)
  # Exposure per phase: the passes each dataset makes inside each phase.
  width = 0.8 / max(len(names), 1)
  for i, name in enumerate(names):
    row = table.datasets[name]
    bottom.bar(
      np.arange(len(table.phases)) + i * width,
      [t / row.unique_tokens for t in row.processed_tokens],
      width,
      label=name,
      hatch=HATCHES[i % len(HATCHES)],
      edgecolor="black",
      linewidth=0.3,
    )
  every = max(1, -(-len(table.phases) // MAX_PHASE_TICKS))
  shown = range(0, len(table.phases), every)
  bottom.set_xticks(
    [k + width * (len(names) - 1) / 2 for k in shown],
    [f"phase {k}: steps {table.phases[k][0]}-{table.phases[k][1]}" for k in shown],
    fontsize=TEXT_SIZE,
    rotation=20 if len(shown) > 4 else 0,
    ha="right" if len(shown) > 4 else "center",
  )
  bottom.set(xlabel="phase", ylabel="passes in the phase")
  _legend_beside(bottom)
  fig.tight_layout()
  fig.savefig(path, dpi=100, bbox_inches="tight")
  return fig


def ablation_plot(rows: Any, names: Sequence[str], path: str) -> str:
  """Saves `ablation_figure` at `path`; returns the path."""
  ablation_figure(rows, names).savefig(path, dpi=100, bbox_inches="tight")
  return path


def ablation_figure(rows: Any, names: Sequence[str]) -> Any:
  """Per-domain held-out loss of each candidate (grouped bars, hatched as well as coloured), the
  target-mixture loss in the legend (below the axes, off the bars); the loss axis spans the values
  measured, not 0 up, so the small differences the comparison is about show."""
  fig = _figure(figsize=(8, 4.6))
  ax = fig.subplots()
  width = 0.8 / max(len(rows), 1)
  values = [row.domain_loss[n] for row in rows for n in names]
  for i, row in enumerate(rows):
    errors = getattr(row, "domain_stderr", None) or {}
    spread = [2 * errors[n] if np.isfinite(errors.get(n, float("nan"))) else 0.0 for n in names]
    ax.bar(
      np.arange(len(names)) + i * width,
      [row.domain_loss[n] for n in names],
      width,
      yerr=spread if any(spread) else None,  # ±2 standard errors of the mean over tokens
      capsize=3,
      label=f"{row.name} (target loss {row.target_loss:.3f})",
      hatch=HATCHES[i % len(HATCHES)],
      edgecolor="black",
      linewidth=0.3,
    )
    values += [row.domain_loss[n] + s for n, s in zip(names, spread)] + [
      row.domain_loss[n] - s for n, s in zip(names, spread)
    ]
  if values:
    low, high = min(values), max(values)
    margin = max((high - low) * 0.15, 1e-3)
    ax.set_ylim(low - margin, high + margin)
  ax.set_xticks(np.arange(len(names)) + width * (len(rows) - 1) / 2, list(names))
  ax.set(
    xlabel="held-out domain",
    ylabel="held-out loss per token",
    title="mixture ablation: the same tokens, the same initialisation\n"
    "(error bars: ±2 standard errors; the axis starts near the lowest loss, not at 0)",
  )
  ax.tick_params(labelsize=TEXT_SIZE)
  ax.legend(fontsize=TEXT_SIZE, loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=min(len(rows), 3))
  fig.tight_layout()
  return fig
