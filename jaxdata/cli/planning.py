"""Handlers of `jaxdata plan`, `audit`, `doctor`, `report`, `mesh` and `bench`."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import warnings as warnings_module
from typing import Any

from jaxdata._lazy import lazy_module
from jaxdata.cli.legends import MESH_LEGEND, PLAN_LEGEND, SAMPLING_WINDOWS_LEGEND, print_legend
from jaxdata.cli.output import Console, Table, check_output_path, show, working
from jaxdata.cli.parsing import Commands, fraction
from jaxdata.config.loading import load_config
from jaxdata.config.pipeline_config import PipelineConfig
from jaxdata.errors import InputFormatError
from jaxdata.pipeline.execution import PLANNINGS, StepMaking
from jaxdata.pipeline.planner import check_host_count
from jaxdata.pipeline.raw_inputs import with_built_inputs
from jaxdata.pipeline.slices import available_slices, explicit_slice, load_slice
from jaxdata.sources.manifest import MANIFEST_NAME, Manifest
from jaxdata.sources.stores import is_remote
from jaxdata.tools.audit import audit as audit_plan
from jaxdata.tools.cache_plan import CacheNeeds, cache_needs, cache_warnings
from jaxdata.tools.doctor import diagnose, load_losses, order_checks, write_html
from jaxdata.tools.exposure import parse_tokens, plan_run, weights_by_step
from jaxdata.tools.mesh import SPREAD_WARNING, mesh_report
from jaxdata.tools.numbers import human_bytes, human_count
from jaxdata.tools.report import change_lines, load_stats, plan_plot, planned_of, write_report
from jaxdata.tools.trajectory import load_trajectory, with_trajectory

__all__ = ["mesh", "plan", "register_planning", "report"]

bench_module = lazy_module("jaxdata.tools.bench")  # runs a Pipeline: jax only when `jaxdata bench` runs


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
  cfg = _loaded(args.config)
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
    print(
      json.dumps(
        {
          **table.to_json(),
          "warnings": warnings,
          "order": {s.name: s.order_name for s in cfg.dataset_settings()},
          "read_spans": dataclasses.asdict(needs) if needs is not None else None,
          "stream_end": dataclasses.asdict(end) if end is not None else None,
          "config_changes": changes,
        },
        indent=1,
      )
    )
    return 0
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


def audit_command(args: argparse.Namespace, console: Console) -> int:
  with working(console, args.quiet or args.json, f"planning and checking {args.steps:,} steps for {args.hosts} hosts"):
    result = audit_plan(_loaded(args.config), args.hosts, args.steps)
  if args.json:
    print(json.dumps(result.to_json(), indent=1))
  else:
    console.print(f"audited {result.steps} steps for {result.hosts} hosts")
    console.print(
      f"pieces on two hosts in one step: {result.piece_overlaps} (must be 0: every host reads its own rows)"
    )
    console.print(
      f"documents read by two hosts in one step: {result.document_overlaps} (a long document split "
      "across hosts' rows; each host reads it: extra reads, not an error)"
    )
    console.print(
      f"complete passes checked for exactly-once coverage: {', '.join(result.passes_checked) or 'none'} "
      "(every document of the pass appears once)"
    )
    if result.share_deviation:
      worst = max(result.share_deviation.items(), key=lambda kv: abs(kv[1]))
      unit = "documents" if result.share_bound == 1 else "tokens"
      console.print(
        f"largest deviation of the units taken from the schedule's target: {worst[0]} "
        f"{worst[1]:+,.1f} {unit}. The exact interleave keeps every dataset within one document of "
        f"its target at any point (here up to {result.share_bound:,.0f} {unit}, the longest "
        "document); a larger deviation is a failure"
      )
    if result.realised_share:
      shares = ", ".join(
        f"{n} {result.realised_share[n]:.4f} (target {result.target_share[n]:.4f})" for n in result.realised_share
      )
      console.print(
        f"shares of the tokens in the batches: {shares}; the exact interleave keeps each within "
        f"{result.realised_bound:.4f} here; a larger gap is a failure",
        markup=False,
      )
    if result.residual_ratio:
      ratios = ", ".join(f"{n} {r:.3f}" for n, r in result.residual_ratio.items())
      console.print(f"{result.residual_ratio_explained}: {ratios}", markup=False)
    for warning in result.warnings:
      console.print(f"warning: {warning}", style="bold yellow", markup=False)
    for failure in result.failures:
      console.print(f"FAIL {failure}", style="bold red", markup=False)
    if not result.ok:
      console.print(f"audit FAILED ({len(result.failures)} problems)")
    elif result.warnings:
      console.print(f"audit found no problem, but {len(result.warnings)} warnings above (not a full pass)")
    else:
      console.print("audit passed")
  return 0 if result.ok else 1


def doctor(args: argparse.Namespace, console: Console) -> int:
  stats = load_stats(args.stats)
  losses = load_losses(args.losses) if args.losses else None
  overlaps = None
  if args.config and args.hosts:
    check_host_count(_loaded(args.config), args.hosts)
    overlaps = audit_plan(_loaded(args.config), args.hosts, min(len(stats), 200)).piece_overlaps
  checks = diagnose(stats, losses, overlaps, args.share_floor)
  if args.config:  # the order each dataset is read in: runs of stored order are named
    checks.extend(order_checks(_loaded(args.config)))
  for check in checks:
    style = {"fail": "bold red", "warn": "bold yellow"}.get(check.status)
    console.print(check.line(), style=style, markup=False)
  if args.html:
    console.print(f"report: {write_html(checks, args.html)}", markup=False)
  failed = sum(c.status == "fail" for c in checks)
  console.print(
    f"{failed} failed, {sum(c.status == 'warn' for c in checks)} warnings, {sum(c.status == 'ok' for c in checks)} ok"
  )
  return 1 if failed else 0


def report(args: argparse.Namespace, console: Console) -> int:
  series = write_report(args.stats, args.out or os.path.splitext(args.stats)[0] + "_report")
  ranked = sorted(series["largest_deviation"].items(), key=lambda kv: -abs(kv[1]["deviation"]))
  for change in series["config_changes"]:
    console.print(f"config changed at a restore: {change}", markup=False)
  console.print(
    f"{len(series['steps'])} steps; largest deviations of the cumulative share of {series['unit']} from target:"
  )
  for name, worst in ranked:
    console.print(
      f"  {name}: {worst['deviation']:+.4f} at step {worst['step']} (final {series['final_deviation'][name]:+.4f}, "
      f"a correct run within {series['allowed_deviation'][name]:.4f})"
    )
  for name in series["off_target"]:
    console.print(
      f"OFF TARGET {name}: final share {series['final_deviation'][name]:+.4f} from its target, more than a "
      "correct run shows (report a bug with the config)",
      style="bold red",
      markup=False,
    )
  if series["trained_tokens"]:  # fine-tuning data: what the masks let train, per source
    trained = ", ".join(f"{n} {t:,}" for n, t in series["trained_tokens"].items())
    console.print(f"trained tokens (loss_mask 1, this host's rows): {trained}", markup=False)
  for name, path in series["plots"].items():
    console.print(f"{name}: {path}", markup=False)
  return 1 if series["off_target"] else 0


def mesh(args: argparse.Namespace, console: Console) -> int:
  if args.list:
    console.print(" ".join(available_slices()))
    return 0
  if (args.tpu is None) == (args.mesh_shape is None):
    raise ValueError("mesh: give --tpu SLICE (or a slice YAML path) or --mesh-shape, one of them")
  if args.global_batch is None or args.seq_len is None:
    raise ValueError("mesh: --global-batch and --seq-len are required")
  if args.tpu is not None:
    spec = load_slice(args.tpu)
  else:
    shape = [int(x) for x in args.mesh_shape.lower().split("x")]
    spec = explicit_slice(shape, args.mesh_axes.split(","), args.data_axes.split(","), args.hosts)
  rows = spec.rows_per_host(args.global_batch)  # raises a clear error if it does not divide
  report = mesh_report(spec, args.global_batch, args.seq_len, args.config, args.steps)
  console.print(
    f"{spec.name}: {spec.chips} chips, {spec.hosts} hosts x {spec.chips_per_host}, topology "
    f"{spec.topology}, mesh {dict(zip(spec.mesh_axes, spec.mesh_shape))}, rows over {list(spec.data_axes)}"
  )
  table = Table(title=f"per host, global batch {args.global_batch} x seq_len {args.seq_len}")
  for column in ("host", "rows", "tokens / step", "documents read / step"):
    table.add_column(column, justify="right")
  for host in range(spec.hosts):
    docs = report.documents_per_host[host] if report.documents_per_host else None
    table.add_row(str(host), str(rows), f"{rows * args.seq_len:,}", "-" if docs is None else f"{docs:.1f}")
  show(console, table)
  print_legend(console, MESH_LEGEND)
  if report.spread is not None:
    console.print(f"documents read per host and step: max / mean = {report.spread:.2f}")
    if report.spread > SPREAD_WARNING:
      console.print(
        f"warning: the busiest host reads {report.spread:.2f}x the mean (above {SPREAD_WARNING}); "
        "every step waits for it",
        style="bold yellow",
      )
  for warning in report.warnings(args.steps):
    console.print(f"warning: {warning}", style="bold yellow", markup=False)
  if report.planned_steps == 0:
    pass  # the warning above says why there is nothing to measure
  elif report.plan_seconds is None:
    console.print("pass --config pipeline.yaml to measure planning time and documents per host")
  else:
    console.print(
      f"planning one global step on this machine: {report.plan_seconds * 1e3:.2f} ms (mean of {args.steps} steps)"
    )
  return 0


def bench_command(args: argparse.Namespace, console: Console) -> int:
  with working(console, args.quiet, f"timing {args.steps} steps"):
    readers = args.reader_processes or 0
    making = StepMaking("process" if readers and args.planning == "here" else args.planning, readers)
    result = bench_module.bench(_loaded(args.config), args.steps, args.prefetch, making)
  console.print(
    f"{result.steps} steps of {result.rows} x {result.seq_len} in {result.seconds:.2f}s: "
    f"{result.tokens_per_second:,.0f} non-padding tokens/s, efficiency {result.efficiency:.4f}, "
    f"first batch {result.first_batch_seconds:.2f}s"
  )
  console.print("time per step: " + ", ".join(f"{k} {v * 1e3:.2f} ms" for k, v in result.time_per_step_s.items()))
  console.print(f"C loops: {bench_module.c_loops()}")
  return 0


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


def register_planning(commands: Commands) -> None:
  """The `jaxdata plan`, `jaxdata audit`, `jaxdata doctor`, `jaxdata report`, `jaxdata bench`, `jaxdata mesh` commands and their flags."""
  p = commands.add("plan", "exposure per dataset and phase before a run")
  p.add_argument("config", help="pipeline YAML")
  p.add_argument("--tokens", required=True, help="tokens to process, e.g. 20e9 or 20B")
  p.add_argument("--max-passes", type=float, default=4.0, help="warn above this many passes")
  p.add_argument("--json", action="store_true", help="print the table as JSON")
  p.add_argument("--png", help="write weights over steps and cumulative passes here")
  p.add_argument(
    "--weights-trajectory",
    help="plan under moving weights: a JSON list of {step, weights} or a run's stats JSONL (its mixture updates)",
  )
  p.add_argument("--hosts", type=int, default=1, help="hosts splitting the rows, for the read-span table")
  p.add_argument(
    "--read-spans",
    "--windows",
    dest="read_spans",
    type=int,
    default=32,
    help="read spans per host to replay (0: skip the table)",
  )
  p.add_argument("--read-ahead-tokens", type=int, default=1 << 22, help="the pipeline's read_ahead_tokens")
  p.add_argument("--state", help="a saved pipeline state (JSON): list the run's config changes at restores")
  p.set_defaults(handler=plan)

  p = commands.add("audit", "plan S steps for H hosts and check them")
  p.add_argument("config", help="pipeline YAML")
  p.add_argument("--hosts", type=int, required=True, help="hosts to plan for (each reads its block of rows)")
  p.add_argument("--steps", type=int, required=True, help="steps to plan and check")
  p.add_argument("--json", action="store_true", help="print the result as JSON")
  p.set_defaults(handler=audit_command)

  p = commands.add("doctor", "check a run's stats (and per-source losses) for signs of a bad data order")
  p.add_argument("stats", help="the JSONL the pipeline wrote (stats_path)")
  p.add_argument("--losses", help='JSONL of {"step": N, "losses": {source: loss}} per step (optional)')
  p.add_argument(
    "--config", help="the run's pipeline YAML: names each dataset's order; with --hosts, checks the host overlap"
  )
  p.add_argument("--hosts", type=int, default=0, help="hosts of the run, for the overlap check")
  p.add_argument("--html", help="also write the checks as an HTML report here")
  p.add_argument(
    "--share-floor",
    type=fraction,
    default=0.01,
    help="with mixture updates: warn when a source's share stays below this after the first update",
  )
  p.set_defaults(handler=doctor)

  p = commands.add("report", "plots and deviations from a run's stats JSONL")
  p.add_argument("stats", help="the JSONL the pipeline wrote (stats_path)")
  p.add_argument("--out", help="directory for the plots (default: STATS_report/)")
  p.set_defaults(handler=report)

  p = commands.add("bench", "throughput of a pipeline config on this machine (one host, NumPy)")
  p.add_argument("config", help="pipeline YAML")
  p.add_argument("--steps", type=int, default=100, help="steps to time (after one untimed step)")
  p.add_argument("--prefetch", type=int, default=2, help="steps planned and read ahead by a background thread")
  p.add_argument(
    "--planning",
    choices=PLANNINGS,
    default="here",
    help="where steps are planned: here, in a process of its own, or auto (see docs/performance.md)",
  )
  p.add_argument(
    "--reader-processes", type=int, default=0, help="processes that read and assemble (with --planning process)"
  )
  # The spellings of 0.3.0, kept for a release.
  p.add_argument("--workers", type=int, dest="reader_processes", help="deprecated: --reader-processes")
  p.add_argument(
    "--planner-process", action="store_const", const="process", dest="planning", help="deprecated: --planning process"
  )
  p.set_defaults(handler=bench_command)

  p = commands.add("mesh", "rows, tokens and documents per host of a TPU slice")
  p.add_argument(
    "--tpu",
    help="a slice: v4-8 .. v4-8192, v5e-1 .. v5e-256, v5p-8 .. v5p-12288, v6e-1 .. v6e-256 "
    "(`jaxdata mesh --list`), or a slice YAML file's path",
  )
  p.add_argument("--mesh-shape", help="instead of --tpu: an explicit mesh shape, e.g. 16x4x1")
  p.add_argument("--mesh-axes", default="data,fsdp,tensor", help="with --mesh-shape: its axis names")
  p.add_argument("--data-axes", default="data,fsdp", help="with --mesh-shape: the axes the batch rows are split over")
  p.add_argument("--hosts", type=int, default=1, help="with --mesh-shape: hosts the devices spread over")
  p.add_argument("--list", action="store_true", help="list the built-in slices and exit")
  p.add_argument("--global-batch", type=int, help="rows of the global batch")
  p.add_argument("--seq-len", type=int, help="tokens per row")
  p.add_argument("--config", help="pipeline YAML: plan real steps for documents and timing")
  p.add_argument("--steps", type=int, default=5, help="steps to plan with --config")
  p.set_defaults(handler=mesh)


def _loaded(path: str) -> PipelineConfig:
  """The config at `path`, its raw inputs converted into their caches first (built once, then reused)."""
  return with_built_inputs(load_config(path), log=print)
