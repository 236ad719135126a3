"""`jaxdata demo --online doremi`: DoReMi run online, the proxy steering the pipeline every step.

::

    reference   the demo model on uniform weights, `steps` steps
    proxy       a fresh model on a pipeline whose weights the loop updates every step:
                  excess = per_source_excess_loss(proxy token loss, reference token loss)  (on device)
                  weights = DoReMiController.observe(step, excess);  pipe.update_mixture(weights)
                  (the weights act PROXY_LAG_STEPS = 4 steps later: nothing made ahead is planned again)
    resume      the pipeline's state at the middle step, restored into a fresh pipeline with the loop's
                later updates replayed, gives the very batches the proxy trained on
    main        a fresh model on the averaged weights, against one on uniform weights: held-out loss

Every model is the demo's tiny one; the datasets hold 5% of their documents out for the held-out loss.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxdata.config.pipeline_config import PipelineConfig
from jaxdata.demo import model
from jaxdata.demo.ablate import ablation_config, evaluate, token_losses
from jaxdata.pipeline.pipeline import Pipeline
from jaxdata.research.online import DoReMiController, per_source_excess_loss
from jaxdata.sources.manifest import Manifest

__all__ = ["OnlineResult", "run_online_doremi"]


@dataclasses.dataclass(frozen=True)
class OnlineResult:
  trajectory: list[dict[str, float]]  # the weights after every proxy step
  averaged: dict[str, float]
  resume_ok: bool
  resume_detail: str
  uniform_loss: dict[str, float]  # held-out loss per dataset, main model on uniform weights
  doremi_loss: dict[str, float]  # ... on DoReMi's averaged weights
  pipeline_share: float  # of the proxy loop's step time, the pipeline's: next() and update_mixture()
  updates_replanned: int  # proxy updates that planned steps again: the first only (planned ahead before steering)


# The proxy's weights act 4 steps after the step they were computed at: soon, for a 60-step run, and
# still past what prefetch=2 makes ahead (3 steps), so that no update plans a step again.
PROXY_LAG_STEPS = 4


def _with_lag(cfg: PipelineConfig, lag: int) -> PipelineConfig:
  raw = cfg.to_dict()
  raw["mixture"]["update_lag_steps"] = lag
  return PipelineConfig.from_dict(raw)


def _digest(batch: dict[str, Any]) -> str:
  return hashlib.sha256(b"".join(np.asarray(batch[k]).tobytes() for k in sorted(batch))).hexdigest()[:16]


def _fresh(cfg: PipelineConfig) -> tuple[Any, dict[str, Any]]:
  vocab = max(int(Manifest.load(d.path).tokenizer.get("vocab_size") or 1 << 16) for d in cfg.datasets)
  params = model.init_params(jax.random.key(0), vocab, cfg.packing.seq_len)
  zeros = jax.tree.map(jnp.zeros_like, params)
  return params, {"step": jnp.zeros((), jnp.int32), "mu": zeros, "nu": jax.tree.map(jnp.zeros_like, params)}


def _on_device(batch: dict[str, Any]) -> dict[str, jax.Array]:
  return {k: jnp.asarray(v) for k, v in batch.items()}


def _train(cfg: PipelineConfig, steps: int) -> Any:
  params, state = _fresh(cfg)
  with Pipeline(cfg, prefetch=0) as pipe:
    for _ in range(steps):
      params, state, _ = model.train_step(params, state, _on_device(next(pipe)))
  return params


def run_online_doremi(
  base: PipelineConfig, steps: int = 60, log: Callable[[str], None] = print, eval_tokens: int | None = None
) -> OnlineResult:
  """Reference, online proxy (with its resume check) and the two main runs (see the module docstring);
  the main runs are evaluated on every held-out token, or the first `eval_tokens` (`ablate.evaluate`)."""
  uniform = ablation_config(base, dict.fromkeys(base.names, 1.0))
  names = uniform.names
  log(f"reference: the demo model on uniform weights, {steps} steps ...")
  reference = _train(uniform, steps)
  log(f"proxy: DoReMi online, the weights updated every step, {steps} steps ...")
  controller = DoReMiController(names)
  params, state = _fresh(uniform)
  proxy_cfg = _with_lag(uniform, PROXY_LAG_STEPS)
  middle = steps // 2
  digests, updates, saved = [], {}, None
  in_pipeline = 0.0  # seconds in next() and update_mixture()
  with Pipeline(proxy_cfg, prefetch=2) as pipe:
    loop_started = time.perf_counter()
    for step in range(steps):
      if step == middle:
        saved = pipe.get_state()
      begun = time.perf_counter()
      host_batch = next(pipe)
      in_pipeline += time.perf_counter() - begun
      batch = _on_device(host_batch)
      digests.append(_digest(batch))
      excess, _ = per_source_excess_loss(
        token_losses(params, batch), token_losses(reference, batch), batch["source_ids"], batch["loss_mask"], len(names)
      )
      weights = controller.observe(step, dict(zip(names, np.asarray(excess).tolist())))
      updates[step] = weights
      begun = time.perf_counter()
      pipe.update_mixture(weights)  # from the step `mixture.update_lag_steps` after the next on
      in_pipeline += time.perf_counter() - begun
      params, state, _ = model.train_step(params, state, batch)
    jax.block_until_ready(params)
    pipeline_share = in_pipeline / (time.perf_counter() - loop_started)
    replanned = pipe.execution().updates_replanned
  log("resume: the middle step's state in a fresh pipeline, the loop's later updates replayed ...")
  replayed = []
  with Pipeline(proxy_cfg, prefetch=1) as restored:
    restored.set_state(json.loads(json.dumps(saved)))
    for step in range(middle, steps):
      replayed.append(_digest(_on_device(next(restored))))
      restored.update_mixture(updates[step])
  resume_ok = replayed == digests[middle:]
  detail = f"steps {middle}-{steps - 1}: {'identical' if resume_ok else 'DIFFERENT'} batches after restoring"
  averaged = controller.averaged()
  log(f"main: a fresh model on DoReMi's averaged weights and one on uniform weights, {steps} steps each ...")
  doremi_cfg = ablation_config(base, averaged)
  return OnlineResult(
    trajectory=controller.history,
    averaged=averaged,
    resume_ok=resume_ok,
    resume_detail=detail,
    uniform_loss=evaluate(_train(uniform, steps), uniform, eval_tokens),
    doremi_loss=evaluate(_train(doremi_cfg, steps), doremi_cfg, eval_tokens),
    pipeline_share=pipeline_share,
    updates_replanned=replanned,
  )
