"""Handler of `jaxdata plan`: the run a config makes, before it runs (shares, passes, exposure, reads)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import warnings as warnings_module
from typing import Any

from jaxdata.cli.legends import PLAN_LEGEND, SAMPLING_WINDOWS_LEGEND, print_legend
from jaxdata.cli.output import Console, Table, check_output_path, show, working
from jaxdata.config.loading import load_config
from jaxdata.config.pipeline_config import PipelineConfig
from jaxdata.errors import InputFormatError
from jaxdata.pipeline.planner import check_host_count
from jaxdata.pipeline.raw_inputs import with_built_inputs
from jaxdata.sources.manifest import MANIFEST_NAME, Manifest
from jaxdata.sources.stores import is_remote
from jaxdata.tools.cache_plan import CacheNeeds, cache_needs, cache_warnings
from jaxdata.tools.exposure import parse_tokens, plan_run, weights_by_step
from jaxdata.tools.numbers import human_bytes, human_count
from jaxdata.tools.report import change_lines, plan_plot, planned_of
from jaxdata.tools.trajectory import load_trajectory, with_trajectory

__all__ = ["loaded_config", "plan"]


MAX_PHASE_ROWS = 8  # more phases than this (a weights trajectory): consecutive phases share a row


def _phase_groups(count: int) -> list[list[int]]:
  """Phase indices in at most MAX_PHASE_ROWS runs of consecutive phases (one each when they fit).

  >>> _phase_groups(3), [len(g) for g in _phase_groups(48)]
  ([[0], [1], [2]], [6, 6, 6, 6, 6, 6, 6, 6])
  """
  size = max(1, -(-count // MAX_PHASE_ROWS))
  return [list(range(k, min(k + size, count))) for k in range(0, count, size)]


def plan(args: argparse.Namespace, console: Console) -> int:
  """`jaxdata plan`: the unseen documents of a dropped last step are said once, among its warnings."""
  with warnings_module.catch_warnings():
    warnings_module.filterwarnings("ignore", message="jaxdata: the stream ended inside step")
    return _plan(args, console)


def _plan(args: argparse.Namespace, console: Console) -> int:
  cfg = loaded_config(args.config)
  if args.weights_trajectory:
    cfg = with_trajectory(cfg, load_trajectory(args.weights_trajectory))
  # What can fail at once does, before the planning: the host count, the tokens, the plot's path.
  if args.read_spans > 0:
    check_host_count(cfg, args.hosts)
  tokens = parse_tokens(args.tokens)
  check_output_path(args.png, "--png")
  changes = _state_changes(args.state) if args.state else []
  schedule = cfg.schedule
  tokens_per_step = cfg.tokens_per_step
  with working(console, args.quiet or args.json, f"planning {args.tokens} tokens"):
    table, end, warnings = plan_run(cfg, tokens, args.max_passes)
    if args.png:
      plan_plot(table, weights_by_step(schedule, table.steps), list(cfg.names), args.png, tokens)
  with working(
    console,
    args.quiet or args.json or args.read_spans <= 0,
    f"replaying {args.read_spans} read spans per host for the cache table",
  ):
    needs = cache_needs(cfg, args.hosts, args.read_spans, args.read_ahead_tokens) if args.read_spans > 0 else None
  warnings += cache_warnings(needs, cfg.cache_bytes) if needs is not None else []
  if args.json:
    print(json.dumps(_plan_json(cfg, table, warnings, needs, end, changes), indent=1))
    return 0
  out, sampled = _exposure_table(table, tokens, tokens_per_step)
  show(console, out)
  for line in changes:
    console.print(f"config changed at a restore: {line}", markup=False)
  orders = "; ".join(f"{s.name} {s.order_name}" for s in cfg.dataset_settings())
  console.print(f"order within a pass: {orders}", markup=False)
  print_legend(console, PLAN_LEGEND + (SAMPLING_WINDOWS_LEGEND if sampled else ()))
  if needs is not None:
    show(console, read_span_table(needs, args))
    hosts = f"{args.hosts} host" + ("s" if args.hosts != 1 else "")
    console.print(
      f"Over {args.read_spans} read spans of {human_count(args.read_ahead_tokens)} tokens ({hosts}): "
      f"a cache below {human_bytes(needs.thrash_bytes)} makes remote reads fetch the same shards "
      f"again within these spans (one span holds up to {human_bytes(needs.max_remote_bytes)}; "
      f"cache_bytes is {human_bytes(cfg.cache_bytes)}).",
      markup=False,
    )
  for line in trained_token_lines(cfg, table):
    console.print(line, markup=False)
  for i, (start, until) in enumerate(table.phases):
    total = sum(d.sampling_share[i] for d in table.datasets.values())
    console.print(f"phase {i} (steps {start}-{until}): sampling shares sum to {total:.6f}")
  for warning in warnings:
    console.print(f"warning: {warning}", style="bold yellow", markup=False)
  if args.png:
    console.print(f"plot: {args.png}", markup=False)
  return 0


def _exposure_table(table: Any, tokens: int, tokens_per_step: int) -> tuple[Table, bool]:
  """The exposure table, a row per dataset and run of phases; whether window datasets (unique seen) are in it."""
  out = Table(
    title=f"exposure over {planned_of(table.total_tokens, tokens)} = {table.steps:,} steps of "
    f"{human_count(tokens_per_step)}"
  )
  sampled = any(d.unique_seen is not None for d in table.datasets.values())
  for column in (
    "dataset",
    "phase",
    "unique U_d",
    "natural",
    "sampling w_d",
    "upsampling",
    "processed",
    "passes (run)",
    "pass completes at step",
    *(["unique seen"] if sampled else []),
  ):
    out.add_column(column, justify="right")
  groups = _phase_groups(len(table.phases))
  for name, d in table.datasets.items():
    for i, members in enumerate(groups):
      first = i == 0
      start, until = table.phases[members[0]][0], table.phases[members[-1]][1]
      processed = sum(d.processed_tokens[k] for k in members)
      steps = sum(table.phases[k][1] - table.phases[k][0] for k in members)
      share = processed / (steps * tokens_per_step) if steps else d.sampling_share[members[0]]
      out.add_row(
        name if first else "",
        f"{start}-{until}" + (f" ({len(members)} phases)" if len(members) > 1 else ""),
        human_count(d.unique_tokens) if first else "",
        f"{d.natural_share:.4f}" if first else "",
        f"{share:.4f}",
        f"{share / d.natural_share:.2f}x" if d.natural_share else f"{d.upsampling[members[0]]:.2f}x",
        human_count(processed),
        f"{d.passes:.3f}" if first else "",
        ", ".join(str(s) for s in d.pass_completed_at_step[:6]) + (" ..." if len(d.pass_completed_at_step) > 6 else "")
        if first
        else "",
        *([f"{d.unique_seen:.1%}" if first and d.unique_seen is not None else ""] if sampled else []),
      )
  return out, sampled


def _plan_json(cfg: Any, table: Any, warnings: list[str], needs: Any, end: Any, changes: list[str]) -> dict[str, Any]:
  return {
    **table.to_json(),
    "warnings": warnings,
    "order": {s.name: s.order_name for s in cfg.dataset_settings()},
    "read_spans": dataclasses.asdict(needs) if needs is not None else None,
    "stream_end": dataclasses.asdict(end) if end is not None else None,
    "config_changes": changes,
  }


def trained_token_lines(cfg: Any, table: Any) -> list[str]:
  """Per fine-tuning set (a local dataset with trained-token masks): its epochs over the run and the
  tokens its masks train in them (from the conversion's count)."""
  lines = []
  for dataset in cfg.datasets:
    if is_remote(dataset.path) or not os.path.isfile(os.path.join(dataset.path, MANIFEST_NAME)):
      continue
    manifest = Manifest.load(dataset.path)
    trained = manifest.stats.get("trained_tokens")
    if not manifest.has_mask or not isinstance(trained, int):
      continue
    passes = table.datasets[dataset.name].passes
    lines.append(
      f"{dataset.name}: {passes:.2f} epochs of {manifest.num_records:,} examples, {trained * passes:,.0f} trained "
      f"tokens ({trained:,} an epoch, {trained / max(manifest.num_tokens, 1):.1%} of its tokens)"
    )
  return lines


def read_span_table(needs: CacheNeeds, args: argparse.Namespace) -> Table:
  out = Table(title="shards per read span, one host")
  for column in ("dataset", "where", "shards", "per span mean", "max", "max bytes"):
    out.add_column(column, justify="right")
  for n in needs.datasets:
    out.add_row(
      n.name,
      "remote" if n.remote else "local",
      f"{n.shards:,}",
      f"{n.mean_shards:.1f}",
      f"{n.max_shards:,}",
      human_bytes(n.max_bytes),
    )
  return out


def _state_changes(path: str) -> list[str]:
  """The config changes a saved state holds, one line each (a state file of Orbax's or get_state's JSON)."""
  try:
    with open(path) as f:
      state = json.load(f)
  except (OSError, json.JSONDecodeError, UnicodeDecodeError) as e:
    raise InputFormatError(f"--state {path}: not a readable JSON pipeline state ({e})") from e
  stream = state.get("stream") if isinstance(state, dict) else None
  if not isinstance(stream, dict):
    raise InputFormatError(f"--state {path}: not a pipeline state (no stream)")
  return change_lines(stream.get("changes"))


def loaded_config(path: str) -> PipelineConfig:
  """The config at `path`, its raw inputs converted into their caches first (built once, then reused)."""
  return with_built_inputs(load_config(path), log=print)
