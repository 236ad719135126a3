"""`jaxdata demo`: the whole product on this machine, no network needed.

    build corpus   code = the standard library's modules, docs = pydoc topics,
                   synthetic = generated prose; `convert` with the byte tokenizer (cached;
                   code is cut at blank lines, so a document is a function or class)
    pipeline       demo_config.yaml: token mixture with a 2-phase schedule, per-dataset
                   shuffles and pass policies, first_fit packing; 8 emulated CPU devices
    train          a tiny LM (jaxdata.demo_model) with segment-aware attention and loss_mask
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
import shutil
import subprocess
import sys
import sysconfig
import time
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
import pydoc_data.topics
import yaml
from matplotlib.figure import Figure

import jaxdata.checkpoint
from jaxdata import demo_model
from jaxdata.config import PipelineConfig, load_config
from jaxdata.convert import ConvertOptions, convert
from jaxdata.errors import DatasetError
from jaxdata.pipeline import Pipeline
from jaxdata.sources.dataset import TokenDataset
from jaxdata.sources.manifest import MANIFEST_NAME, Manifest

__all__ = ["DemoResult", "build_demo_corpus", "default_cache_dir", "run_demo"]

MAX_CODE_FILES = 400  # standard-library modules, to keep the first run short
CORPUS_VERSION = "2"  # bump when the corpus recipe changes; older caches are rebuilt
SYNTHETIC_DOCUMENTS = 6000
DEVICES = 8
Log = Callable[[str], None]


def default_cache_dir() -> str:
  base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
  return os.path.join(base, "jaxdata", "demo")


def _stdlib_modules() -> list[str]:
  stdlib = sysconfig.get_paths()["stdlib"]
  names = sorted(n for n in os.listdir(stdlib) if n.endswith(".py"))
  return [os.path.join(stdlib, n) for n in names[:MAX_CODE_FILES]]


def _write_docs_jsonl(path: str) -> None:
  topics = pydoc_data.topics.topics
  with open(path, "w") as f:
    for key in sorted(topics):
      f.write(json.dumps({"topic": key, "text": topics[key]}) + "\n")


def _write_synthetic_jsonl(path: str) -> None:
  """Deterministic prose: words of the help topics, lognormal document lengths."""
  words = sorted({w for text in pydoc_data.topics.topics.values() for w in text.split() if w.isalpha()})
  rng = np.random.default_rng(0)
  lengths = np.clip(rng.lognormal(np.log(80), 0.8, SYNTHETIC_DOCUMENTS), 5, 2000).astype(int)
  with open(path, "w") as f:
    for n in lengths:
      f.write(json.dumps({"text": " ".join(rng.choice(words, n).tolist()) + "."}) + "\n")


def build_demo_corpus(cache_dir: str, log: Log = print) -> dict[str, str]:
  """Converts (or reuses) the demo datasets; returns {name: dataset dir}."""
  raw_dir = os.path.join(cache_dir, "raw")
  stamp = os.path.join(cache_dir, "corpus_version")
  if os.path.exists(cache_dir) and (not os.path.exists(stamp) or open(stamp).read() != CORPUS_VERSION):
    shutil.rmtree(cache_dir)  # built by another jaxdata version: rebuild
  os.makedirs(raw_dir, exist_ok=True)
  with open(stamp, "w") as f:
    f.write(CORPUS_VERSION)
  sources = {
      "synthetic": (os.path.join(raw_dir, "synthetic.jsonl"), _write_synthetic_jsonl, ConvertOptions(input_format="jsonl")),
      "code": (None, None, ConvertOptions(input_format="text", text_mode="paragraph")),
      "docs": (os.path.join(raw_dir, "docs.jsonl"), _write_docs_jsonl, ConvertOptions(input_format="jsonl")),
  }
  out = {}
  for name, (raw, write_raw, options) in sources.items():
    directory = os.path.join(cache_dir, name)
    out[name] = directory
    if os.path.exists(os.path.join(directory, MANIFEST_NAME)):
      try:
        TokenDataset(directory).close()
      except DatasetError as e:
        raise DatasetError(f"{e}\n(the demo cache is damaged; remove {cache_dir} and run again)") from e
      log(f"reusing {name} dataset in {directory}")
      continue
    if write_raw is not None:
      write_raw(raw)
    inputs = [raw] if raw else _stdlib_modules()
    started = time.perf_counter()
    manifest = convert(inputs, directory, name, dataclasses.replace(options, shard_bytes=1 << 20))
    log(f"converted {name}: {manifest.num_records} documents, {manifest.num_tokens:,} tokens, "
        f"{len(manifest.shards)} shards in {time.perf_counter() - started:.1f}s")
  return out


def demo_config(cache_dir: str, config_path: str | None = None) -> PipelineConfig:
  """The bundled demo config (paths under the cache), or the user's own."""
  if config_path is not None:
    return load_config(config_path)
  raw = yaml.safe_load(importlib.resources.files("jaxdata").joinpath("demo_config.yaml").read_text())
  return PipelineConfig.from_dict(raw, base_dir=cache_dir)


@dataclasses.dataclass
class DemoResult:
  steps: int
  losses: list[float]
  target_share: dict[str, float]
  realised_share: dict[str, float]
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
  params = demo_model.init_params(jax.random.key(0), _vocab(cfg), cfg.packing.seq_len)
  zeros = jax.tree.map(jnp.zeros_like, params)  # immutable arrays: mu and nu may share them
  return {"params": params, "opt": {"step": jnp.zeros((), jnp.int32), "mu": zeros, "nu": zeros}}


def _plot(history: list[dict[str, Any]], names: tuple[str, ...], path: str) -> None:
  steps = [h["step"] for h in history]
  fig = Figure(figsize=(8, 4.5))  # no pyplot: the caller's matplotlib backend stays as it is
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
  out_dir = out_dir or os.path.join(cache_dir, "run")
  ckpt_dir = os.path.join(out_dir, "checkpoints")
  os.makedirs(out_dir, exist_ok=True)
  if os.path.exists(ckpt_dir):
    shutil.rmtree(ckpt_dir)  # a fresh run each time
  mesh = _mesh()
  state = _model_state(cfg)
  losses, history, digests = [], [], {}
  started = time.perf_counter()
  real_tokens = 0
  with Pipeline(cfg, mesh=mesh, data_axes=("data",)) as pipe, ocp.CheckpointManager(ckpt_dir) as manager:
    for step in range(steps):
      batch = next(pipe)
      params, opt, loss = demo_model.train_step(state["params"], state["opt"], batch)
      state = {"params": params, "opt": opt}
      losses.append(float(loss))
      stats = pipe.stats()
      history.append(stats)
      real_tokens += sum(stats["tokens_per_source"].values())
      if step >= checkpoint_at:
        digests[step] = _digest(batch)
      if step + 1 == checkpoint_at:
        manager.save(checkpoint_at, args=ocp.args.Composite(
            model=ocp.args.StandardSave(state), data=jaxdata.checkpoint.Save(pipe)))
      if step % 10 == 0 or step == steps - 1:
        log(f"step {step:3d}  loss {float(loss):.3f}  padding {stats['padding_fraction']:.3f}")
    manager.wait_until_finished()
  seconds = time.perf_counter() - started
  # A restart: a fresh process restores model and pipeline from the checkpoint.
  check = min(8, steps - checkpoint_at)
  command = [sys.executable, "-m", "jaxdata.demo", "--resume-check", ckpt_dir, "--cache-dir", cache_dir,
             "--at", str(checkpoint_at), "--count", str(check)]
  if config_path:
    command += ["--config", config_path]
  out = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "XLA_FLAGS": xla_flags()})
  if out.returncode != 0:
    resume_ok, detail = False, f"restart failed: {out.stderr[-500:]}"
  else:
    resumed = json.loads(out.stdout.strip().splitlines()[-1])
    expected = [digests[s] for s in range(checkpoint_at, checkpoint_at + check)]
    resume_ok = resumed["digests"] == expected
    detail = (f"{check} batches after step {checkpoint_at} identical in a fresh process"
              if resume_ok else f"batches differ after restore at step {checkpoint_at}")
  plot_path = os.path.join(out_dir, "mixture.png")
  _plot(history, cfg.names, plot_path)
  cumulative = {n: sum(h["tokens_per_source"][n] for h in history) for n in cfg.names}
  # The target of the run: each step's schedule weights, weighted by its tokens.
  weighted_target = {
      n: sum(h["target_share"][n] * sum(h["tokens_per_source"].values()) for h in history) / max(real_tokens, 1)
      for n in cfg.names
  }
  longest = max(int(dataset.lengths.max()) for dataset in pipe.datasets)
  return DemoResult(
      steps=steps,
      losses=losses,
      target_share=weighted_target,
      realised_share={n: cumulative[n] / max(real_tokens, 1) for n in cfg.names},
      tokens_per_source=cumulative,
      passes=history[-1]["passes"],
      efficiency=real_tokens / (steps * cfg.batch.global_batch_size * cfg.packing.seq_len),
      tokens_per_second=real_tokens / seconds,
      resume_ok=resume_ok,
      resume_detail=detail,
      plot_path=plot_path,
      max_document_tokens=longest + int(cfg.packing.add_bos) + int(cfg.packing.add_eos),
      capacity=cfg.batch.global_batch_size * cfg.packing.seq_len,
  )


def xla_flags() -> str:
  """XLA_FLAGS with DEVICES emulated CPU devices (kept if already set)."""
  flags = os.environ.get("XLA_FLAGS", "")
  if "xla_force_host_platform_device_count" not in flags:
    flags = f"{flags} --xla_force_host_platform_device_count={DEVICES}".strip()
  return flags


def _resume_check(ckpt_dir: str, cache_dir: str, config_path: str | None, at: int, count: int) -> None:
  """The restarted process: restore model + pipeline, print the next batches' digests."""
  cfg = demo_config(cache_dir, config_path)
  state = _model_state(cfg)
  abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, state)
  with Pipeline(cfg, mesh=_mesh(), data_axes=("data",)) as pipe, ocp.CheckpointManager(ckpt_dir) as manager:
    restored = manager.restore(at, args=ocp.args.Composite(
        model=ocp.args.StandardRestore(abstract), data=jaxdata.checkpoint.Restore(pipe)))
    digests = [_digest(next(pipe)) for _ in range(count)]
  print(json.dumps({"digests": digests, "opt_step": int(restored.model["opt"]["step"])}))


if __name__ == "__main__":
  import argparse  # noqa: PLC0415

  parser = argparse.ArgumentParser(description="jaxdata demo restart check (internal)")
  parser.add_argument("--resume-check", required=True)
  parser.add_argument("--cache-dir", required=True)
  parser.add_argument("--config")
  parser.add_argument("--at", type=int, required=True)
  parser.add_argument("--count", type=int, required=True)
  args = parser.parse_args()
  _resume_check(args.resume_check, args.cache_dir, args.config, args.at, args.count)
