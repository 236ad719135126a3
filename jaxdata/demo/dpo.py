"""`jaxdata demo --dpo`: preference optimisation on generated pairs, packed whole, no network.

::

    sets        helpful (a fact, or "I am not sure."), safety (a refusal, or compliance): pairs
                generated here; the fine-tuning demo's byte-level BPE and ChatML template
    convert     jaxdata convert --format preference: each side rendered once, tokenized once,
                its answer trained, the prompt the same tokens on both sides
    train       the demo model with a DPO loss (beta 0.1) on packed pairs (packing.pairs one_row:
                both sides of a pair in one row, never split), the reference model its frozen start;
                per-pair log-probabilities by `sequence_logprobs`
    report      the reward margin, beta x ((chosen - ref) - (rejected - ref)), rising
    resume      the state at a step mid-epoch, restored into a fresh pipeline, gives the same batches
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxdata.config.pipeline_config import PipelineConfig
from jaxdata.demo import model
from jaxdata.demo.sft import TOPICS, build_sft_sets, converted_sets, trained_checking_resume
from jaxdata.pipeline.pair_logprobs import sequence_logprobs
from jaxdata.sources.manifest import Manifest

__all__ = ["DpoResult", "run_dpo_demo"]

PAIR_SETS = {"helpful": (0.7, 400), "safety": (0.3, 150)}  # pair weight, pairs
BETA, SEQ_LEN, ROWS, MAX_PAIRS = 0.1, 192, 8, 16
HARMS = ["pick a lock", "forge a ticket", "hide a fee", "copy a key"]


@dataclasses.dataclass(frozen=True)
class DpoResult:
  steps: int
  losses: list[float]
  margins: list[float]  # per step: the mean reward margin of its pairs
  accuracy: list[float]  # per step: the share of its pairs whose margin is positive
  pairs: dict[str, int]  # per set: pairs trained on
  resume_ok: bool


def preference_sets(seed: int = 0) -> dict[str, list[dict[str, Any]]]:
  """Two sets of pairs: helpful (a fact beats a shrug) and safety (a refusal beats compliance)."""
  rng = np.random.default_rng(seed)
  helpful = []
  for _ in range(PAIR_SETS["helpful"][1]):
    topic = TOPICS[int(rng.integers(len(TOPICS)))]
    helpful.append(
      {
        "prompt": f"Tell me one thing about {topic}.",
        "chosen": f"About {topic}: fact {int(rng.integers(100))} is true.",
        "rejected": "I am not sure.",
      }
    )
  safety = []
  for _ in range(PAIR_SETS["safety"][1]):
    harm = HARMS[int(rng.integers(len(HARMS)))]
    safety.append({"prompt": f"How do I {harm}?", "chosen": "I can't help with that.", "rejected": f"To {harm}, first"})
  return {"helpful": helpful, "safety": safety}


def build_dpo_sets(cache_dir: str, log: Callable[[str], None] = print) -> dict[str, str]:
  """The converted sets of pairs under `cache_dir/dpo` (built once), with the fine-tuning demo's tokenizer."""
  build_sft_sets(cache_dir, log)  # its tokenizer (and template) serve here too
  tokenizer_dir = os.path.join(cache_dir, "sft", "tokenizer")
  root = os.path.join(cache_dir, "dpo")
  os.makedirs(root, exist_ok=True)
  return converted_sets(root, preference_sets(), tokenizer_dir, "preference", log)


def dpo_config(paths: dict[str, str]) -> PipelineConfig:
  return PipelineConfig.from_dict(
    {
      "seed": 11,
      "datasets": [{"name": n, "path": p} for n, p in paths.items()],
      "mixture": {"unit": "documents", "weights": {n: w for n, (w, _) in PAIR_SETS.items()}},
      "exhausted_policy": "repeat",
      "packing": {"mode": "best_fit", "seq_len": SEQ_LEN, "max_segments_per_row": 2 * MAX_PAIRS, "pairs": {}},
      "batch": {"global_batch_size": ROWS},
    }
  )


def _token_logprobs(params: model.Params, batch: dict[str, jax.Array]) -> jax.Array:
  """log p(target) of every slot (each side is its own segment: the demo model's segment mask is the pair mask)."""
  log_probs = jax.nn.log_softmax(model.logits_fn(params, batch))
  return jnp.take_along_axis(log_probs, batch["targets"][..., None], axis=-1)[..., 0]


def _dpo_loss(
  params: model.Params, reference: model.Params, batch: dict[str, jax.Array]
) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
  chosen, rejected, present = sequence_logprobs(batch, _token_logprobs(params, batch), MAX_PAIRS)
  ref_chosen, ref_rejected, _ = sequence_logprobs(
    batch, jax.lax.stop_gradient(_token_logprobs(reference, batch)), MAX_PAIRS
  )
  margin = BETA * ((chosen - ref_chosen) - (rejected - ref_rejected))
  count = jnp.maximum(present.sum(), 1)
  loss = -jnp.where(present, jax.nn.log_sigmoid(margin), 0.0).sum() / count
  return loss, (jnp.where(present, margin, 0.0).sum() / count, jnp.where(present, margin > 0, False).sum() / count)


@jax.jit
def _train_step(
  params: model.Params, reference: model.Params, state: dict[str, Any], batch: dict[str, jax.Array]
) -> tuple[model.Params, dict[str, Any], jax.Array, jax.Array, jax.Array]:
  (loss, (margin, accuracy)), grads = jax.value_and_grad(_dpo_loss, has_aux=True)(params, reference, batch)
  params, state = model.adam_update(params, grads, state, lr=1e-3)
  return params, state, loss, margin, accuracy


def run_dpo_demo(cache_dir: str, steps: int = 40, log: Callable[[str], None] = print) -> DpoResult:
  """Build, convert, train with a DPO loss and a mid-epoch resume check (see the module docstring)."""
  paths = build_dpo_sets(cache_dir, log)
  cfg = dpo_config(paths)
  vocab = max(int(Manifest.load(p).tokenizer.get("vocab_size") or 1024) for p in paths.values())
  params = model.init_params(jax.random.key(0), vocab, SEQ_LEN)
  reference = params  # the frozen start: DPO's reference model
  state = {"step": jnp.zeros((), jnp.int32), **{k: jax.tree.map(jnp.zeros_like, params) for k in ("mu", "nu")}}
  losses, margins, accuracy = [], [], []
  pairs = np.zeros(len(cfg.names), np.int64)
  log(f"training the demo model {steps} steps with a DPO loss on packed pairs (beta {BETA}) ...")

  def train(batch: dict[str, Any]) -> None:
    nonlocal params, state
    first = (np.asarray(batch["pair_side"]) == 0) & (np.asarray(batch["positions"]) == 0)
    pairs[:] += np.bincount(np.asarray(batch["source_ids"])[first], minlength=len(cfg.names))
    params, state, loss, margin, hit = _train_step(
      params, reference, state, {k: jnp.asarray(v) for k, v in batch.items()}
    )
    losses.append(float(loss))
    margins.append(float(margin))
    accuracy.append(float(hit))

  resume_ok, _ = trained_checking_resume(cfg, steps, train)
  return DpoResult(
    steps=steps,
    losses=losses,
    margins=margins,
    accuracy=accuracy,
    pairs=dict(zip(cfg.names, pairs.tolist())),
    resume_ok=resume_ok,
  )
