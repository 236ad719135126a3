"""Handler of `jaxdata convert`: the local or the Beam runner, with progress bars and a summary."""

from __future__ import annotations

import argparse
import shlex
from typing import Any

from jaxdata.cli.output import Console, flag_words, progress_bar
from jaxdata.conversion.beam_runner import convert_with_beam
from jaxdata.conversion.examples import EXAMPLE_FORMATS
from jaxdata.conversion.local_runner import convert as convert_files
from jaxdata.conversion.options import ConvertOptions
from jaxdata.conversion.roundtrip import check_roundtrip
from jaxdata.conversion.tokenizers import TokenizerSpec, load_tokenizer, roundtrip_warning
from jaxdata.tools.numbers import human_bytes

__all__ = ["convert"]


def convert(args: argparse.Namespace, console: Console) -> int:
  examples = args.format if args.format in EXAMPLE_FORMATS else "text"  # chat / prompt-completion: JSONL or Parquet
  options = ConvertOptions(
    tokenizer=TokenizerSpec.parse(args.tokenizer),
    input_format="auto" if examples != "text" else args.format,
    examples=examples,
    train_on=args.train_on,
    chat_template=args.chat_template or "",
    max_example_tokens=args.max_tokens,
    field=args.field,
    text_mode=args.text_mode,
    shard_bytes=args.shard_size,
    compression=args.compression,
    workers=args.workers,
    skip_invalid=args.skip_invalid,
    include=tuple(args.include),
    exclude=tuple(args.exclude),
  )
  warning = roundtrip_warning(load_tokenizer(options.tokenizer))
  if warning:
    console.print(f"warning: {flag_words(warning)}", style="bold yellow", markup=False)
  progress = progress_bar(console, args.quiet)
  tasks: dict[str, Any] = {}

  def on_progress(phase: str, done: int, total: int, documents: int) -> None:
    # scan and tokenize count input bytes (compressed bytes for .gz / .zst); write counts documents.
    if phase == "write":
      amount = f"{done:,} / {total:,} documents"
    else:
      amount = f"{human_bytes(done)} / {human_bytes(total)}" + (f", {documents:,} documents" if documents else "")
    if phase not in tasks:
      tasks[phase] = progress.add_task(phase, total=total, amount=amount)
    progress.update(tasks[phase], completed=done, amount=amount)

  with progress:
    if args.runner == "beam":
      manifest = convert_with_beam(
        args.inputs, args.out, args.name, options, shlex.split(args.beam_options), overwrite=args.overwrite
      )
    else:
      manifest = convert_files(args.inputs, args.out, args.name, options, on_progress, overwrite=args.overwrite)
  stats = manifest.stats
  console.print(
    f"wrote {args.out}: {manifest.num_records} documents, {manifest.num_tokens} "
    f"tokens, {len(manifest.shards)} shards, dtype {manifest.dtype}"
  )
  if stats["skipped_empty"]:
    console.print(f"skipped {stats['skipped_empty']:,} empty documents")
  if stats["skipped_invalid"]:
    console.print(f"skipped {stats['skipped_invalid']} invalid records, first ones:")
    for message in stats["invalid_examples"]:
      console.print(f"  {message}", markup=False)
  if args.check_roundtrip:
    report = check_roundtrip(args.out, args.inputs, options, args.check_roundtrip)
    console.print(
      f"round trip: {report.checked - report.mismatches} of {report.checked} documents decode to their text"
    )
    for example in report.examples:
      console.print(f"  {example}", markup=False)
    if report.mismatches:
      return 2
  return 0
