"""Handlers of `jaxdata index`, `from-megatron` and `inspect` (imported when one runs)."""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any

import yaml

from jaxdata.cli.output import Console, Table, check_output_path, show
from jaxdata.cli.parsing import Commands
from jaxdata.config.pipeline_config import PipelineConfig
from jaxdata.conversion.cache_listing import cached_datasets, prune_caches
from jaxdata.conversion.tokenizers import TokenizerSpec, load_tokenizer
from jaxdata.integrations.megatron import megatron_raw
from jaxdata.sources.boundaries import DocumentBoundaries
from jaxdata.sources.flat_index import build_flat_index
from jaxdata.sources.index import build_index, group_by_directory
from jaxdata.sources.opening import open_dataset
from jaxdata.sources.shard_cache import default_cache_options
from jaxdata.tools.summary import summarize

__all__ = ["index", "inspect", "register_data"]


# A folder given to `jaxdata index`: the files of the format it holds.
_FOLDER_FILES = {"arrayrecord": ".array_record", "megatron": ".bin", "flat": ".bin"}


def _shard_files(given: list[str], fmt: str) -> list[str]:
  """The shards as given, a local folder replaced by its files of the format (sorted; Megatron's by their
  prefixes); a folder with none is an error naming the folder and what to pass."""
  out: list[str] = []
  for path in given:
    if "://" in path or not os.path.isdir(path):
      out.append(path)
      continue
    suffix = _FOLDER_FILES[fmt]
    found = sorted(os.path.join(path, n) for n in os.listdir(path) if n.endswith(suffix) and not n.startswith("."))
    if not found:
      raise ValueError(
        f"{path}: a folder with no {suffix} files; pass the shard files (e.g. {path}/*{suffix}) or the folder "
        "that holds them"
      )
    out += [f[: -len(".bin")] for f in found] if fmt == "megatron" else found
  return out


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
  shards = _shard_files(args.shards, args.format)
  groups = {args.out: shards} if not args.per_directory else group_by_directory(shards)
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
        boundaries=_boundaries(args),
        dtype=args.dtype,
        data_root=args.data_root,
        on_file=report,
        **common,
      )
    console.print(
      f"{manifest.name}: {len(manifest.shards)} shards, {manifest.num_records} documents, {manifest.num_tokens} tokens"
    )
  return 0


def _boundaries(args: argparse.Namespace) -> DocumentBoundaries:
  """The one boundary rule that `--eos-id`, `--bos-id`, `--offsets` or `--dolma-metadata` gives."""
  rules = {
    "--eos-id": None if args.eos_id is None else DocumentBoundaries.eos(args.eos_id),
    "--bos-id": None if args.bos_id is None else DocumentBoundaries.bos(args.bos_id),
    "--offsets": DocumentBoundaries.offsets() if args.offsets else None,
    "--dolma-metadata": DocumentBoundaries.dolma_metadata() if args.dolma_metadata else None,
  }
  given = {flag: rule for flag, rule in rules.items() if rule is not None}
  if len(given) > 1:
    raise ValueError(f"{next(iter(given))}: give one of {', '.join(rules)}, not {' and '.join(given)}")
  return next(iter(given.values()), DocumentBoundaries())


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
  shares = ", ".join(f"{n} {float(w):.4g}" for n, w in zip(cfg.names, cfg.schedule.exact_weights_at(0)))
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
    if "pairs" in s:  # preference pairs: per side (a set written by hand records no trained tokens)
      trained = (
        f", trained tokens {s['trained_tokens_chosen']:,} chosen / {s['trained_tokens_rejected']:,} rejected"
        if s["trained_tokens_chosen"] is not None
        else ""
      )
      console.print(
        f"{s['name']}: {s['pairs']:,} preference pairs and {s['unpaired_examples']:,} one-sided (KTO) "
        f"examples{trained}, {s['refused_examples']:,} refused",
        markup=False,
      )
    elif "examples" in s:  # a fine-tuning set: what its masks train
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


def cache(args: argparse.Namespace, console: Console) -> int:
  root = os.path.join(default_cache_options(args.cache_dir).cache_dir, "datasets") if args.root is None else args.root
  if args.action == "list":
    entries = cached_datasets(root)
    table = Table(title=f"raw inputs' caches in {root}")
    for column in ("dataset", "key", "size", "written", "state"):
      table.add_column(column, justify="right" if column == "size" else "left")
    for c in entries:
      written = time.strftime("%Y-%m-%d %H:%M", time.localtime(c.modified))
      table.add_row(c.name, c.key, _bytes(c.size), written, c.state)
    show(console, table)
    stale = [c for c in entries if c.stale]
    console.print(
      f"{len(entries)} entries, {_bytes(sum(c.size for c in entries))}; {len(stale)} stale "
      f"({_bytes(sum(c.size for c in stale))}): jaxdata cache prune removes them",
      markup=False,
    )
    return 0
  removed = prune_caches(root, everything=args.all, dry_run=args.dry_run)
  verb = "would remove" if args.dry_run else "removed"
  for c in removed:
    console.print(f"{verb} {c.path} ({c.state}, {_bytes(c.size)})", markup=False)
  console.print(f"{verb} {len(removed)} entries, {_bytes(sum(c.size for c in removed))}", markup=False)
  return 0


def _bytes(size: int) -> str:
  """1,234,567 -> '1.2 MB' (decimal units, as `du --si`)."""
  for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
    if size >= scale:
      return f"{size / scale:,.1f} {unit}"
  return f"{size} B"


def register_data(commands: Commands) -> None:
  """The `jaxdata index`, `jaxdata from-megatron`, `jaxdata inspect` commands and their flags."""
  _register_index(commands)
  _register_from_megatron(commands)
  _register_cache(commands)
  _register_inspect(commands)


def _register_index(commands: Commands) -> None:
  p = commands.add("index", "metadata for token files other tools wrote (no tokens copied)")
  p.add_argument(
    "shards",
    nargs="+",
    help="ArrayRecord shards, Megatron prefixes (or their .bin / .idx), or flat token files (raw or .npy)",
  )
  p.add_argument(
    "--format",
    default="arrayrecord",
    choices=("arrayrecord", "megatron", "flat"),
    help="arrayrecord: records of raw ids; megatron: .bin + .idx; flat: raw ids back to back",
  )
  p.add_argument(
    "--dtype",
    choices=("uint16", "uint32"),
    help="token type (required for arrayrecord and raw flat files; a Megatron .idx or .npy header says its own)",
  )
  p.add_argument("--eos-id", type=int, help="flat: a document ends with each of these ids")
  p.add_argument("--bos-id", type=int, help="flat: a document begins with each of these ids")
  p.add_argument(
    "--dolma-metadata", action="store_true", help="flat: documents from Dolma's FILE.csv.gz beside each FILE.npy"
  )
  p.add_argument("--offsets", action="store_true", help="flat: document starts from FILE.offsets.npy beside each file")
  p.add_argument(
    "--data-root",
    help="megatron / flat: where readers find the files, when not beside the metadata "
    "(a directory or gs:// / s3:// prefix; default: the files' directory)",
  )
  p.add_argument("--out", help="metadata directory (default: the files' directory)")
  p.add_argument(
    "--per-directory",
    action="store_true",
    help="files in several directories: one dataset per directory (default: an error, unless --out)",
  )
  p.add_argument("--force", action="store_true", help="rebuild a directory's existing index and manifest")
  p.add_argument(
    "--no-dtype-check",
    action="store_true",
    help="do not refuse ids whose statistics look like another dtype (uint32 read as uint16, ...)",
  )
  p.add_argument("--name", help="dataset name (default: the directory name)")
  p.add_argument(
    "--tokenizer", help="the tokenizer that wrote the ids, recorded: byte | hf:DIR | hf:FILE.json | sp:FILE.model"
  )
  p.set_defaults(handler=index)


def _register_from_megatron(commands: Commands) -> None:
  p = commands.add("from-megatron", "a jaxdata config from Megatron's --data-path blend and --split")
  p.add_argument(
    "--data-path", nargs="+", required=True, help="Megatron's blend: 'w1 prefix1 w2 prefix2 ...' or prefixes"
  )
  p.add_argument("--split", default="969,30,1", help="Megatron's train,valid,test ratios (default: 969,30,1)")
  p.add_argument("--which", default="train", choices=("train", "valid", "test"), help="the split the config reads")
  p.add_argument("--index-dir", help="where each prefix's metadata goes (default: jaxdata-index beside the first)")
  p.add_argument("--seq-length", type=int, default=2048, help="packing.seq_len (Megatron's --seq-length)")
  p.add_argument("--global-batch-size", type=int, default=256, help="batch.global_batch_size (rows)")
  p.add_argument("--seed", type=int, default=1234, help="seed (Megatron's default 1234)")
  p.add_argument(
    "--tokenizer",
    help="the tokenizer that wrote the ids, recorded in each index: byte | hf:DIR | hf:FILE.json | sp:FILE.model",
  )
  p.add_argument("--out", required=True, help="the YAML config to write")
  p.set_defaults(handler=from_megatron)


def _register_cache(commands: Commands) -> None:
  p = commands.add("cache", "list raw inputs' caches with their sizes, or prune the stale")
  p.add_argument("action", choices=("list", "prune"), help="list: every cache and its state; prune: remove the stale")
  p.add_argument("--cache-dir", help="the config's cache_dir (default: $JAXDATA_CACHE_DIR, else ~/.cache/jaxdata)")
  p.add_argument("--root", help="the directory of caches itself (a local inputs_cache), in place of --cache-dir")
  p.add_argument("--dry-run", action="store_true", help="prune: print what would be removed, remove nothing")
  p.add_argument("--all", action="store_true", help="prune: the current caches too (the next run builds them again)")
  p.set_defaults(handler=cache)


def _register_inspect(commands: Commands) -> None:
  p = commands.add("inspect", "table of shards, documents, tokens, lengths")
  p.add_argument("datasets", nargs="+", help="dataset directories")
  p.add_argument("--json", action="store_true", help="print JSON instead of a table")
  p.add_argument(
    "--verify", action="store_true", help="also re-hash every shard and check every record (reads all data)"
  )
  p.set_defaults(handler=inspect)
