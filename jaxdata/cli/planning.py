"""Handlers of `jaxdata audit`, `doctor`, `report`, `mesh` and `bench`, and the parsers of every planning
command (`plan`'s handler: plan_command.py)."""

from __future__ import annotations

import argparse
import json
import os

from jaxdata._lazy import lazy_module
from jaxdata.cli.legends import MESH_LEGEND, print_legend
from jaxdata.cli.output import Console, Table, show, working
from jaxdata.cli.parsing import Commands, fraction
from jaxdata.cli.plan_command import loaded_config, plan
from jaxdata.pipeline.execution import PLANNINGS, StepMaking
from jaxdata.pipeline.planner import check_host_count
from jaxdata.pipeline.slices import available_slices, explicit_slice, load_slice
from jaxdata.tools.audit import audit as audit_plan
from jaxdata.tools.doctor import diagnose, order_checks
from jaxdata.tools.doctor_files import load_losses, write_html
from jaxdata.tools.mesh import SPREAD_WARNING, mesh_report
from jaxdata.tools.report import load_stats, write_report

__all__ = ["mesh", "register_planning", "report"]

bench_module = lazy_module("jaxdata.tools.bench")  # runs a Pipeline: jax only when `jaxdata bench` runs


def audit_command(args: argparse.Namespace, console: Console) -> int:
  with working(console, args.quiet or args.json, f"planning and checking {args.steps:,} steps for {args.hosts} hosts"):
    result = audit_plan(loaded_config(args.config), args.hosts, args.steps)
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
    check_host_count(loaded_config(args.config), args.hosts)
    overlaps = audit_plan(loaded_config(args.config), args.hosts, min(len(stats), 200)).piece_overlaps
  checks = diagnose(stats, losses, overlaps, args.share_floor)
  if args.config:  # the order each dataset is read in: runs of stored order are named
    checks.extend(order_checks(loaded_config(args.config)))
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
    result = bench_module.bench(loaded_config(args.config), args.steps, args.prefetch, making)
  console.print(
    f"{result.steps} steps of {result.rows} x {result.seq_len} in {result.seconds:.2f}s: "
    f"{result.tokens_per_second:,.0f} non-padding tokens/s, efficiency {result.efficiency:.4f}, "
    f"first batch {result.first_batch_seconds:.2f}s"
  )
  console.print("time per step: " + ", ".join(f"{k} {v * 1e3:.2f} ms" for k, v in result.time_per_step_s.items()))
  console.print(f"C loops: {bench_module.c_loops()}")
  return 0


def register_planning(commands: Commands) -> None:
  """The `jaxdata plan`, `jaxdata audit`, `jaxdata doctor`, `jaxdata report`, `jaxdata bench`, `jaxdata mesh` commands and their flags."""
  _register_plan(commands)
  _register_audit(commands)
  _register_doctor(commands)
  _register_report(commands)
  _register_bench(commands)
  _register_mesh(commands)


def _register_plan(commands: Commands) -> None:
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


def _register_audit(commands: Commands) -> None:
  p = commands.add("audit", "plan S steps for H hosts and check them")
  p.add_argument("config", help="pipeline YAML")
  p.add_argument("--hosts", type=int, required=True, help="hosts to plan for (each reads its block of rows)")
  p.add_argument("--steps", type=int, required=True, help="steps to plan and check")
  p.add_argument("--json", action="store_true", help="print the result as JSON")
  p.set_defaults(handler=audit_command)


def _register_doctor(commands: Commands) -> None:
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


def _register_report(commands: Commands) -> None:
  p = commands.add("report", "plots and deviations from a run's stats JSONL")
  p.add_argument("stats", help="the JSONL the pipeline wrote (stats_path)")
  p.add_argument("--out", help="directory for the plots (default: STATS_report/)")
  p.set_defaults(handler=report)


def _register_bench(commands: Commands) -> None:
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


def _register_mesh(commands: Commands) -> None:
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
