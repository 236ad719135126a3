"""Handlers of `jaxdata convert`, `index` and `inspect` (imported when one runs)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from jaxdata.sources.dataset import TokenDataset
from jaxdata.sources.index import build_index
from jaxdata.tools.convert import ConvertOptions, convert as convert_files
from jaxdata.tools.summary import summarize
from jaxdata.tools.tokenizers import TokenizerSpec, load_tokenizer

__all__ = ["convert", "index", "inspect"]


def convert(args: argparse.Namespace, console: Console) -> int:
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
    manifest = convert_files(args.inputs, args.out, args.name, options, on_progress)
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


def index(args: argparse.Namespace, console: Console) -> int:
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


def inspect(args: argparse.Namespace, console: Console) -> int:
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
