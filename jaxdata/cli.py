"""The ``jaxdata`` command: convert, index, inspect, plan, audit, report, bench, mesh, demo."""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import os
import re
import sys
import time
from typing import Any, Sequence

import numpy as np
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from jaxdata.audit import audit
from jaxdata.config import load_config
from jaxdata.convert import ConvertOptions, convert
from jaxdata.demo import DEVICES as DEMO_DEVICES
from jaxdata.demo import default_cache_dir, run_demo, xla_flags
from jaxdata.meshplan import mesh_report
from jaxdata.pipeline import Pipeline
from jaxdata.report import plan_plot, write_report
from jaxdata.slices import load_slice
from jaxdata.sources.manifest import Manifest
from jaxdata.inputs import INPUT_FORMATS, TEXT_MODES
from jaxdata.exposure import parse_tokens, schedule_exposure, weights_by_step
from jaxdata.inspect import summarize
from jaxdata.sources.dataset import TokenDataset
from jaxdata.sources.index import build_index
from jaxdata.tokenizers import TokenizerSpec, load_tokenizer

__all__ = ["main", "parse_size"]

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?i?b?)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}


def parse_size(text: str) -> int:
  """'256MB' -> 256_000_000, '64MiB' -> 67_108_864, '4096' -> 4096.

  >>> parse_size("64MiB"), parse_size("1.5k")
  (67108864, 1500)
  """
  match = _SIZE.match(text)
  if not match:
    raise argparse.ArgumentTypeError(f"size: cannot read {text!r} (try 256MB or 64MiB)")
  number, unit = float(match.group(1)), (match.group(2) or "").lower()
  prefix = unit[:1] if unit[:1] in "kmgt" else ""
  scale = 1024 ** "_kmgt".index(prefix) if "i" in unit else _UNITS[prefix]
  return int(number * scale)


def _console() -> Console:
  console = Console(highlight=False)
  if not console.is_terminal:
    console.width = max(console.width, 120)  # logs and pipes: do not squeeze tables
  return console


def _cmd_convert(args: argparse.Namespace, console: Console) -> int:
  options = ConvertOptions(
      tokenizer=TokenizerSpec.parse(args.tokenizer),
      input_format=args.format,
      field=args.field,
      text_mode=args.text_mode,
      shard_bytes=args.shard_size,
      workers=args.workers,
      skip_invalid=args.skip_invalid,
  )
  progress = Progress(
      TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
      TimeElapsedColumn(), console=console, disable=args.quiet,
  )
  tasks: dict[str, Any] = {}

  def on_progress(phase: str, done: int, total: int) -> None:
    if phase not in tasks:
      tasks[phase] = progress.add_task(f"{phase} files", total=total)
    progress.update(tasks[phase], completed=done)

  with progress:
    manifest = convert(args.inputs, args.out, args.name, options, on_progress)
  stats = manifest.stats
  console.print(
      f"wrote {args.out}: {manifest.num_records} documents, {manifest.num_tokens} "
      f"tokens, {len(manifest.shards)} shards, dtype {manifest.dtype}"
  )
  console.print(f"skipped {stats['skipped_empty']} empty documents")
  if stats["skipped_invalid"]:
    console.print(f"skipped {stats['skipped_invalid']} invalid records, first ones:")
    for message in stats["invalid_examples"]:
      console.print(f"  {message}", markup=False)
  return 0


def _cmd_index(args: argparse.Namespace, console: Console) -> int:
  tokenizer = None
  if args.tokenizer:
    tokenizer = load_tokenizer(TokenizerSpec.parse(args.tokenizer)).identity()
  manifest = build_index(
      args.shards, args.dtype, out_dir=args.out, name=args.name, tokenizer=tokenizer,
      on_shard=None if args.quiet else lambda p: console.print(f"indexed {p}", markup=False),
  )
  console.print(
      f"{manifest.name}: {len(manifest.shards)} shards, {manifest.num_records} "
      f"documents, {manifest.num_tokens} tokens"
  )
  return 0


def _render_summaries(summaries: list[dict[str, Any]], console: Console) -> None:
  table = Table(title="jaxdata datasets")
  for column in ("dataset", "shards", "documents", "tokens", "length p50/p90/p99/max",
                 "dtype", "tokenizer", "skipped empty/invalid"):
    table.add_column(column, justify="right", no_wrap=True)
  for s in summaries:
    p = s["length_percentiles"]
    tokenizer = s["tokenizer"].get("kind", "?")
    if "file" in s["tokenizer"]:
      tokenizer += f" ({s['tokenizer']['file']})"
    table.add_row(
        s["name"], str(s["shards"]), f"{s['documents']:,}", f"{s['tokens']:,}",
        f"{p['p50']:.0f}/{p['p90']:.0f}/{p['p99']:.0f}/{s['max_length']}",
        s["dtype"], tokenizer, f"{s['skipped_empty']}/{s['skipped_invalid']}",
    )
  console.print(table)


def _cmd_inspect(args: argparse.Namespace, console: Console) -> int:
  summaries = []
  for directory in args.datasets:
    with TokenDataset(directory) as dataset:
      if args.verify:
        dataset.verify()
      summaries.append(summarize(dataset))
  if args.json:
    print(json.dumps(summaries, indent=1))
  else:
    _render_summaries(summaries, console)
    if args.verify:
      console.print("verified: every shard's sha256 and every record's length match")
  return 0


def _cmd_demo(args: argparse.Namespace, console: Console) -> int:
  os.environ["XLA_FLAGS"] = xla_flags()  # before JAX starts its backend
  result = run_demo(args.cache_dir, args.config, steps=args.steps, checkpoint_at=args.checkpoint_at,
                    out_dir=args.out, log=lambda m: console.print(m, markup=False))
  table = Table(title=f"jaxdata demo: {result.steps} steps on {DEMO_DEVICES} emulated devices")
  for column in ("dataset", "target share", "realised share", "tokens", "passes done"):
    table.add_column(column, justify="right")
  for name in result.target_share:
    table.add_row(name, f"{result.target_share[name]:.3f}", f"{result.realised_share[name]:.3f}",
                  f"{result.tokens_per_source[name]:,}", str(result.passes[name]))
  console.print(table)
  console.print(f"loss {result.losses[0]:.3f} -> {result.losses[-1]:.3f}   packing efficiency "
                f"{result.efficiency:.4f}   {result.tokens_per_second:,.0f} tokens/s (pipeline + training)")
  console.print(f"resume check: {'OK' if result.resume_ok else 'FAILED'} ({result.resume_detail})", markup=False)
  console.print(f"mixture plot: {result.plot_path}", markup=False)
  if args.json:
    with open(args.json, "w") as f:
      json.dump(dataclasses.asdict(result), f, indent=1)
  return 0 if result.resume_ok else 1


def _cmd_mesh(args: argparse.Namespace, console: Console) -> int:
  spec = load_slice(args.tpu)
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
  console.print(table)
  if report.plan_seconds is None:
    console.print("pass --config pipeline.yaml to measure planning time and documents per host")
  else:
    console.print(f"planning one global step on this machine: {report.plan_seconds * 1e3:.2f} ms "
                  f"(mean of {args.steps} steps)")
  return 0


def _cmd_plan(args: argparse.Namespace, console: Console) -> int:
  cfg = load_config(args.config)
  supply = {d.name: Manifest.load(d.path).num_tokens for d in cfg.datasets}
  schedule = cfg.schedule()
  tokens_per_step = cfg.batch.global_batch_size * cfg.packing.seq_len
  table = schedule_exposure(supply, schedule, parse_tokens(args.tokens), tokens_per_step, args.max_passes)
  if args.png:
    plan_plot(table, weights_by_step(schedule, table.steps), list(cfg.names), args.png)
  if args.json:
    print(json.dumps(table.to_json(), indent=1))
    return 0
  out = Table(title=f"exposure over {table.total_tokens:,} tokens = {table.steps:,} steps of {tokens_per_step:,}")
  for column in ("dataset", "phase", "unique U_d", "natural", "sampling w_d", "upsampling",
                 "processed", "passes (run)", "pass completes at step"):
    out.add_column(column, justify="right")
  for name, d in table.datasets.items():
    for i, (start, end) in enumerate(table.phases):
      first = i == 0
      out.add_row(
          name if first else "", f"{start}-{end}", f"{d.unique_tokens:,}" if first else "",
          f"{d.natural_share:.4f}" if first else "", f"{d.sampling_share[i]:.4f}", f"{d.upsampling[i]:.2f}x",
          f"{d.processed_tokens[i]:,.0f}", f"{d.passes:.3f}" if first else "",
          ", ".join(str(s) for s in d.pass_completed_at_step[:6]) + (" ..." if len(d.pass_completed_at_step) > 6 else "")
          if first else "",
      )
  console.print(out)
  for i, (start, end) in enumerate(table.phases):
    total = sum(d.sampling_share[i] for d in table.datasets.values())
    console.print(f"phase {i} (steps {start}-{end}): sampling shares sum to {total:.6f}")
  for warning in table.warnings:
    console.print(f"warning: {warning}", style="bold yellow")
  if args.png:
    console.print(f"plot: {args.png}", markup=False)
  return 0


def _cmd_audit(args: argparse.Namespace, console: Console) -> int:
  result = audit(load_config(args.config), args.hosts, args.steps)
  if args.json:
    print(json.dumps(result.to_json(), indent=1))
  else:
    console.print(f"audited {result.steps} steps for {result.hosts} hosts")
    console.print(f"pieces on two hosts in one step: {result.piece_overlaps} (must be 0)")
    console.print(f"documents read by two hosts in one step (split across hosts): {result.document_overlaps}")
    console.print(f"complete passes checked for exactly-once coverage: {', '.join(result.passes_checked) or 'none'}")
    if result.share_deviation:
      worst = max(result.share_deviation.items(), key=lambda kv: abs(kv[1]))
      console.print(f"largest deviation from target: {worst[0]} {worst[1]:+.1f} (bound {result.share_bound:.0f})")
    if result.histogram_variance_ratio:
      ratios = ", ".join(f"{n} {r:.2f}" for n, r in result.histogram_variance_ratio.items())
      console.print(f"per-step source count variance / multinomial: {ratios}")
    for failure in result.failures:
      console.print(f"FAIL {failure}", style="bold red", markup=False)
    console.print("audit passed" if result.ok else f"audit FAILED ({len(result.failures)} problems)")
  return 0 if result.ok else 1


def _cmd_report(args: argparse.Namespace, console: Console) -> int:
  series = write_report(args.stats, args.out or os.path.splitext(args.stats)[0] + "_report")
  ranked = sorted(series["largest_deviation"].items(), key=lambda kv: -abs(kv[1]["deviation"]))
  console.print(f"{len(series['steps'])} steps; largest deviations of cumulative share from target:")
  for name, worst in ranked:
    console.print(f"  {name}: {worst['deviation']:+.4f} at step {worst['step']} "
                  f"(final {series['final_deviation'][name]:+.4f})")
  for name, path in series["plots"].items():
    console.print(f"{name}: {path}", markup=False)
  return 0


def _cmd_bench(args: argparse.Namespace, console: Console) -> int:
  cfg = load_config(args.config)
  started = time.perf_counter()
  with Pipeline(cfg, prefetch=args.prefetch) as pipe:
    next(pipe)
    first = time.perf_counter() - started
    started = time.perf_counter()
    real = steps = 0
    for batch in itertools.islice(pipe, args.steps):
      real += int((np.asarray(batch["segment_ids"]) > 0).sum())
      steps += 1
    seconds = time.perf_counter() - started
    stats = pipe.stats()
  capacity = steps * stats["rows"] * stats["seq_len"]
  console.print(f"{steps} steps of {stats['rows']} x {stats['seq_len']} in {seconds:.2f}s: "
                f"{real / seconds:,.0f} non-padding tokens/s, efficiency {real / max(capacity, 1):.4f}, "
                f"first batch {first:.2f}s")
  totals = stats["time_total_s"]
  console.print("time per step: " + ", ".join(f"{k} {v / (steps + 1) * 1e3:.2f} ms" for k, v in totals.items()))
  return 0


def _parser() -> argparse.ArgumentParser:
  parser = argparse.ArgumentParser(
      prog="jaxdata", description="JAX/TPU-native input pipeline for language models."
  )
  parser.add_argument("-q", "--quiet", action="store_true", help="no progress output")
  sub = parser.add_subparsers(dest="command", required=True)

  p = sub.add_parser("convert", help="tokenize JSONL / Parquet / text into a dataset")
  p.add_argument("inputs", nargs="+", help="files, directories or globs")
  p.add_argument("--out", required=True, help="dataset directory to write")
  p.add_argument("--name", required=True, help="dataset name")
  p.add_argument("--tokenizer", default="byte", help="byte | hf:FILE.json | sp:FILE.model")
  p.add_argument("--format", default="auto", choices=("auto", *INPUT_FORMATS))
  p.add_argument("--field", default="text", help="JSONL field / Parquet column")
  p.add_argument("--text-mode", default="file", choices=TEXT_MODES,
                 help="plain text: one document per file, line or paragraph")
  p.add_argument("--shard-size", type=parse_size, default=256 << 20,
                 help="target shard size in bytes, e.g. 256MB (default 256MiB)")
  p.add_argument("--workers", type=int, default=0, help="tokenizer processes (0 = cores)")
  p.add_argument("--skip-invalid", action="store_true",
                 help="count and skip malformed records instead of failing")
  p.set_defaults(run=_cmd_convert)

  p = sub.add_parser("index", help="lengths index + manifest for existing token shards")
  p.add_argument("shards", nargs="+", help="ArrayRecord shard files")
  p.add_argument("--dtype", required=True, choices=("uint16", "uint32"))
  p.add_argument("--out", help="manifest directory (default: the shards' directory)")
  p.add_argument("--name", help="dataset name (default: the directory name)")
  p.add_argument("--tokenizer", help="tokenizer identity to record (optional)")
  p.set_defaults(run=_cmd_index)

  p = sub.add_parser("inspect", help="table of shards, documents, tokens, lengths")
  p.add_argument("datasets", nargs="+", help="dataset directories")
  p.add_argument("--json", action="store_true", help="print JSON instead of a table")
  p.add_argument("--verify", action="store_true",
                 help="also re-hash every shard and check every record (reads all data)")
  p.set_defaults(run=_cmd_inspect)

  p = sub.add_parser("demo", help="end to end: corpus, pipeline on 8 emulated devices, training, resume")
  p.add_argument("--cache-dir", default=default_cache_dir(), help="where the corpus is kept")
  p.add_argument("--config", help="your own pipeline YAML (its datasets) instead of the embedded demo")
  p.add_argument("--steps", type=int, default=40)
  p.add_argument("--checkpoint-at", type=int, default=20)
  p.add_argument("--out", help="run directory for checkpoints and the plot (default: CACHE/run)")
  p.add_argument("--json", help="also write the summary as JSON here")
  p.set_defaults(run=_cmd_demo)

  p = sub.add_parser("plan", help="exposure per dataset and phase before a run")
  p.add_argument("config")
  p.add_argument("--tokens", required=True, help="tokens to process, e.g. 20e9 or 20B")
  p.add_argument("--max-passes", type=float, default=4.0, help="warn above this many passes")
  p.add_argument("--json", action="store_true", help="print the table as JSON")
  p.add_argument("--png", help="write weights over steps and cumulative passes here")
  p.set_defaults(run=_cmd_plan)

  p = sub.add_parser("audit", help="plan S steps for H hosts and check them")
  p.add_argument("config")
  p.add_argument("--hosts", type=int, required=True)
  p.add_argument("--steps", type=int, required=True)
  p.add_argument("--json", action="store_true")
  p.set_defaults(run=_cmd_audit)

  p = sub.add_parser("report", help="plots and deviations from a run's stats JSONL")
  p.add_argument("stats", help="the JSONL the pipeline wrote (stats_path)")
  p.add_argument("--out", help="directory for the plots (default: STATS_report/)")
  p.set_defaults(run=_cmd_report)

  p = sub.add_parser("bench", help="throughput of a pipeline config on this machine (one process, NumPy)")
  p.add_argument("config")
  p.add_argument("--steps", type=int, default=100)
  p.add_argument("--prefetch", type=int, default=2)
  p.set_defaults(run=_cmd_bench)

  p = sub.add_parser("mesh", help="rows, tokens and documents per host of a TPU slice")
  p.add_argument("--tpu", required=True, help="slice name, e.g. v5p-128 (see tpu_configs/)")
  p.add_argument("--global-batch", type=int, required=True)
  p.add_argument("--seq-len", type=int, required=True)
  p.add_argument("--config", help="pipeline YAML: plan real steps for documents and timing")
  p.add_argument("--steps", type=int, default=5, help="steps to plan with --config")
  p.set_defaults(run=_cmd_mesh)
  return parser


def main(argv: Sequence[str] | None = None) -> int:
  args = _parser().parse_args(argv)
  console = _console()
  try:
    return args.run(args, console)
  except (ValueError, OSError) as e:
    # Our errors are ValueError subclasses (DatasetError, InputFormatError) or
    # OSError (missing / existing files); each message names file and problem.
    print(f"jaxdata {args.command}: error: {e}", file=sys.stderr)
    return 1


if __name__ == "__main__":
  sys.exit(main())
