"""The ``jaxdata`` command: convert, index, inspect, demo."""

from __future__ import annotations

import argparse
import json
import re
import sys
from typing import Any, Sequence

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from jaxdata.convert import ConvertOptions, convert
from jaxdata.demo import default_cache_dir, run_demo
from jaxdata.inputs import INPUT_FORMATS, TEXT_MODES
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
  result = run_demo(args.cache_dir, log=lambda m: console.print(m, markup=False))
  summaries = []
  for directory in result.dataset_dirs.values():
    with TokenDataset(directory) as dataset:
      summaries.append(summarize(dataset))
  _render_summaries(summaries, console)
  rate = result.records_read / max(result.read_seconds, 1e-9)
  console.print(
      f"read all {result.records_read:,} documents ({result.tokens_read:,} tokens) "
      f"in random batches: {rate:,.0f} documents/s"
  )
  console.print(f"first docs document, decoded: {result.sample!r}", markup=False)
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

  p = sub.add_parser("demo", help="build the embedded sample corpus and read it")
  p.add_argument("--cache-dir", default=default_cache_dir(), help="where the corpus is kept")
  p.set_defaults(run=_cmd_demo)
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
