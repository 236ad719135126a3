"""Handlers of `jaxdata convert` (the local or the Beam runner, with progress bars and a summary) and
`jaxdata reference` (a reference model's log-probabilities beside a dataset of pairs)."""

from __future__ import annotations

import argparse
import json
import logging
import shlex
import time
from typing import Any

from jaxdata._lazy import lazy_module, user_function
from jaxdata.cli.output import Console, flag_words, progress_bar
from jaxdata.cli.parsing import Commands, parse_size
from jaxdata.conversion.beam_runner import convert_with_beam
from jaxdata.conversion.examples import EXAMPLE_FORMATS, ExampleFormat
from jaxdata.conversion.local_runner import convert as convert_files
from jaxdata.conversion.options import INPUT_FORMATS, TEXT_MODES, ConvertOptions, ImageOptions
from jaxdata.conversion.ray_runner import convert_with_ray
from jaxdata.conversion.roundtrip import check_roundtrip
from jaxdata.conversion.tokenizers import TokenizerSpec, load_tokenizer, roundtrip_warning
from jaxdata.errors import ConfigError
from jaxdata.sources.manifest import COMPRESSIONS, Manifest
from jaxdata.tools.numbers import human_bytes
from jaxdata.vision.image_tokens import IMAGE_TOKENS
from jaxdata.vision.policies import image_policy

__all__ = ["register_convert", "register_reference"]

reference = lazy_module("jaxdata.tools.reference")  # it runs jax: imported when the command runs


def _options(args: argparse.Namespace, examples: ExampleFormat) -> ConvertOptions:
  """`jaxdata convert`'s flags as `ConvertOptions`."""
  return ConvertOptions(
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
    images=_image_options(args) if examples == "vision" else None,
  )


def _image_options(args: argparse.Namespace) -> ImageOptions:
  """--image-policy (a policy's name, or its JSON: {"policy": "fixed", "height": 336, ...}), --image-tokens,
  --image-root as `ImageOptions`."""
  spec = args.image_policy.strip()
  try:
    fields = json.loads(spec) if spec.startswith("{") else {"policy": spec}
  except json.JSONDecodeError as error:
    raise ConfigError(f"--image-policy: not a policy name nor JSON ({error.msg} at character {error.pos})") from error
  try:
    return ImageOptions(image_policy(fields), args.image_tokens, args.image_root, verify=not args.no_image_verify)
  except ValueError as error:
    raise ConfigError(f"--image-policy: {error}") from error


def _print_summary(console: Console, args: argparse.Namespace, manifest: Manifest) -> None:
  """What was written, which mask rule trained the examples, and what was skipped."""
  stats = manifest.stats
  console.print(
    f"wrote {args.out}: {manifest.num_records:,} documents, {manifest.num_tokens:,} "
    f"tokens, {len(manifest.shards):,} shards, dtype {manifest.dtype}"
  )
  if stats.get("mask_rule"):
    how = {
      "generation blocks": "the template's {% generation %} blocks (transformers' assistant mask)",
      "whole assistant turns": "whole assistant turns (content, tool calls, end-of-turn marker; the template "
      "has no {% generation %} blocks)",
    }[stats["mask_rule"]]
    console.print(f"trained tokens of {args.name}: {how}", markup=False)
  if stats["skipped_empty"]:
    console.print(f"skipped {stats['skipped_empty']:,} empty documents")
  if stats["skipped_invalid"]:
    console.print(f"skipped {stats['skipped_invalid']:,} invalid records, first ones:")
    for message in stats["invalid_examples"]:
      console.print(f"  {message}", markup=False)


def convert_command(args: argparse.Namespace, console: Console) -> int:
  # chat / prompt-completion: fine-tuning examples, from JSONL or Parquet; any other format: documents
  examples: ExampleFormat = next((f for f in EXAMPLE_FORMATS if f == args.format), "text")
  if examples == "preference" and args.field != "text":
    raise ConfigError(
      f"--field {args.field}: preference records are read from their prompt, chosen and rejected fields (or "
      "prompt, completion and label for KTO); --field names nothing for them"
    )
  options = _options(args, examples)
  warning = roundtrip_warning(load_tokenizer(options.tokenizer))
  if warning:
    console.print(f"warning: {flag_words(warning)}", style="bold yellow", markup=False)
  if args.quiet:  # Ray's start-up notices (token authentication) go through its logger, unconfigured here
    logging.getLogger("ray").setLevel(logging.ERROR)
  progress = progress_bar(console, args.quiet)
  tasks: dict[str, Any] = {}
  started: dict[str, float] = {}

  def on_progress(phase: str, done: int, total: int, documents: int) -> None:
    started.setdefault(phase, time.monotonic())
    amount = progress_amount(phase, done, total, documents, time.monotonic() - started[phase])
    if phase not in tasks:
      tasks[phase] = progress.add_task(phase, total=total, amount=amount)
    progress.update(tasks[phase], completed=done, amount=amount)

  with progress:
    if args.runner == "beam":
      manifest = convert_with_beam(
        args.inputs, args.out, args.name, options, shlex.split(args.beam_options), overwrite=args.overwrite
      )
    elif args.runner == "ray":
      manifest = convert_with_ray(
        args.inputs, args.out, args.name, options, args.ray_address, on_progress, overwrite=args.overwrite
      )
    else:
      manifest = convert_files(args.inputs, args.out, args.name, options, on_progress, overwrite=args.overwrite)
  _print_summary(console, args, manifest)
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


def progress_amount(phase: str, done: int, total: int, documents: int, elapsed_s: float) -> str:
  """A phase's progress at a fixed width (a bar beside it keeps its size): scan and tokenize in input
  bytes (compressed bytes for .gz / .zst) with the documents so far, write in documents; the rate and
  the time left from it.

  >>> progress_amount("tokenize", 3 << 20, 12 << 20, 41_000, 2.0)
  '     3 MB /     12 MB,      41,000 documents,    1.5 MB/s, 0:06 left'
  >>> progress_amount("write", 1_500, 6_000, 1_500, 3.0)
  '     1,500 /      6,000 documents,       500 /s, 0:09 left'
  """
  rate = done / elapsed_s if elapsed_s > 0 else 0.0
  left = (total - done) / rate if rate > 0 else 0.0
  eta = f"{int(left) // 60}:{int(left) % 60:02d} left" if done < total and rate > 0 else "done" if done >= total else ""
  if phase == "write":
    return f"{done:>10,} / {total:>10,} documents, {rate:>9,.0f} /s, {eta}"
  return (
    f"{human_bytes(done):>9} / {human_bytes(total):>9}, {documents:>11,} documents, {human_bytes(rate):>9}/s, {eta}"
  )


def register_convert(commands: Commands) -> None:
  """The `jaxdata convert` command and its flags."""
  p = commands.add("convert", "tokenize JSONL / Parquet / text into a dataset")
  p.add_argument("inputs", nargs="+", help="files, directories or globs")
  p.add_argument("--out", required=True, help="dataset directory to write")
  p.add_argument("--name", required=True, help="dataset name")
  p.add_argument(
    "--tokenizer", default="byte", help="byte | hf:DIR (a tokenizer directory) | hf:FILE.json | sp:FILE.model"
  )
  p.add_argument(
    "--format",
    default="auto",
    choices=("auto", *INPUT_FORMATS, *EXAMPLE_FORMATS[1:]),
    metavar="FORMAT",
    help=f"input format: {', '.join(('auto', *INPUT_FORMATS, *EXAMPLE_FORMATS[1:]))} (default "
    "auto: from each file's suffix); chat / prompt-completion: fine-tuning examples with trained-token masks; "
    "preference: chosen / rejected pairs (or KTO labels), a pair a record (JSONL or Parquet); vision: chats with "
    "images, captions, interleaved documents (the images kept as they came)",
  )
  p.add_argument(
    "--image-policy",
    default="native",
    help="vision: the processor's image policy: native (Qwen2-VL's), fixed (Gemma 3's), or its JSON, e.g. "
    '{"policy": "fixed", "height": 336, "width": 336, "pool": 1}',
  )
  p.add_argument(
    "--image-tokens", default="qwen-vl", choices=sorted(IMAGE_TOKENS), help="vision: the model's image tokens"
  )
  p.add_argument(
    "--image-root", default="", help="vision: where relative image paths start (default: each input's directory)"
  )
  p.add_argument(
    "--no-image-verify",
    action="store_true",
    help="vision: read only each image's header at conversion (default: decode it once, so a damaged image is "
    "refused there)",
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
  _output_and_engine_arguments(p)
  p.set_defaults(handler=convert_command)


def _output_and_engine_arguments(p: argparse.ArgumentParser) -> None:
  """`jaxdata convert`'s flags past what is read: the shards, which files, the checks, the engine."""
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
    choices=("local", "beam", "ray"),
    help="local: processes on this machine; beam: an Apache Beam pipeline; ray: Ray tasks (docs/convert.md)",
  )
  p.add_argument(
    "--ray-address",
    default=None,
    help="ray: the cluster to join ('auto', or a head's address); default: a Ray started here for the run",
  )
  p.add_argument(
    "--beam-options",
    default="",
    help="Beam pipeline options, given with '=': --beam-options='--runner=DataflowRunner --project=P "
    "--region=R --temp_location=gs://B/tmp' (default: the local DirectRunner)",
  )


def reference_command(args: argparse.Namespace, console: Console) -> int:
  """`jaxdata reference`: a reference model's log-probabilities of every pair, stored beside the records."""
  try:
    function = user_function(args.fn)
  except ValueError as error:
    raise ConfigError(f"--fn: {error} (a function of a one_row batch -> log p(target) per slot)") from error
  manifest = reference.reference_logprobs(
    args.dataset,
    function,
    args.model_id,
    seq_len=args.seq_len,
    rows=args.rows,
    log=(lambda m: None) if args.quiet else (lambda m: console.print(m, markup=False)),
  )
  stored = manifest.stats["reference_logprobs"]
  console.print(f"{args.dataset}: {manifest.num_records:,} pairs, model {stored['model_id']}", markup=False)
  return 0


def register_reference(commands: Commands) -> None:
  """The `jaxdata reference` command and its flags."""
  p = commands.add("reference", "a reference model's log-probabilities of each side of every pair, stored")
  p.add_argument("dataset", help="a dataset of preference pairs (local)")
  p.add_argument("--fn", required=True, help="MODULE:FUNCTION: a one_row batch -> log p(target) per slot")
  p.add_argument("--model-id", required=True, help="the reference model's name, recorded and checked on reading")
  p.add_argument("--seq-len", type=int, default=2048, help="the rows' length (every pair must fit one)")
  p.add_argument("--rows", type=int, default=8, help="rows per call of the function")
  p.set_defaults(handler=reference_command)
