"""Handler of `jaxdata convert` (imported when it runs: the readers load pyarrow)."""

from __future__ import annotations

import argparse
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from jaxdata.tools.convert import ConvertOptions, convert as convert_files
from jaxdata.tools.tokenizers import TokenizerSpec

__all__ = ["convert"]


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
