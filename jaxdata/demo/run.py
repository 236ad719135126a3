"""`jaxdata demo`: the whole product on this machine, no network needed.

build corpus   code = the standard library's modules, docs = pydoc topics,
               synthetic = generated prose; `convert` with the byte tokenizer (cached;
               code is cut at blank lines, so a document is a function or class)
pipeline       demo_config.yaml: token mixture with a 2-phase schedule, per-dataset
               shuffles and pass policies, first_fit packing; 8 emulated CPU devices
train          a tiny LM (jaxdata.demo.model) with segment-aware attention and loss_mask
checkpoint     model + pipeline in one Orbax CheckpointManager at `checkpoint_at`
restart        a fresh process restores both and must reproduce the next batches
report         summary table and mixture-over-steps PNG
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.resources
import json
import os
import subprocess
import sys
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
import yaml

from jaxdata.checkpoint.orbax import Restore, Save
from jaxdata.config.layout import FEATURES
from jaxdata.config.loading import load_config
from jaxdata.config.pipeline_config import PipelineConfig
from jaxdata.demo import DEVICES, default_cache_dir, model, xla_flags
from jaxdata.demo.corpus import OWNER, Log, build_demo_corpus
from jaxdata.errors import optional_module
from jaxdata.pipeline.pipeline import Pipeline
from jaxdata.pipeline.raw_inputs import with_built_inputs
from jaxdata.sources.fileutil import claim_directory, clear_claimed
from jaxdata.sources.manifest import Manifest
from jaxdata.sources.opening import open_dataset
from jaxdata.tools.audit import audit

__all__ = ["DemoResult", "demo_config", "resume_check", "run_demo"]


def demo_config(cache_dir: str, config_path: str | None = None) -> PipelineConfig:
  """The bundled demo config (paths under the cache), or the user's own."""
  if config_path is not None:
    cfg = with_built_inputs(load_config(config_path))
    cfg.batch.require_features(FEATURES, "the demo (its model and checks)", config_path)
    return cfg
  raw = yaml.safe_load(importlib.resources.files("jaxdata.demo").joinpath("demo_config.yaml").read_text())
  return PipelineConfig.from_dict(raw, base_dir=cache_dir)


@dataclasses.dataclass
class DemoResult:
  steps: int
  losses: list[float]
  target_share: dict[str, float]  # of the units the stream pulled for the steps run
  realised_share: dict[str, float]
  share_bound: float  # the exact interleave's bound (one document), as a share
  interleave: str  # the config's mixture.interleave: the bound holds for "exact" only
  tokens_per_source: dict[str, int]
  passes: dict[str, int]
  efficiency: float
  tokens_per_second: float
  resume_ok: bool
  resume_detail: str
  plot_path: str
  max_document_tokens: int
  capacity: int


def _digest(batch: dict[str, Any]) -> str:
  return hashlib.sha256(b"".join(np.asarray(batch[k]).tobytes() for k in sorted(batch))).hexdigest()


def _vocab(cfg: PipelineConfig) -> int:
  """The model's vocabulary: the largest tokenizer of the datasets (manifests only)."""
  return max(int(Manifest.load(d.path).tokenizer.get("vocab_size") or 1 << 16) for d in cfg.datasets)


def _mesh() -> jax.sharding.Mesh:
  devices = jax.devices()
  if len(devices) < DEVICES:
    raise RuntimeError(f"demo: needs {DEVICES} devices, JAX sees {len(devices)} (set XLA_FLAGS before JAX starts)")
  return jax.sharding.Mesh(np.array(devices[:DEVICES]), ("data",))


def _model_state(cfg: PipelineConfig) -> dict[str, Any]:
  params = model.init_params(jax.random.key(0), _vocab(cfg), cfg.packing.seq_len)
  zeros = jax.tree.map(jnp.zeros_like, params)  # immutable arrays: mu and nu may share them
  return {"params": params, "opt": {"step": jnp.zeros((), jnp.int32), "mu": zeros, "nu": zeros}}


def _plot(history: list[dict[str, Any]], names: tuple[str, ...], path: str) -> str:
  """Draws the mixture plot; without matplotlib (`jaxdata[plots]`), says so instead of the path."""
  try:
    figure = optional_module("matplotlib.figure", "plots", "the demo's plot").Figure
  except ImportError as e:
    return f"(not drawn: {e})"
  steps = [h["step"] for h in history]
  fig = figure(figsize=(8, 4.5))  # no pyplot: the caller's matplotlib backend stays as it is
  ax = fig.subplots()
  for i, name in enumerate(names):
    color = f"C{i}"
    ax.plot(steps, [h["share_batch"][name] for h in history], color=color, alpha=0.35, label=f"{name} (batch)")
    ax.plot(steps, [h["share_cumulative"][name] for h in history], color=color, lw=2, label=f"{name} (cumulative)")
    ax.plot(steps, [h["target_share"][name] for h in history], color=color, ls="--", label=f"{name} (target)")
  ax.set_xlabel("step")
  ax.set_ylabel("share of tokens")
  ax.set_title("jaxdata demo: realised vs target mixture")
  ax.legend(fontsize=7, ncol=3)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  return path


def run_directory(cache_dir: str, config_path: str | None) -> str:
  """Where a demo run keeps its checkpoints and plot: `run/` for the embedded demo, `run-NAME/` for a
  config NAME.yaml (so that `--config` never overwrites the embedded demo's plot).

  >>> run_directory("/c", None), run_directory("/c", "exp/web-heavy.yaml")
  ('/c/run', '/c/run-web-heavy')
  """
  if config_path is None:
    return os.path.join(cache_dir, "run")
  return os.path.join(cache_dir, "run-" + os.path.splitext(os.path.basename(config_path))[0])


@dataclasses.dataclass(frozen=True)
class _Training:
  """What the demo's training loop saw: each step's loss and stats, the digests of the batches after the
  checkpoint (the resume compares them), the real tokens trained and the loop's seconds."""

  losses: list[float]
  history: list[dict[str, Any]]
  digests: dict[int, str]
  real_tokens: int
  seconds: float


def _train(cfg: PipelineConfig, ckpt_dir: str, steps: int, checkpoint_at: int, log: Log) -> _Training:
  """Trains the demo model for `steps` steps on the pipeline's batches, checkpointing model and pipeline
  together after step `checkpoint_at`."""
  state = _model_state(cfg)
  losses, history, digests = [], [], {}
  started = time.perf_counter()
  real_tokens = 0
  with Pipeline(cfg, mesh=_mesh(), data_axes=("data",)) as pipe, ocp.CheckpointManager(ckpt_dir) as manager:
    for step in range(steps):
      batch = next(pipe)
      params, opt, loss = model.train_step(state["params"], state["opt"], batch)
      state = {"params": params, "opt": opt}
      losses.append(float(loss))
      stats = pipe.stats()
      history.append(stats)
      real_tokens += sum(stats["tokens_per_source"].values())
      if step >= checkpoint_at:
        digests[step] = _digest(batch)
      if step + 1 == checkpoint_at:
        manager.save(checkpoint_at, args=ocp.args.Composite(model=ocp.args.StandardSave(state), data=Save(pipe)))
      if step % 10 == 0 or step == steps - 1:
        log(f"step {step:3d}  loss {float(loss):.3f}  padding {stats['padding_fraction']:.3f}")
    manager.wait_until_finished()
  return _Training(losses, history, digests, real_tokens, time.perf_counter() - started)


def run_demo(
  cache_dir: str | None = None,
  config_path: str | None = None,
  steps: int = 40,
  checkpoint_at: int = 20,
  out_dir: str | None = None,
  log: Log = print,
) -> DemoResult:
  """Runs the whole demo; see the module docstring."""
  cache_dir = cache_dir or default_cache_dir()
  if config_path is None:
    build_demo_corpus(cache_dir, log)
  cfg = demo_config(cache_dir, config_path)
  out_dir = os.path.abspath(out_dir or run_directory(cache_dir, config_path))  # Orbax writes absolute paths only
  ckpt_dir = os.path.join(out_dir, "checkpoints")
  os.makedirs(out_dir, exist_ok=True)
  claim_directory(ckpt_dir, OWNER)  # refuses checkpoints the demo did not write
  clear_claimed(ckpt_dir, OWNER)  # a fresh run each time
  run = _train(cfg, ckpt_dir, steps, checkpoint_at, log)
  resume_ok, detail = _resumes_in_a_fresh_process(ckpt_dir, cache_dir, config_path, checkpoint_at, run.digests)
  plot_path = _plot(run.history, cfg.names, os.path.join(out_dir, "mixture.png"))
  # What the stream took for these steps against what the schedule asked of it
  # (each step's weights times the units pulled for that step), from metadata.
  stream = audit(cfg, hosts=1, steps=steps)
  pulled, target = sum(stream.taken.values()), sum(stream.target.values())
  return DemoResult(
    steps=steps,
    losses=run.losses,
    target_share={n: stream.target[n] / target for n in cfg.names},
    realised_share={n: stream.taken[n] / pulled for n in cfg.names},
    share_bound=stream.share_bound / pulled,
    interleave=cfg.mixture.interleave,
    tokens_per_source={n: sum(h["tokens_per_source"][n] for h in run.history) for n in cfg.names},
    passes=run.history[-1]["passes"],
    efficiency=run.real_tokens / (steps * cfg.tokens_per_step),
    tokens_per_second=run.real_tokens / run.seconds,
    resume_ok=resume_ok,
    resume_detail=detail,
    plot_path=plot_path,
    max_document_tokens=_longest_document(cfg) + cfg.packing.special_tokens,
    capacity=cfg.tokens_per_step,
  )


def _resumes_in_a_fresh_process(
  ckpt_dir: str, cache_dir: str, config_path: str | None, checkpoint_at: int, digests: dict[int, str]
) -> tuple[bool, str]:
  """A restart: a fresh process restores model and pipeline from the checkpoint and makes the next
  batches; (whether they are the batches `digests` recorded, what was seen)."""
  check = min(8, len(digests))
  command = [
    sys.executable,
    "-m",
    "jaxdata.demo",
    "--resume-check",
    ckpt_dir,
    "--cache-dir",
    cache_dir,
    "--at",
    str(checkpoint_at),
    "--count",
    str(check),
  ]
  if config_path:
    command += ["--config", config_path]
  out = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "XLA_FLAGS": xla_flags()})
  if out.returncode != 0:
    resume_ok, detail = False, f"restart failed: {out.stderr[-500:]}"
  else:
    resumed = json.loads(out.stdout.strip().splitlines()[-1])
    expected = [digests[s] for s in range(checkpoint_at, checkpoint_at + check)]
    resume_ok = resumed["digests"] == expected
    detail = (
      f"{check} batches after step {checkpoint_at} identical in a fresh process"
      if resume_ok
      else f"batches differ after restore at step {checkpoint_at}"
    )
  return resume_ok, detail


def resume_check(ckpt_dir: str, cache_dir: str, config_path: str | None, at: int, count: int) -> None:
  """The restarted process: restore model + pipeline, print the next batches' digests."""
  cfg = demo_config(cache_dir, config_path)
  state = _model_state(cfg)
  abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, state)
  with Pipeline(cfg, mesh=_mesh(), data_axes=("data",)) as pipe, ocp.CheckpointManager(ckpt_dir) as manager:
    restored = manager.restore(
      at, args=ocp.args.Composite(model=ocp.args.StandardRestore(abstract), data=Restore(pipe))
    )
    digests = [_digest(next(pipe)) for _ in range(count)]
  print(json.dumps({"digests": digests, "opt_step": int(restored.model["opt"]["step"])}))


def _longest_document(cfg: PipelineConfig) -> int:
  """The longest document of the config's datasets, in tokens (from their lengths indices)."""
  longest = 0
  for settings in cfg.datasets:
    dataset = open_dataset(settings.path)
    try:
      longest = max(longest, int(dataset.lengths.max()))
    finally:
      dataset.close()
  return longest
