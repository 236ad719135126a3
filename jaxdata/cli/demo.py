"""Handlers of `jaxdata demo` and `ablate`."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
from typing import Any

import numpy as np

from jaxdata._lazy import lazy_module
from jaxdata.cli.output import Console, Table, check_output_path, show
from jaxdata.cli.parsing import Commands, parse_size
from jaxdata.demo import DEVICES, default_cache_dir, xla_flags
from jaxdata.demo.corpus import build_demo_corpus
from jaxdata.tools.report import ablation_plot

__all__ = ["ablate", "demo", "register_demo"]

# Both train a model with jax: imported when a command runs (jax reads XLA_FLAGS when its backend starts).
ablation = lazy_module("jaxdata.demo.ablate")
demo_run = lazy_module("jaxdata.demo.run")
online = lazy_module("jaxdata.demo.online")
sft = lazy_module("jaxdata.demo.sft")
dpo = lazy_module("jaxdata.demo.dpo")
vision = lazy_module("jaxdata.demo.vision")


UNSETTLED_BOUND = 0.05  # one document past this share of what was pulled: the shares have not settled


def share_claim(interleave: str, bound: float) -> str:
  """What the realised shares may be held to: only what is true for this run.

  >>> share_claim("exact", 0.002)
  'the exact interleave keeps them within one document (+-0.0020)'
  >>> share_claim("exact", 1.3)
  'one document is 130% of the units pulled: too few steps for the shares to settle (run more --steps)'
  """
  if interleave != "exact":
    return "the random interleave follows the targets in expectation only (each pick is a random draw)"
  if bound >= UNSETTLED_BOUND:
    return f"one document is {bound:.0%} of the units pulled: too few steps for the shares to settle (run more --steps)"
  return f"the exact interleave keeps them within one document (+-{bound:.4f})"


def demo(args: argparse.Namespace, console: Console) -> int:
  check_output_path(args.json, "--json")  # before the run, not after it
  os.environ["XLA_FLAGS"] = xla_flags()  # before JAX starts its backend
  cache_dir = args.cache_dir if args.cache_dir is not None else default_cache_dir()
  if args.online:
    return _online(args, console, cache_dir)
  if args.sft:
    return _sft(args, console, cache_dir)
  if args.dpo:
    return _dpo(args, console, cache_dir)
  if args.vision:
    return _vision(args, console, cache_dir)
  result = demo_run.run_demo(
    cache_dir,
    args.config,
    steps=args.steps,
    checkpoint_at=args.checkpoint_at,
    out_dir=args.out,
    log=lambda m: console.print(m, markup=False),
  )
  table = Table(title=f"jaxdata demo: {result.steps} steps on {DEVICES} emulated devices")
  for column in ("dataset", "target share", "realised share", "tokens in batches", "passes done"):
    table.add_column(column, justify="right")
  for name in result.target_share:
    table.add_row(
      name,
      f"{result.target_share[name]:.4f}",
      f"{result.realised_share[name]:.4f}",
      f"{result.tokens_per_source[name]:,}",
      str(result.passes[name]),
    )
  show(console, table)
  console.print(
    f"shares of the tokens the stream pulled for these steps, against the schedule's weights; "
    f"{share_claim(result.interleave, result.share_bound)}"
  )
  console.print(
    f"loss {result.losses[0]:.3f} -> {result.losses[-1]:.3f}   packing efficiency "
    f"{result.efficiency:.4f}   {result.tokens_per_second:,.0f} tokens/s (pipeline + training)"
  )
  console.print(f"resume check: {'OK' if result.resume_ok else 'FAILED'} ({result.resume_detail})", markup=False)
  console.print(f"mixture plot: {result.plot_path}", markup=False)
  return _summary_written(args, result)


def ablate(args: argparse.Namespace, console: Console) -> int:
  check_output_path(args.png, "--png")  # before the training runs, not after them
  cache_dir = args.cache_dir if args.cache_dir is not None else default_cache_dir()
  if args.config is None:
    build_demo_corpus(cache_dir, lambda m: console.print(m, markup=False))
  base = demo_run.demo_config(cache_dir, args.config)
  candidates = [ablation.load_candidate(path) for path in args.candidates]
  rows = ablation.run_ablation(
    base, candidates, args.tokens, log=lambda m: console.print(m, markup=False), eval_tokens=args.eval_tokens
  )
  table = Table(title=f"mixture ablation: {args.tokens:,} valid tokens each, held-out loss per domain")
  for column in (
    "candidate",
    "processed tokens",
    *(f"{n} tokens" for n in base.names),
    *(f"{n} loss" for n in base.names),
    "target loss",
  ):
    table.add_column(column, justify="right")
  for row in rows:
    table.add_row(
      row.name,
      f"{row.processed_tokens:,}",
      *(f"{row.tokens_by_domain[n]:,}" for n in base.names),
      *(f"{row.domain_loss[n]:.4f}" for n in base.names),
      f"{row.target_loss:.4f}",
    )
  show(console, table)
  if args.png:
    console.print(f"plot: {ablation_plot(rows, base.names, args.png)}", markup=False)
  return 0


def _sft(args: argparse.Namespace, console: Console, cache_dir: str) -> int:
  """`demo --sft`: the sets, the mixture's training, the resume check, held-out loss on trained tokens."""
  result = sft.run_sft_demo(cache_dir, steps=args.steps, log=lambda m: console.print(m, markup=False))
  table = Table(title=f"jaxdata demo --sft: {result.steps} steps, masks on the assistant's tokens")
  for column in ("set", "weight (documents)", "examples trained on", "trained tokens", "epochs", "held-out loss"):
    table.add_column(column, justify="right")
  for name, (weight, _) in sft.SETS.items():
    table.add_row(
      name,
      f"{weight:.2f}",
      f"{result.realised_documents[name]:.3f}",
      f"{result.trained_share[name]:.1%} of its tokens",
      str(result.epochs[name]),
      f"{result.held_out_loss[name]:.3f}",
    )
  show(console, table)
  console.print(
    f"loss {result.losses[0]:.3f} -> {result.losses[-1]:.3f}; held-out loss on trained tokens only; "
    f"resume mid-epoch: {'identical batches' if result.resume_ok else 'DIFFERENT batches'}",
    markup=False,
  )
  return _summary_written(args, result)


def _dpo(args: argparse.Namespace, console: Console, cache_dir: str) -> int:
  """`demo --dpo`: pairs converted, a DPO loss on packed pairs, the reward margin, the resume check."""
  result = dpo.run_dpo_demo(cache_dir, steps=args.steps, log=lambda m: console.print(m, markup=False))
  table = Table(title=f"jaxdata demo --dpo: {result.steps} steps, pairs packed whole (one_row)")
  for column in ("steps", "DPO loss", "reward margin", "pairs ranked right"):
    table.add_column(column, justify="right")
  quarter = max(result.steps // 4, 1)
  for first in range(0, result.steps, quarter):
    part = slice(first, min(first + quarter, result.steps))
    table.add_row(
      f"{part.start}-{part.stop - 1}",
      f"{np.mean(result.losses[part]):.4f}",
      f"{np.mean(result.margins[part]):+.4f}",
      f"{np.mean(result.accuracy[part]):.1%}",
    )
  show(console, table)
  shares = ", ".join(f"{name} {count}" for name, count in result.pairs.items())
  console.print(
    f"pairs trained on: {shares} (weights {', '.join(f'{n} {w}' for n, (w, _) in dpo.PAIR_SETS.items())}); "
    f"resume mid-epoch: {'identical batches' if result.resume_ok else 'DIFFERENT batches'}",
    markup=False,
  )
  return _summary_written(args, result)


def _vision(args: argparse.Namespace, console: Console, cache_dir: str) -> int:
  """`demo --vision`: pictures converted, image-text rows of three budgets, the loss, the resume check."""
  result = vision.run_vision_demo(cache_dir, steps=args.steps, log=lambda m: console.print(m, markup=False))
  table = Table(title=f"jaxdata demo --vision: {result.steps} steps, image-text rows")
  for column in ("steps", "loss"):
    table.add_column(column, justify="right")
  quarter = max(result.steps // 4, 1)
  for first in range(0, result.steps, quarter):
    part = slice(first, min(first + quarter, result.steps))
    table.add_row(f"{part.start}-{part.stop - 1}", f"{np.mean(result.losses[part]):.4f}")
  show(console, table)
  console.print(
    f"images trained on: {result.images_seen}; rows filled: {result.token_fill:.1%} of token slots, "
    f"{result.patch_fill:.1%} of patch slots; resume halfway: "
    f"{'identical batches' if result.resume_ok else 'DIFFERENT batches'}",
    markup=False,
  )
  return _summary_written(args, result)


def _online(args: argparse.Namespace, console: Console, cache_dir: str) -> int:
  """`demo --online doremi`: the weight trajectory, the averaged weights, the resume check, the main runs."""
  if args.config is None:
    build_demo_corpus(cache_dir, lambda m: console.print(m, markup=False))
  base = demo_run.demo_config(cache_dir, args.config)
  result = online.run_online_doremi(
    base, steps=args.steps, log=lambda m: console.print(m, markup=False), eval_tokens=args.eval_tokens
  )
  names = list(result.averaged)
  marks = sorted({0, len(result.trajectory) // 4, len(result.trajectory) // 2, len(result.trajectory) - 1})
  table = Table(title="DoReMi online: the proxy's weights, step by step")
  for column in ("dataset", *(f"step {m}" for m in marks), "averaged"):
    table.add_column(column, justify="right")
  for name in names:
    table.add_row(name, *(f"{result.trajectory[m][name]:.4f}" for m in marks), f"{result.averaged[name]:.4f}")
  show(console, table)
  losses = Table(title=f"held-out loss after {args.steps} steps: main runs")
  for column in ("dataset", "uniform weights", "DoReMi weights"):
    losses.add_column(column, justify="right")
  for name in names:
    losses.add_row(name, f"{result.uniform_loss[name]:.4f}", f"{result.doremi_loss[name]:.4f}")
  show(console, losses)
  console.print(
    f"pipeline: {result.pipeline_share:.1%} of the proxy loop's step time (next() and update_mixture() "
    f"every step); updates that planned steps again: {result.updates_replanned}",
    markup=False,
  )
  console.print(f"resume check: {'OK' if result.resume_ok else 'FAILED'} ({result.resume_detail})", markup=False)
  return _summary_written(args, result)


def register_demo(commands: Commands) -> None:
  """The `jaxdata demo`, `jaxdata ablate` commands and their flags."""
  p = commands.add("demo", "end to end: corpus, pipeline on 8 emulated devices, training, resume")
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
  p.add_argument(
    "--dpo",
    action="store_true",
    help="instead: a DPO loss on generated preference pairs, packed whole (the reward margin, resume)",
  )
  p.add_argument(
    "--vision",
    action="store_true",
    help="instead: a tiny vision-language model on generated pictures, image-text rows packed whole (resume)",
  )
  p.add_argument(
    "--eval-tokens",
    type=parse_size,
    help="with --online: held-out loss over the first N held-out trained tokens (default: all of them)",
  )
  p.set_defaults(handler=demo)

  p = commands.add("ablate", "mixture ablation: the demo model on each candidate mixture, the same tokens")
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
  p.add_argument(
    "--eval-tokens",
    type=parse_size,
    help="held-out loss over the first N held-out trained tokens (default: all of them)",
  )
  p.set_defaults(handler=ablate)


def _summary_written(args: argparse.Namespace, result: Any) -> int:
  """The run's summary to --json (when given); the exit status: 0 if its resume check held."""
  if args.json:
    with open(args.json, "w") as f:
      json.dump(dataclasses.asdict(result), f, indent=1)
  return 0 if result.resume_ok else 1
