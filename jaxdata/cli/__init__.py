"""The ``jaxdata`` command: convert, index, inspect, plan, audit, ablate, doctor, report, bench, mesh, demo.

    convert.py    `jaxdata convert`: the local or the Beam runner, progress and a summary
    data.py       `jaxdata index`, `from-megatron` and `inspect`
    planning.py   `jaxdata plan`, `audit`, `doctor`, `report`, `mesh` and `bench`
    demo.py       `jaxdata demo` and `ablate`
    legends.py    what each column of `jaxdata plan` and `jaxdata mesh` means
    output.py     the console, tables and progress bars (rich's when installed)

The handler modules are light and reach what needs jax through
`jaxdata._lazy.lazy_module`, so `jaxdata --help` and `jaxdata inspect` never
load jax, grain, orbax, pyarrow or matplotlib.
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import sys
from collections.abc import Sequence
from typing import NoReturn

from jaxdata import __version__
from jaxdata.cli import convert as convert_command
from jaxdata.cli import data, demo, planning
from jaxdata.cli.output import Console, flag_words
from jaxdata.conversion.options import INPUT_FORMATS, TEXT_MODES
from jaxdata.sources.manifest import COMPRESSIONS

__all__ = ["build_parser", "main", "parse_size"]

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


class _Parser(argparse.ArgumentParser):
  """argparse's parser, with a did-you-mean for a mistyped command, flag or choice."""

  def error(self, message: str) -> NoReturn:
    choice = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
    if choice:
      options = re.findall(r"'?([\w.-]+)'?", choice.group(2))
      close = difflib.get_close_matches(choice.group(1), options, n=1)
      if close:
        message += f"; did you mean {close[0]!r}?"
    unknown = re.match(r"unrecognized arguments: (\S+)", message)
    if unknown:
      flags = [s for action in self._actions for s in action.option_strings]
      for sub in self._subparsers._group_actions if self._subparsers else ():
        parsers = sub.choices.values() if isinstance(sub.choices, dict) else ()
        flags += [s for parser in parsers for a in parser._actions for s in a.option_strings]
      close = difflib.get_close_matches(unknown.group(1).split("=")[0], flags, n=1)
      if close:
        message += f"; did you mean {close[0]!r}?"
    super().error(message)


def _common() -> _Parser:
  """Flags every command takes, before or after the command's name."""
  common = _Parser(add_help=False)
  common.add_argument(
    "-q",
    "--quiet",
    action="store_true",
    default=argparse.SUPPRESS,
    help="no progress output (allowed before or after the command)",
  )
  return common


def build_parser() -> argparse.ArgumentParser:
  """The `jaxdata` command's argument parser (every command and flag)."""
  common = _common()
  parser = _Parser(prog="jaxdata", description="JAX/TPU-native input pipeline for language models.", parents=[common])
  parser.add_argument("--version", action="version", version=f"jaxdata {__version__}")
  commands = parser.add_subparsers(dest="command", required=True, title="commands", metavar="COMMAND")

  def command(name: str, help: str) -> argparse.ArgumentParser:
    return commands.add_parser(name, help=help, description=help, parents=[common])

  p = command("convert", "tokenize JSONL / Parquet / text into a dataset")
  p.add_argument("inputs", nargs="+", help="files, directories or globs")
  p.add_argument("--out", required=True, help="dataset directory to write")
  p.add_argument("--name", required=True, help="dataset name")
  p.add_argument("--tokenizer", default="byte", help="byte | hf:FILE.json | sp:FILE.model")
  p.add_argument(
    "--format",
    default="auto",
    choices=("auto", *INPUT_FORMATS, "chat", "prompt-completion"),
    help="input format (auto: from each file's suffix); chat / prompt-completion: fine-tuning examples with "
    "trained-token masks (JSONL or Parquet)",
  )
  p.add_argument(
    "--field", default="text", help="JSONL field / Parquet column / tf.train.Example feature (chat: messages)"
  )
  p.add_argument(
    "--train-on",
    default="assistant",
    choices=("assistant", "last", "all"),
    help="chat: what trains: every assistant message (weight 1), the last one, or all tokens",
  )
  p.add_argument("--chat-template", help="chat: a Jinja chat template file instead of the tokenizer's own")
  p.add_argument(
    "--max-tokens",
    type=int,
    default=0,
    help="chat / prompt-completion: refuse an example longer than this, named by file:line (a row's seq_len; "
    "0: any length)",
  )
  p.add_argument(
    "--text-mode", default="file", choices=TEXT_MODES, help="plain text: one document per file, line or paragraph"
  )
  p.add_argument(
    "--shard-size", type=parse_size, default=256 << 20, help="target shard size in bytes, e.g. 256MB (default 256MiB)"
  )
  p.add_argument(
    "--compression",
    default="zstd",
    choices=sorted(COMPRESSIONS),
    help="shard records' compression: zstd (smaller), snappy, none (cheapest to read; default zstd)",
  )
  p.add_argument("--workers", type=int, default=0, help="tokenizer processes (0 = cores)")
  p.add_argument("--skip-invalid", action="store_true", help="count and skip malformed records instead of failing")
  p.add_argument(
    "--include",
    action="append",
    default=[],
    metavar="GLOB",
    help="only files whose path or name matches (repeatable), e.g. '*.jsonl'",
  )
  p.add_argument(
    "--exclude",
    action="append",
    default=[],
    metavar="GLOB",
    help="leave out files whose path or name matches (repeatable), e.g. '*/test/*'",
  )
  p.add_argument("--overwrite", action="store_true", help="replace the dataset already in --out")
  p.add_argument(
    "--check-roundtrip",
    type=int,
    default=0,
    metavar="N",
    help="decode N converted documents and report those that differ from their text",
  )
  p.add_argument(
    "--runner",
    default="local",
    choices=("local", "beam"),
    help="local: processes on this machine; beam: an Apache Beam pipeline (docs/convert.md)",
  )
  p.add_argument(
    "--beam-options",
    default="",
    help="Beam pipeline options, given with '=': --beam-options='--runner=DataflowRunner --project=P "
    "--region=R --temp_location=gs://B/tmp' (default: the local DirectRunner)",
  )
  p.set_defaults(handler=convert_command.convert)

  p = command("index", "metadata for token files other tools wrote (no tokens copied)")
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
  p.add_argument("--tokenizer", help="tokenizer identity to record (optional)")
  p.set_defaults(handler=data.index)

  p = command("from-megatron", "a jaxdata config from Megatron's --data-path blend and --split")
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
    "--tokenizer", help="the tokenizer that wrote the ids, recorded in each index: byte | hf:FILE.json | sp:FILE.model"
  )
  p.add_argument("--out", required=True, help="the YAML config to write")
  p.set_defaults(handler=data.from_megatron)

  p = command("inspect", "table of shards, documents, tokens, lengths")
  p.add_argument("datasets", nargs="+", help="dataset directories")
  p.add_argument("--json", action="store_true", help="print JSON instead of a table")
  p.add_argument(
    "--verify", action="store_true", help="also re-hash every shard and check every record (reads all data)"
  )
  p.set_defaults(handler=data.inspect)

  p = command("demo", "end to end: corpus, pipeline on 8 emulated devices, training, resume")
  p.add_argument("--cache-dir", help="where the corpus is kept (default: ~/.cache/jaxdata/demo)")
  p.add_argument("--config", help="your own pipeline YAML (its datasets) instead of the embedded demo")
  p.add_argument("--steps", type=int, default=40, help="training steps of the demo model")
  p.add_argument(
    "--checkpoint-at", type=int, default=20, help="step at which model and pipeline are saved, then restored"
  )
  p.add_argument(
    "--out",
    help="run directory for checkpoints and the plot (default: CACHE/run, or CACHE/run-NAME for --config NAME.yaml)",
  )
  p.add_argument("--json", help="also write the summary as JSON here")
  p.add_argument(
    "--online",
    choices=("doremi",),
    help="instead: DoReMi run online (a proxy steering the pipeline every step), then main runs on its weights",
  )
  p.add_argument(
    "--sft",
    action="store_true",
    help="instead: fine-tuning on generated chat, tool-call and safety conversations (masks, epochs, resume)",
  )
  p.set_defaults(handler=demo.demo)

  p = command("plan", "exposure per dataset and phase before a run")
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
  p.set_defaults(handler=planning.plan)

  p = command("audit", "plan S steps for H hosts and check them")
  p.add_argument("config", help="pipeline YAML")
  p.add_argument("--hosts", type=int, required=True, help="hosts to plan for (each reads its block of rows)")
  p.add_argument("--steps", type=int, required=True, help="steps to plan and check")
  p.add_argument("--json", action="store_true", help="print the result as JSON")
  p.set_defaults(handler=planning.audit)

  p = command("ablate", "mixture ablation: the demo model on each candidate mixture, the same tokens")
  p.add_argument("config", nargs="?", help="base pipeline YAML (default: the demo's datasets and weights)")
  p.add_argument(
    "--candidates",
    nargs="+",
    required=True,
    help="YAML files, each {name: ..., weights: {dataset: weight}} (or a config's mixture.weights)",
  )
  p.add_argument("--tokens", type=parse_size, default=200_000, help="valid tokens each candidate trains on")
  p.add_argument("--cache-dir", help="the demo corpus' directory when no config is given")
  p.add_argument("--png", help="also plot per-domain held-out loss per candidate here")
  p.set_defaults(handler=demo.ablate)

  p = command("doctor", "check a run's stats (and per-source losses) for signs of a bad data order")
  p.add_argument("stats", help="the JSONL the pipeline wrote (stats_path)")
  p.add_argument("--losses", help='JSONL of {"step": N, "losses": {source: loss}} per step (optional)')
  p.add_argument("--config", help="the run's pipeline YAML: with --hosts, checks the plan's host overlap")
  p.add_argument("--hosts", type=int, default=0, help="hosts of the run, for the overlap check")
  p.add_argument("--html", help="also write the checks as an HTML report here")
  p.add_argument(
    "--share-floor",
    type=float,
    default=0.01,
    help="with mixture updates: warn when a source's share stays below this after the first update",
  )
  p.set_defaults(handler=planning.doctor)

  p = command("report", "plots and deviations from a run's stats JSONL")
  p.add_argument("stats", help="the JSONL the pipeline wrote (stats_path)")
  p.add_argument("--out", help="directory for the plots (default: STATS_report/)")
  p.set_defaults(handler=planning.report)

  p = command("bench", "throughput of a pipeline config on this machine (one host, NumPy)")
  p.add_argument("config", help="pipeline YAML")
  p.add_argument("--steps", type=int, default=100, help="steps to time (after one untimed step)")
  p.add_argument("--prefetch", type=int, default=2, help="steps planned and read ahead by a background thread")
  p.add_argument("--workers", type=int, default=0, help="worker processes (see docs/performance.md)")
  p.add_argument(
    "--planner-process",
    action="store_true",
    help="plan in a process of its own; read and assemble here (see docs/performance.md)",
  )
  p.set_defaults(handler=planning.bench)

  p = command("mesh", "rows, tokens and documents per host of a TPU slice")
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
  p.set_defaults(handler=planning.mesh)
  return parser


def main(argv: Sequence[str] | None = None) -> int:
  args = build_parser().parse_args(argv)
  args.quiet = getattr(args, "quiet", False)
  console = Console(highlight=False)
  if not console.is_terminal and "COLUMNS" not in os.environ:
    console.width = max(console.width, 120)  # logs and pipes: do not squeeze tables (COLUMNS sets a width)
  try:
    return args.handler(args, console)
  except (ValueError, OSError, ImportError) as e:  # ImportError: an extra that is not installed
    # Our errors are ValueError subclasses (DatasetError, InputFormatError) or
    # OSError (missing / existing files); each message names file and problem.
    print(f"jaxdata {args.command}: error: {flag_words(str(e))}", file=sys.stderr)
    return 1
  except KeyboardInterrupt:  # Ctrl-C: the commands that write remove what is partial on the way out
    print(f"jaxdata {args.command}: interrupted (Ctrl-C); what it had begun to write was removed", file=sys.stderr)
    return 130


if __name__ == "__main__":
  sys.exit(main())
