"""MaxText's data keys and batch features: a pipeline from MaxText values, and a small model that trains on it."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxdata import ConfigError, DatasetWriter, Pipeline
from jaxdata.integrations.maxtext import FEATURES, MaxTextPipeline, maxtext_config

VOCAB = 64


def counting_dataset(directory: str, name: str, seed: int) -> None:
  """Documents that count upwards mod 63 (ids 1..63; 0 is EOS / pad): the next token is learnable."""
  rng = np.random.default_rng(seed)
  lengths = rng.integers(4, 40, 300)
  starts = rng.integers(1, VOCAB, lengths.size)
  tokens = np.concatenate([(s - 1 + np.arange(n)) % (VOCAB - 1) + 1 for s, n in zip(starts, lengths)])
  writer = DatasetWriter(directory, name, np.dtype("<u2"), {"kind": "counting", "vocab_size": VOCAB, "eos_id": 0})
  writer.write_documents(tokens, lengths)
  writer.finish()


@pytest.fixture()
def values(tmp_path) -> dict:
  counting_dataset(str(tmp_path / "web"), "web", 0)
  counting_dataset(str(tmp_path / "code"), "code", 1)
  return {  # what a MaxText base.yml + command line would hold (unrelated keys included)
    "grain_train_files": f"{tmp_path}/web/*.array_record,0.7;{tmp_path}/code/*.array_record,0.3",
    "grain_file_type": "arrayrecord",
    "data_shuffle_seed": 3,
    "max_target_length": 32,
    "global_batch_size_to_load": 8,
    "packing": True,
    "add_bos": False,
    "add_eos": True,
    "per_device_batch_size": 1,
    "base_emb_dim": 64,
    "dataset_type": "grain",
    "grain_worker_count": 0,
  }


def test_the_keys_map_onto_the_pipeline(values, tmp_path):
  cfg = maxtext_config(values)
  assert [(d.name, d.path) for d in cfg.datasets] == [("web", f"{tmp_path}/web"), ("code", f"{tmp_path}/code")]
  assert [float(w) for w in cfg.schedule().exact_weights_at(0)] == [0.7, 0.3]
  assert (cfg.seed, cfg.packing.seq_len, cfg.batch.global_batch_size, cfg.packing.mode) == (3, 32, 8, "first_fit")
  assert (cfg.packing.add_eos, cfg.packing.eos_id, cfg.shuffle_block_size) == (
    True,
    0,
    "global",
  )  # eos from the manifest
  mixture = tmp_path / "mixture.json"
  mixture.write_text(
    json.dumps(
      {
        "web": {"path": f"{tmp_path}/web/*.array_record", "weight": 0.7},
        "code": {"path": f"{tmp_path}/code/*.array_record", "weight": 0.3},
      }
    )
  )
  from_json = maxtext_config({**values, "grain_train_files": "", "grain_train_mixture_config_path": str(mixture)})
  assert from_json == cfg
  assert maxtext_config({**values, "packing": False}).packing.mode == "none"


def test_batches_carry_maxtexts_features(values):
  with MaxTextPipeline(values, prefetch=0) as maxtext, Pipeline(maxtext_config(values), prefetch=0) as plain:
    for _ in range(3):
      batch, reference = next(maxtext), next(plain)
      assert tuple(batch) == FEATURES and all(batch[k].dtype == np.int32 for k in FEATURES)
      assert np.array_equal(batch["inputs"], reference["tokens"]) and np.array_equal(
        batch["targets"], reference["targets"]
      )
      assert np.array_equal(batch["inputs_segmentation"], reference["segment_ids"])
      assert np.array_equal(batch["targets_segmentation"], reference["segment_ids"] * reference["loss_mask"])
      assert np.array_equal(batch["inputs_position"], batch["targets_position"])
    state = maxtext.get_state()
  with MaxTextPipeline(values, prefetch=0) as restored, MaxTextPipeline(values, prefetch=0) as straight:
    restored.set_state(state)  # the state is the pipeline's: it restores like any jaxdata checkpoint
    for _ in range(3):
      next(straight)
    for _ in range(2):
      assert [next(restored)[k].tobytes() for k in FEATURES] == [next(straight)[k].tobytes() for k in FEATURES]


def model_loss(params: dict, batch: dict) -> jax.Array:
  """A one-layer attention model reading MaxText's keys: attention inside segments, causal; the loss
  counts positions where targets_segmentation != 0, as MaxText weighs it."""
  x = params["embed"][batch["inputs"]] + params["position"][batch["inputs_position"]]
  seg = batch["inputs_segmentation"]
  causal = jnp.tril(jnp.ones((x.shape[1], x.shape[1]), bool))
  mask = causal[None] & (seg[:, :, None] == seg[:, None, :]) & (seg[:, :, None] != 0)
  scores = jnp.einsum("bqd,bkd->bqk", x @ params["q"], x @ params["k"]) / jnp.sqrt(x.shape[-1])
  attended = jax.nn.softmax(jnp.where(mask, scores, -1e9), axis=-1) @ (x @ params["v"])
  logits = (x + attended) @ params["out"]
  losses = -jnp.take_along_axis(jax.nn.log_softmax(logits), batch["targets"][..., None], axis=-1)[..., 0]
  weights = (batch["targets_segmentation"] != 0).astype(jnp.float32)
  return (losses * weights).sum() / weights.sum()


@pytest.mark.slow
def test_a_small_model_trains_on_the_maxtext_batches(values):
  keys = jax.random.split(jax.random.PRNGKey(0), 6)
  width = 32
  params = {
    "embed": 0.1 * jax.random.normal(keys[0], (VOCAB, width)),
    "position": 0.1 * jax.random.normal(keys[1], (32, width)),
    **{name: jax.random.normal(k, (width, width)) / np.sqrt(width) for name, k in zip("qkv", keys[2:5])},
    "out": jax.random.normal(keys[5], (width, VOCAB)) / np.sqrt(width),
  }
  step = jax.jit(lambda p, b: jax.tree.map(lambda w, g: w - 4.0 * g, p, jax.grad(model_loss)(p, b)))
  loss = jax.jit(model_loss)
  losses = []
  with MaxTextPipeline(values, prefetch=0) as batches:
    for _, batch in zip(range(120), batches):
      batch = {k: jnp.asarray(v) for k, v in batch.items()}
      losses.append(float(loss(params, batch)))
      params = step(params, batch)
  # Counting sequences: the next id is learnable; the loss falls well below its start (log 64 = 4.16).
  assert np.isfinite(losses).all() and np.mean(losses[-10:]) < 0.6 * np.mean(losses[:5]), losses


def test_paths_without_a_dataset_and_other_file_types_are_named(values, tmp_path):
  (tmp_path / "raw").mkdir()
  with pytest.raises(ConfigError, match=r"grain_train_files: .*raw/\*\.array_record: .*raw holds no jaxdata dataset"):
    maxtext_config({**values, "grain_train_files": f"{tmp_path}/raw/*.array_record"})
  with pytest.raises(ConfigError, match=r"grain_file_type: 'parquet'"):
    maxtext_config({**values, "grain_file_type": "parquet"})
  with pytest.raises(ConfigError, match=r"grain_train_files: 'a/\*,x' is not 'glob,weight'"):
    maxtext_config({**values, "grain_train_files": "a/*,x;b/*,1"}, check_paths=False)
