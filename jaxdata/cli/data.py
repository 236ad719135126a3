"""Handlers of `jaxdata index`, `from-megatron` and `inspect` (imported when one runs)."""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

import yaml

from jaxdata.cli.output import Console, Table, check_output_path, show
from jaxdata.config.pipeline_config import PipelineConfig
from jaxdata.conversion.tokenizers import TokenizerSpec, load_tokenizer
from jaxdata.integrations.megatron import megatron_raw
from jaxdata.sources.flat_index import build_flat_index
from jaxdata.sources.index import build_index, group_by_directory
from jaxdata.sources.opening import open_dataset
from jaxdata.tools.summary import summarize

__all__ = ["from_megatron", "index", "inspect"]


def index(args: argparse.Namespace, console: Console) -> int:
  tokenizer = None
  if args.tokenizer:
    tokenizer = load_tokenizer(TokenizerSpec.parse(args.tokenizer)).identity()
  report = None if args.quiet else lambda p: console.print(f"indexed {p}", markup=False)
  if args.format == "arrayrecord":
    for flag, value in (
      ("--eos-id", args.eos_id),
      ("--bos-id", args.bos_id),
      ("--dolma-metadata", args.dolma_metadata or None),
      ("--offsets", args.offsets or None),
      ("--data-root", args.data_root),
    ):
      if value is not None:
        raise ValueError(f"{flag}: applies to --format megatron or flat only")
    if args.dtype is None:
      raise ValueError("--dtype: required for ArrayRecord shards (uint16 or uint32)")
  groups = {args.out: args.shards} if not args.per_directory else group_by_directory(args.shards)
  if args.per_directory and args.out:
    raise ValueError("--per-directory: writes each directory's index beside its files; it takes no --out")
  for out_dir, shards in groups.items():
    common = dict(
      out_dir=out_dir,
      name=args.name if not args.per_directory else None,
      tokenizer=tokenizer,
      force=args.force,
      check_dtype=not args.no_dtype_check,
    )
    if args.format == "arrayrecord":
      manifest = build_index(shards, args.dtype, on_shard=report, **common)
    else:
      manifest = build_flat_index(
        args.format,
        shards,
        dtype=args.dtype,
        eos_id=args.eos_id,
        bos_id=args.bos_id,
        dolma_metadata=args.dolma_metadata,
        offsets=args.offsets,
        data_root=args.data_root,
        on_file=report,
        **common,
      )
    console.print(
      f"{manifest.name}: {len(manifest.shards)} shards, {manifest.num_records} documents, {manifest.num_tokens} tokens"
    )
  return 0


def from_megatron(args: argparse.Namespace, console: Console) -> int:
  check_output_path(args.out, "--out")
  tokenizer = load_tokenizer(TokenizerSpec.parse(args.tokenizer)).identity() if args.tokenizer else None
  raw = megatron_raw(
    args.data_path,
    split=args.split,
    which=args.which,
    index_dir=args.index_dir,
    seq_len=args.seq_length,
    global_batch_size=args.global_batch_size,
    seed=args.seed,
    tokenizer=tokenizer,
  )
  cfg = PipelineConfig.from_dict(raw)
  # Only the keys set (docs/configuration.md gives every default), paths relative to the config file.
  here = os.path.dirname(os.path.abspath(args.out))
  for dataset in raw["datasets"]:
    dataset["path"] = os.path.relpath(dataset["path"], here)
  with open(args.out, "w", encoding="utf-8") as f:
    yaml.safe_dump(raw, f, sort_keys=False)
  shares = ", ".join(f"{n} {float(w):.4g}" for n, w in zip(cfg.names, cfg.schedule().exact_weights_at(0)))
  ranges = ", ".join(f"{d.name} [{d.documents[0]}, {d.documents[1]})" for d in cfg.datasets if d.documents)
  console.print(f"wrote {args.out}: {args.which} split, token shares {shares}; documents {ranges}", markup=False)
  return 0


def _render_summaries(summaries: list[dict[str, Any]], console: Console) -> None:
  table = Table(title="jaxdata datasets")
  for column in (
    "dataset",
    "shards",
    "documents",
    "tokens",
    "length p50/p90/p99/max",
    "dtype",
    "tokenizer",
    "skipped empty/invalid",
  ):
    table.add_column(column, justify="right")
  for s in summaries:
    p = s["length_percentiles"]
    tokenizer = s["tokenizer"].get("kind", "?")
    if "file" in s["tokenizer"]:
      tokenizer += f" ({s['tokenizer']['file']})"
    table.add_row(
      s["name"],
      str(s["shards"]),
      f"{s['documents']:,}",
      f"{s['tokens']:,}",
      f"{p['p50']:.0f}/{p['p90']:.0f}/{p['p99']:.0f}/{s['max_length']}",
      s["dtype"],
      tokenizer,
      f"{s['skipped_empty']}/{s['skipped_invalid']}",
    )
  show(console, table)
  for s in summaries:
    if "examples" in s:  # a fine-tuning set: what its masks train
      trained = s["trained_tokens"]
      share = f" ({trained / s['tokens']:.1%} of its tokens)" if trained is not None and s["tokens"] else ""
      console.print(
        f"{s['name']}: {s['examples']:,} fine-tuning examples, "
        f"{'unknown' if trained is None else f'{trained:,}'} trained tokens{share}, "
        f"{s['refused_examples']:,} refused",
        markup=False,
      )


def inspect(args: argparse.Namespace, console: Console) -> int:
  summaries = []
  for directory in args.datasets:
    with open_dataset(directory) as dataset:
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
