"""MaxText's data keys and batch features: a pipeline from MaxText values, and a small model that trains on it."""

from __future__ import annotations

import hashlib
import json
import os
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import sentencepiece as spm

from jaxdata import ConfigError, DatasetError, Pipeline, from_iterable
from jaxdata.integrations import maxtext_files, maxtext_keys
from jaxdata.integrations.maxtext import MAXTEXT_FEATURES, MAXTEXT_KEYS, MaxTextPipeline, maxtext_batch, maxtext_config
from jaxdata.integrations.maxtext_values import KEY_TYPES
from jaxdata.sources import DatasetWriter

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
    "num_epoch": 100,
  }


def test_the_keys_map_onto_the_pipeline(values, tmp_path):
  cfg = maxtext_config(values)
  assert [(d.name, d.path) for d in cfg.datasets] == [("web", f"{tmp_path}/web"), ("code", f"{tmp_path}/code")]
  assert [float(w) for w in cfg.schedule.exact_weights_at(0)] == [0.7, 0.3]
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
  boundaries = 0
  with MaxTextPipeline(values, prefetch=0) as maxtext, Pipeline(maxtext_config(values), prefetch=0) as plain:
    for _ in range(3):
      batch, reference = next(maxtext), next(plain)
      assert tuple(batch) == MAXTEXT_FEATURES and all(batch[k].dtype == np.int32 for k in MAXTEXT_FEATURES)
      assert np.array_equal(batch["inputs"], reference["tokens"])
      assert np.array_equal(batch["inputs_segmentation"], reference["segment_ids"])
      assert np.array_equal(batch["inputs_position"], reference["positions"])
      assert np.array_equal(batch["inputs_position"], batch["targets_position"])
      shifted = maxtext_shift_data(
        {
          "inputs": reference["tokens"],
          "targets": reference["tokens"],
          "targets_segmentation": reference["segment_ids"],
        },
        ignored_ids=[maxtext.pad_id],
      )
      assert np.array_equal(batch["targets"], shifted["targets"])
      assert_same_but_real_pad_ids_train(batch, shifted, reference["segment_ids"], maxtext.pad_id)
      # at a document's last token MaxText keeps the segment (its target: the next document's first token)
      ends = (reference["segment_ids"][:, :-1] != reference["segment_ids"][:, 1:]) & (
        reference["segment_ids"][:, 1:] > 0
      )
      assert (batch["targets_segmentation"][:, :-1][ends] > 0).all()
      boundaries += int(ends.sum())
    assert boundaries > 0
    state = maxtext.get_state()
  with MaxTextPipeline(values, prefetch=0) as restored, MaxTextPipeline(values, prefetch=0) as straight:
    restored.set_state(state)  # the state is the pipeline's: it restores like any jaxdata checkpoint
    for _ in range(3):
      next(straight)
    for _ in range(2):
      assert [next(restored)[k].tobytes() for k in MAXTEXT_FEATURES] == [
        next(straight)[k].tobytes() for k in MAXTEXT_FEATURES
      ]


def assert_same_but_real_pad_ids_train(batch: dict, shifted: dict, segment_ids: np.ndarray, pad_id: int) -> int:
  """targets_segmentation as MaxText's ShiftData gives it, except where a real token (the next position
  is inside a segment) has the pad id: MaxText zeroes it by value (so with pad 0, Llama-3's `!` or an EOS
  of id 0 never trains); jaxdata marks padding by position, so it trains. Likewise a row's last token
  before zero padding under a nonzero pad id: MaxText trains it toward a 0 of the padding, jaxdata does
  not. Returns how many positions differ from MaxText's."""
  real_next = np.concatenate([segment_ids[:, 1:], np.zeros_like(segment_ids[:, :1])], axis=1) != 0
  trains_here = real_next & (shifted["targets"] == pad_id)
  into_padding = ~real_next & (shifted["targets"] != pad_id) & (segment_ids != 0)
  expected = np.where(trains_here, segment_ids, shifted["targets_segmentation"])
  expected = np.where(into_padding, 0, expected)
  assert np.array_equal(batch["targets_segmentation"], expected)
  return int(trains_here.sum() + into_padding.sum())


def maxtext_shift_data(element: dict, ignored_ids: list[int], axis: int = 1) -> dict:
  """MaxText's `ShiftData` (its `shift_left` then `shift_and_refine`), re-implemented from its definition:
  targets move left by one along `axis`, the first ignored id filling the end; targets_segmentation is
  zeroed wherever the shifted target is an ignored id."""
  targets = np.asarray(element["targets"])
  pad = [(0, 0)] * targets.ndim
  pad[axis] = (0, 1)
  keep = [slice(None)] * targets.ndim
  keep[axis] = slice(1, None)
  shifted = np.pad(targets, pad, constant_values=targets.dtype.type(ignored_ids[0]))[tuple(keep)]
  segmentation = np.asarray(element["targets_segmentation"])
  for ignored in ignored_ids:
    segmentation = np.where(shifted != ignored, segmentation, 0)
  return {**element, "targets": shifted, "targets_segmentation": segmentation}


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


# ---------------------------------------------------------------- MaxText's keys, one by one


class RecordingValues(dict):
  """MaxText values that remember every key the adapter looks up."""

  looked_up: set = set()

  def get(self, key, default=None):
    RecordingValues.looked_up.add(key)
    return super().get(key, default)

  def __getitem__(self, key):
    RecordingValues.looked_up.add(key)
    return super().__getitem__(key)

  def __contains__(self, key):
    RecordingValues.looked_up.add(key)
    return super().__contains__(key)


def test_every_key_the_adapter_reads_is_in_the_table(values, tmp_path, monkeypatch):
  checked = maxtext_keys.maxtext_values
  monkeypatch.setattr(maxtext_keys, "maxtext_values", lambda v: RecordingValues(checked(v)))
  counting_dataset(str(tmp_path / "heldout"), "heldout", 7)
  eval_files = {"grain_eval_files": f"{tmp_path}/heldout/*.array_record", "global_batch_size_to_load_eval": 4}
  for extra, split in (({}, "train"), ({"packing": False}, "train"), (eval_files, "eval")):
    recorded = RecordingValues({**values, **extra})
    maxtext_config(recorded, split=split)
    maxtext_keys.maxtext_workers(recorded, split)
    maxtext_keys.maxtext_pad_id(recorded, split)
  looked_up = RecordingValues.looked_up - {"bos_id", "eos_id", "pad_id"}  # jaxdata's own additions
  assert len(looked_up) > 30 and not looked_up - set(MAXTEXT_KEYS), looked_up - set(MAXTEXT_KEYS)


@pytest.mark.parametrize(
  "key, value, message",
  [
    ("dataset_type", "tfds", r"dataset_type: 'tfds'; jaxdata reads jaxdata datasets"),
    ("dataset_type", "hf", r"hf_path: '' is not a local file or directory"),  # hf: files, converted in place
    ("grain_file_type", "parquet", r"grain_file_type: 'parquet'"),
    ("expansion_factor_real_data", 2, r"expansion_factor_real_data: 2 is not supported"),
    ("colocated_python_data_input", True, r"colocated_python_data_input: True is not supported"),
    ("generate_padding_batch_train", True, r"generate_padding_batch_train: True is not supported"),
    ("use_dpo", True, r"use_dpo: True, and dataset '\w+' holds documents; convert the pairs"),
    ("enable_rampup_batch_size", True, r"enable_rampup_batch_size: True is not supported: use jaxdata's batch.ramp"),
    ("train_data_columns", ["chosen", "rejected"], r"train_data_columns: \['chosen', 'rejected'\]: one text column"),
    ("grain_packing_type", "greedy", r"grain_packing_type: 'greedy' is not one of first_fit, best_fit"),
  ],
)
def test_keys_jaxdata_cannot_honour_are_refused_by_name(values, key, value, message):
  with pytest.raises(ConfigError, match=message):
    maxtext_config({**values, key: value})


def test_keys_that_are_honoured_change_the_config(values, tmp_path):
  base = maxtext_config(values)
  assert maxtext_config({**values, "dataset_type": "grain", "max_segments_per_seq": -1}) == base
  assert maxtext_config({**values, "grain_packing_type": "best_fit"}).packing.mode == "best_fit"
  assert maxtext_config({**values, "grain_packing_type": "concat_then_split"}).packing.mode == "concat"
  assert maxtext_config({**values, "packing": False, "grain_packing_type": "best_fit"}).packing.mode == "none"
  assert base.packing.long_docs == "truncate"  # use_truncation: true, MaxText's default (TokenizeAndTrim)
  assert maxtext_config({**values, "use_truncation": False}).packing.long_docs == "split"
  assert (base.stop_after_passes, maxtext_config({**values, "num_epoch": 2}).stop_after_passes) == (100, 2)
  assert maxtext_config({**values, "enable_data_shuffling": False}).shuffle_block_size is None
  assert maxtext_config({**values, "grain_use_elastic_iterator": True}) == base  # jaxdata's state is elastic anyway
  for no_effect in ("grain_prefetch_buffer_size", "grain_ram_budget_mb", "grain_data_source_max_workers"):
    assert maxtext_config({**values, no_effect: 7}) == base
  # the older "glob:weight" syntax, and a gs:// glob with no weight
  older = values["grain_train_files"].replace(",0.7", ":0.7").replace(",0.3", ":0.3")
  assert maxtext_config({**values, "grain_train_files": older}) == base
  assert maxtext_files.parse_train_files("gs://b/c4/*.array_record") == [("gs://b/c4/*.array_record", 1.0)]


def test_the_global_batch_is_derived_from_per_device_batch_size_as_maxtext_does(values):
  derived = {k: v for k, v in values.items() if k != "global_batch_size_to_load"}
  assert maxtext_config({**derived, "per_device_batch_size": 2}, num_devices=4).batch.global_batch_size == 8
  assert maxtext_config({**derived, "per_device_batch_size": 1}).batch.global_batch_size == jax.device_count()
  with pytest.raises(ConfigError, match=r"per_device_batch_size: 0.3 x 8 devices = 2.4 rows"):
    maxtext_config({**derived, "per_device_batch_size": 0.3}, num_devices=8)
  with pytest.raises(ConfigError, match=r"global_batch_size_to_load: give it, or per_device_batch_size"):
    maxtext_config({k: v for k, v in derived.items() if k != "per_device_batch_size"})


def test_a_glob_selects_exactly_the_shards_it_matches(values, tmp_path):
  writer = DatasetWriter(str(tmp_path / "books"), "books", np.dtype("<u2"), {"kind": "x", "eos_id": 0}, 200)
  writer.write_documents(np.arange(1, 601) % 60 + 1, np.full(60, 10))
  manifest = writer.finish()
  assert len(manifest.shards) > 2
  whole = f"{tmp_path}/books/*.array_record"
  assert maxtext_config({**values, "grain_train_files": whole}).datasets[0].path == f"{tmp_path}/books"
  first = manifest.shards[0].path
  with pytest.raises(
    ConfigError, match=rf"matches 1 of the {len(manifest.shards)} shards .* jaxdata reads a dataset whole"
  ):
    maxtext_config({**values, "grain_train_files": f"{tmp_path}/books/{first}"})
  with pytest.raises(ConfigError, match=r"grain_train_files: .*/books/\*\.arayrecord matches no shard"):
    maxtext_config({**values, "grain_train_files": f"{tmp_path}/books/*.arayrecord"})  # a typo


def test_bos_and_eos_ids_must_be_known_never_guessed(values, tmp_path):
  # The counting datasets were indexed with an EOS id (0) and no BOS id: add_bos (MaxText's default) is refused.
  with pytest.raises(ConfigError, match=r"add_bos: true \(MaxText's default\) adds the tokenizer's BOS, and no id"):
    maxtext_config({k: v for k, v in values.items() if k != "add_bos"})
  assert maxtext_config({**values, "add_bos": True, "bos_id": 63}).packing.bos_id == 63


def test_the_tokenizer_path_must_be_the_datasets_tokenizer_and_gives_its_bos_and_eos(values, tmp_path):
  spm.SentencePieceTrainer.train(
    sentence_iterator=iter([f"some text {i} of a corpus" for i in range(40)]),
    model_prefix=str(tmp_path / "sp"),
    vocab_size=40,
    hard_vocab_limit=False,
    minloglevel=2,
  )
  model = str(tmp_path / "sp.model")
  processor = spm.SentencePieceProcessor(model_file=model)
  identity = {
    "kind": "sentencepiece",
    "file": "sp.model",
    "sha256": hashlib.sha256(open(model, "rb").read()).hexdigest(),
  }
  for name in ("news", "blogs"):
    writer = DatasetWriter(str(tmp_path / name), name, np.dtype("<u2"), identity)
    writer.write_documents(np.arange(3, 43) % 30 + 3, np.full(4, 10))
    writer.finish()
  same = {
    **{k: v for k, v in values.items() if k not in ("add_bos", "add_eos")},  # MaxText's defaults: both true
    "grain_train_files": f"{tmp_path}/news/*.array_record,1;{tmp_path}/blogs/*.array_record,1",
  }
  cfg = maxtext_config({**same, "tokenizer_path": model})
  assert (cfg.packing.add_bos, cfg.packing.bos_id, cfg.packing.add_eos, cfg.packing.eos_id) == (
    True,
    processor.bos_id(),
    True,
    processor.eos_id(),
  )
  other = tmp_path / "other.json"
  other.write_text("{}")
  with pytest.raises(ConfigError, match=r"tokenizer_path: .*other.json .* is not the tokenizer dataset 'news' was"):
    maxtext_config({**same, "tokenizer_path": str(other), "bos_id": 1, "eos_id": 2})
  unchecked = {**same, "tokenizer_path": str(other), "tokenize_train_data": False, "bos_id": 1, "eos_id": 2}
  assert maxtext_config(unchecked).names == ("news", "blogs")
  bytes_dataset = DatasetWriter(str(tmp_path / "bytes"), "bytes", np.dtype("<u2"), {"kind": "byte", "bos_id": 1})
  bytes_dataset.write_documents(np.arange(3, 43), np.full(4, 10))
  bytes_dataset.finish()
  with pytest.raises(
    ConfigError, match=r"is not the tokenizer dataset 'bytes' was converted with \(the byte tokenizer\)"
  ):
    maxtext_config({**same, "grain_train_files": f"{tmp_path}/bytes/*.array_record", "tokenizer_path": model})
  (tmp_path / "broken.model").write_bytes(b"not a model")
  with pytest.raises(ConfigError, match=r"tokenizer_path: .*broken.model is not a SentencePiece model"):
    maxtext_config({**same, "tokenizer_path": str(tmp_path / "broken.model"), "tokenize_train_data": False})


def test_eval_keys_build_the_eval_pipeline(values, tmp_path):
  counting_dataset(str(tmp_path / "heldout"), "heldout", 7)
  eval_values = {
    **values,
    "grain_eval_files": f"{tmp_path}/heldout/*.array_record",
    "global_batch_size_to_load_eval": 4,
    "grain_worker_count_eval": 0,
  }
  cfg = maxtext_config(eval_values, split="eval")
  assert cfg.names == ("heldout",) and cfg.batch.global_batch_size == 4
  assert (cfg.shuffle_block_size, cfg.shuffle_shards, cfg.stop_after_passes) == (None, False, 1)
  with MaxTextPipeline(eval_values, split="eval", prefetch=0) as batches:
    first = next(batches)
  assert first["inputs"].shape == (4, 32) and tuple(first) == MAXTEXT_FEATURES
  with pytest.raises(ConfigError, match=r"grain_eval_files: give a glob"):
    maxtext_config(values, split="eval")


def test_worker_and_buffer_keys_reach_the_pipeline(values):
  cores = len(os.sched_getaffinity(0))
  assert maxtext_keys.maxtext_workers({"grain_worker_count": -1}) == max(0, cores - 1)  # MaxText's auto
  assert maxtext_keys.maxtext_workers({"grain_worker_count": 3}) == 3
  with pytest.raises(ConfigError, match=r"grain_worker_count: -2"):
    maxtext_keys.maxtext_workers({"grain_worker_count": -2})
  with MaxTextPipeline({**values, "grain_per_worker_buffer_size": 0, "grain_num_threads": 2}) as maxtext:
    assert maxtext.pipeline.prefetch == 0
    next(maxtext)


def test_the_docs_table_lists_every_key():
  docs = open(os.path.join(os.path.dirname(__file__), "..", "docs", "integrations.md"), encoding="utf-8").read()
  missing = [key for key, what in MAXTEXT_KEYS.items() if f"| `{key}` | {what} |" not in docs]
  assert not missing, missing


def test_without_tokenizing_at_load_no_bos_or_eos_is_added(values):
  cfg = maxtext_config({**values, "add_bos": True, "add_eos": True, "tokenize_train_data": False})
  assert (cfg.packing.add_bos, cfg.packing.add_eos) == (False, False)  # MaxText's tokenizer adds them, and did not run


def test_unpacked_chunks_are_refused_and_the_eval_batch_is_padded(values, tmp_path):
  with pytest.raises(ConfigError, match=r"use_truncation: false with packing: false"):
    maxtext_config({**values, "packing": False, "use_truncation": False})
  counting_dataset(str(tmp_path / "heldout"), "heldout", 7)
  eval_values = {
    **values,
    "grain_eval_files": f"{tmp_path}/heldout/*.array_record",
    "global_batch_size_to_load_eval": 4,
  }
  assert maxtext_config(eval_values, split="eval").batch.drop_remainder is False
  with pytest.raises(ConfigError, match=r"grain_worker_count_eval: -2"):
    maxtext_keys.maxtext_workers({"grain_worker_count_eval": -2}, "eval")
  with pytest.raises(ConfigError, match=r"grain_train_files: .*a weight must be a number >= 0"):
    maxtext_config({**values, "grain_train_files": "a/*.ar,-1;b/*.ar,2"}, check_paths=False)


def test_with_a_nonzero_pad_id_rows_are_zero_padded_and_shiftdata_ignores_the_pad_id(values):
  padded = {**values, "pad_id": 9}  # a tokenizer whose pad is 9 (the counting tokens run 1..63)
  with MaxTextPipeline(padded, prefetch=0) as maxtext:
    assert (maxtext.pad_id, maxtext.config.packing.pad_id) == (9, 0)  # Grain's packers pad with zeros
    with Pipeline(maxtext.config, prefetch=0) as plain:
      for _ in range(3):
        batch, reference = next(maxtext), next(plain)
        shifted = maxtext_shift_data(
          {"targets": reference["tokens"], "targets_segmentation": reference["segment_ids"]}, ignored_ids=[9]
        )
        assert np.array_equal(batch["targets"], shifted["targets"])
        assert_same_but_real_pad_ids_train(batch, shifted, reference["segment_ids"], 9)
  assert maxtext_config({**padded, "packing": False}).packing.pad_id == 9  # PadOrTrimToMaxLength pads with it


# ---------------------------------------------------------------- every value checked where it enters

WRONG_VALUES = [
  ("packing", "false", "expected true or false"),
  ("enable_data_shuffling", "false", "expected true or false"),
  ("use_truncation", 0, "expected true or false"),
  ("add_bos", "False", "expected true or false"),
  ("global_batch_size_to_load", 8.7, "expected an int"),
  ("global_batch_size_to_load", True, "expected an int"),
  ("max_target_length", 32.9, "expected an int"),
  ("max_target_length", None, "null"),
  ("data_shuffle_seed", 1.7, "expected an int"),
  ("data_shuffle_seed", "abc", "expected an int"),
  ("num_epoch", [1], "expected an int"),
  ("num_epoch", 0, "expected an int >= 1"),
  ("per_device_batch_size", float("nan"), "not a finite number"),
  ("per_device_batch_size", float("inf"), "not a finite number"),
  ("grain_worker_count", {"a": 1}, "expected an int"),
  ("max_segments_per_seq", 0, "give -1"),
  ("max_segments_per_seq", 2.5, "expected an int"),
  ("grain_train_files", 3, "expected a string"),
  ("train_data_columns", [1], "expected a column name"),
]


@pytest.mark.parametrize("key, value, message", WRONG_VALUES, ids=[f"{k}={v!r}" for k, v, _ in WRONG_VALUES])
def test_a_value_of_the_wrong_type_is_refused_naming_its_key(values, key, value, message):
  for call in (maxtext_config, maxtext_keys.maxtext_workers):
    with pytest.raises(ConfigError, match=rf"^{key}: .*{re.escape(message)}"):
      call({**values, key: value})


def test_every_data_key_has_a_checked_type():
  # every key jaxdata reads has MaxText's type; the rest are keys MaxText reads for other pipelines only
  not_typed = set(MAXTEXT_KEYS) - set(KEY_TYPES)
  assert all("not read" in MAXTEXT_KEYS[k] for k in not_typed), not_typed
  for key, (kind, _) in KEY_TYPES.items():
    wrong = {"bool": "yes", "int": 1.5, "number": "1", "str": 1, "columns": 2}[kind]
    with pytest.raises(ConfigError, match=rf"^{key}: "):
      maxtext_config({key: wrong}, check_paths=False)


@pytest.mark.parametrize(
  "typo, real",
  [
    ("grain_train_filez", "grain_train_files"),
    ("max_target_lenght", "max_target_length"),
    ("packng", "packing"),  # a letter left out
  ],
)
def test_a_misspelled_data_key_is_refused_with_the_near_key(values, typo, real):
  with pytest.raises(ConfigError, match=rf"{typo}: not a MaxText data key, given beside '{real}'"):
    maxtext_config({**values, typo: values[real]})
  without = {k: v for k, v in values.items() if k != real}
  with pytest.raises(ConfigError, match=rf"{typo}: not a MaxText data key; did you mean '{real}'"):
    maxtext_config({**without, typo: values[real]})
  # MaxText's other keys pass unread
  assert maxtext_config({**values, "learning_rate": 1e-3, "global_batch_size_to_train_on": 8}) == maxtext_config(values)


def test_a_short_key_with_two_letters_swapped_is_refused(values):
  """`use_stf: true` was accepted and SFT stayed off: difflib's ratio misses a swap in a short key."""
  with pytest.raises(ConfigError, match=r"use_stf: not a MaxText data key; did you mean 'use_sft'"):
    maxtext_config({**values, "use_stf": True})


def test_conflicting_batch_keys_duplicate_names_and_a_missing_tokenizer_are_refused(values, tmp_path):
  with pytest.raises(ConfigError, match=r"global_batch_size_to_load: 6 rows, but per_device_batch_size 4 x 4"):
    maxtext_config({**values, "global_batch_size_to_load": 6, "per_device_batch_size": 4}, num_devices=4)
  assert maxtext_config({**values, "global_batch_size_to_load": 16, "per_device_batch_size": 4}, num_devices=4)
  mixture = tmp_path / "mix.json"
  mixture.write_text(
    f'{{"web": {{"path": "{tmp_path}/web/*.array_record", "weight": 1}}, '
    f'"web": {{"path": "{tmp_path}/code/*.array_record", "weight": 2}}}}'
  )
  with pytest.raises(ConfigError, match=r"grain_train_mixture_config_path: .*'web' is named twice"):
    maxtext_config({**values, "grain_train_files": "", "grain_train_mixture_config_path": str(mixture)})
  with pytest.raises(ConfigError, match=r"tokenizer_path: .*nope.model does not exist"):
    maxtext_config({**values, "tokenizer_path": str(tmp_path / "nope.model"), "tokenize_train_data": True})
  # not tokenizing: the file is not needed
  maxtext_config({**values, "tokenizer_path": str(tmp_path / "nope.model"), "tokenize_train_data": False})


def test_maxtexts_default_segment_cap_is_honoured(values):
  cfg = maxtext_config({**values, "max_segments_per_seq": 2})
  assert cfg.packing.max_segments_per_row == 2
  assert maxtext_config({**values, "max_segments_per_seq": -1}).packing.max_segments_per_row is None
  assert maxtext_config({**values, "max_segments_per_seq": 32, "packing": False}).packing.max_segments_per_row is None
  with MaxTextPipeline({**values, "max_segments_per_seq": 2}) as pipe:
    for _ in range(3):
      assert int(np.asarray(next(pipe)["inputs_segmentation"]).max()) <= 2


# ---------------------------------------------------------------- MaxText's SFT (use_sft)


def _maxtext_sft_reference(batch: dict, examples: dict, seq_len: int, unk_id: int = 0) -> tuple[np.ndarray, np.ndarray]:
  """MaxText's own steps, re-implemented: SFTPromptMasking (a prompt's targets are unk_id), the packed
  rows (the same examples in the same places), then ShiftData (targets shifted left, padded; their
  segmentation 0 where the target is the pad id)."""
  rows = batch["tokens"].shape[0]
  targets_raw = np.zeros((rows, seq_len), np.int64)
  for r in range(rows):
    for s in np.unique(batch["segment_ids"][r][batch["segment_ids"][r] > 0]):
      columns = np.flatnonzero(batch["segment_ids"][r] == s)
      ids = batch["tokens"][r, columns]
      mask = examples[tuple(ids.tolist())]
      targets_raw[r, columns] = np.where(mask == 1, ids, unk_id)
  targets = np.concatenate([targets_raw[:, 1:], np.full((rows, 1), unk_id)], axis=1)
  return targets, np.where(targets != unk_id, batch["segment_ids"], 0)


def test_use_sft_gives_maxtexts_sft_targets_from_masked_examples(tmp_path):
  rng = np.random.default_rng(12)
  examples = {}
  for _ in range(120):
    n = int(rng.integers(4, 30))
    ids = rng.integers(1, 250, n)
    mask = np.zeros(n, np.uint8)
    mask[int(rng.integers(1, n)) :] = 1  # a prompt, then its completion (as a chat conversion marks them)
    examples[tuple(ids.tolist())] = mask
  from_iterable([(list(k), v) for k, v in examples.items()], out=str(tmp_path / "chat"), tokenizer="byte")
  values = {
    "grain_train_files": f"{tmp_path}/chat/*.array_record",
    "global_batch_size_to_load": 4,
    "max_target_length": 64,
    "use_sft": True,
    "sft_train_on_completion_only": True,
    "enable_data_shuffling": False,
    "grain_packing_type": "best_fit",
  }
  with MaxTextPipeline(values) as pipe:
    assert pipe.config.packing.add_bos is False and pipe.config.packing.add_eos is False  # the template's own
    for _ in range(6):
      raw = {k: np.asarray(v) for k, v in next(pipe.pipeline).items()}
      got = maxtext_batch(raw, 0, completion_only=True)
      targets, segmentation = _maxtext_sft_reference(raw, examples, 64)
      assert np.array_equal(got["targets_segmentation"], segmentation)
      trained = segmentation > 0
      assert np.array_equal(np.asarray(got["targets"])[trained], targets[trained])
  # every token trains without completion_only
  with MaxTextPipeline({**values, "sft_train_on_completion_only": False}) as pipe:
    batch = next(pipe)
    assert (np.asarray(batch["targets_segmentation"]) > 0).sum() > (
      np.asarray(batch["inputs_segmentation"]) > 0
    ).sum() * 0.9
  # data without masks, or converted with another template, is refused
  from_iterable([list(k) for k in list(examples)[:50]], out=str(tmp_path / "plain"), tokenizer="byte")
  with pytest.raises(ConfigError, match=r"sft_train_on_completion_only: dataset 'plain' has no trained-token masks"):
    maxtext_config({**values, "grain_train_files": f"{tmp_path}/plain/*.array_record"})
  (tmp_path / "t.jinja").write_text("{{ messages }}")
  with pytest.raises(ConfigError, match=r"chat_template_path: .*t.jinja is not the template dataset 'chat'"):
    maxtext_config({**values, "chat_template_path": str(tmp_path / "t.jinja")})


def test_the_key_list_follows_maxtexts_base_yml_at_its_recorded_commit():
  """Every data key of MaxText's base.yml (at the commit the snapshot names, as MAXTEXT_SOURCE does) has a row
  in MAXTEXT_KEYS, and no row names a key MaxText does not have: a new MaxText key is honoured, refused or
  marked not read, never taken for a typo."""
  from jaxdata.integrations.maxtext_keys import MAXTEXT_SOURCE  # noqa: PLC0415

  snapshot = json.loads(open(os.path.join(os.path.dirname(__file__), "support", "maxtext_base_keys.json")).read())
  assert snapshot["commit"] == MAXTEXT_SOURCE["commit"] and snapshot["repository"] == MAXTEXT_SOURCE["repository"]
  maxtext = set(snapshot["base_yml_keys"]) | set(snapshot["derived_keys"])
  assert not maxtext - set(MAXTEXT_KEYS), sorted(maxtext - set(MAXTEXT_KEYS))
  assert not set(MAXTEXT_KEYS) - maxtext, sorted(set(MAXTEXT_KEYS) - maxtext)


def test_keys_maxtext_has_now_are_read_or_refused_by_name(values):
  """The keys an outside check found refused as typos: honoured (no effect) or refused with the reason."""
  cfg = maxtext_config(
    {
      **values,
      "global_batch_size_to_load_start": 4,
      "grain_shuffle_buffer_size": 100,
      "grain_index_storage_option": None,
      "training_objective": "causal_lm",
      "use_chat_template": False,
      "chat_template": "",
      "train_image_column": "image",
    }
  )
  assert cfg == maxtext_config(values)
  with pytest.raises(ConfigError, match="training_objective: 'block_diffusion' is not supported: jaxdata makes next"):
    maxtext_config({**values, "training_objective": "block_diffusion"})
  with pytest.raises(ConfigError, match="grain_shuffle_buffer_size: .*expected"):
    maxtext_config({**values, "grain_shuffle_buffer_size": -3})


def _olmo_files(tmp_path, lengths: list[int], length: int) -> tuple[str, list[np.ndarray]]:
  """Flat uint32 token files (ids: file x 10**5 + position) and an index JSON in MaxText's format 1 (the fields
  its build_olmo_npy_index.py writes: instances are the length-token windows of each file, trailing dropped)."""
  arrays, entries, offset = [], [], 0
  for i, n in enumerate(lengths):
    tokens = (i * 10**5 + np.arange(n)).astype(np.uint32)
    path = tmp_path / "olmo" / f"part-{i}.npy"
    path.parent.mkdir(exist_ok=True)
    tokens.tofile(path)
    arrays.append(tokens)
    entries.append(
      {
        "path": f"/remote-mount/{path.name}",
        "label": "mix",
        "n_tokens": n,
        "n_instances": n // length,
        "instance_offset": offset,
      }
    )
    offset += n // length
  index = {
    "format_version": "1",
    "sequence_length": length,
    "dtype": "uint32",
    "tokenizer": "t",
    "total_instances": offset,
    "total_tokens": sum(lengths),
    "fingerprint": "sha256:abc",
    "files": entries,
  }
  (tmp_path / "index.json").write_text(json.dumps(index))
  return str(tmp_path / "index.json"), arrays


def _olmo_values(tmp_path, index: str, length: int, **more) -> dict:
  """MaxText's olmo_grain values for `_olmo_files`' index (its paths remapped to where the files are)."""
  return {
    "dataset_type": "olmo_grain",
    "olmo_index_path": index,
    "olmo_path_remap_from": "/remote-mount/",
    "olmo_path_remap_to": str(tmp_path / "olmo") + "/",
    "olmo_apply_ngram_filter": False,
    "max_target_length": length,
    "global_batch_size_to_load": 2,
    **more,
  }


def test_olmo_grain_reads_every_instance_of_the_index_once_per_epoch(tmp_path):
  """dataset_type olmo_grain: each row is one of OLMo's instances (the window [k L, (k+1) L) of a file: its L - 1
  inputs and their targets, MaxText masking the L-th target as well); one epoch holds every instance once."""
  length, lengths = 16, [100, 64, 37]
  index, arrays = _olmo_files(tmp_path, lengths, length)
  olmo = _olmo_values(tmp_path, index, length, num_epoch=1, data_shuffle_seed=4)
  cfg = maxtext_config(olmo, cache_dir=str(tmp_path / "cache"))  # the index of the files: built once, there
  expected = sorted(tuple(a[k * length : (k + 1) * length].tolist()) for a in arrays for k in range(len(a) // length))
  seen = []
  with Pipeline(cfg, prefetch=0) as pipe:
    for batch in pipe:
      for tokens, targets, segments in zip(batch["tokens"], batch["targets"], batch["segment_ids"]):
        kept = segments > 0
        assert kept.sum() == length - 1 and (tokens[1 : length - 1] == targets[: length - 2]).all()
        seen.append(tuple(tokens[kept].tolist()) + (int(targets[length - 2]),))
  assert sorted(seen) == expected  # every instance once, no other window
  with pytest.raises(ConfigError, match="olmo_apply_ngram_filter: true .*set olmo_apply_ngram_filter: false"):
    maxtext_config({**olmo, "olmo_apply_ngram_filter": True})
  with pytest.raises(ConfigError, match="sequence_length 16 is not max_target_length 32"):
    maxtext_config({**olmo, "max_target_length": 32})
  with pytest.raises(ConfigError, match=r"/remote-mount/part-0.npy \(listed by .*index.json\) does not exist"):
    maxtext_config({**olmo, "olmo_path_remap_from": ""})
  with pytest.raises(
    ConfigError, match="olmo_index_path: gs://b/part-0.npy: jaxdata reads OLMo's token files from a file"
  ):
    maxtext_config({**olmo, "olmo_path_remap_to": "gs://b/"})
  index_json = json.loads(open(index).read())
  (tmp_path / "v2.json").write_text(json.dumps({**index_json, "format_version": "2"}))
  with pytest.raises(ConfigError, match=r"v2.json: index format version '2', jaxdata reads '1'"):
    maxtext_config({**olmo, "olmo_index_path": str(tmp_path / "v2.json")}, cache_dir=str(tmp_path / "cache2"))
  index_json["files"][1]["n_tokens"] = 65  # the file changed since the index was built
  (tmp_path / "stale.json").write_text(json.dumps(index_json))
  with pytest.raises(ConfigError, match=r"part-1.npy holds 64 tokens, the index says 65: the file changed"):
    maxtext_config({**olmo, "olmo_index_path": str(tmp_path / "stale.json")}, cache_dir=str(tmp_path / "cache3"))


def test_tokenizer_path_may_be_an_hf_tokenizer_directory(tmp_path):
  """tokenizer_path: a directory saved by save_pretrained is checked by its tokenizer.json (what the manifest
  records); another tokenizer's directory is refused, naming both."""
  import chat_families  # noqa: PLC0415 -- tests/support: builds an HF tokenizer with transformers
  from jaxdata import ConvertOptions, convert  # noqa: PLC0415
  from jaxdata.conversion.tokenizers import TokenizerSpec  # noqa: PLC0415

  chat_families.build_tokenizer(str(tmp_path / "tok"))
  (tmp_path / "web.jsonl").write_text(
    "".join(json.dumps({"text": f"the weather in Paris {i}"}) + "\n" for i in range(40))
  )
  spec = TokenizerSpec.parse(f"hf:{tmp_path / 'tok'}")
  convert([str(tmp_path / "web.jsonl")], str(tmp_path / "web"), "web", ConvertOptions(tokenizer=spec, workers=1))
  values = {
    "grain_train_files": f"{tmp_path}/web/*.array_record",
    "max_target_length": 32,
    "global_batch_size_to_load": 2,
    "tokenizer_path": str(tmp_path / "tok"),
    "add_bos": False,
    "add_eos": False,
  }
  assert maxtext_config(values).datasets[0].path == f"{tmp_path}/web"
  other = chat_families.build_tokenizer(str(tmp_path / "other"))
  other.add_tokens(["an-extra-token"])
  other.save_pretrained(str(tmp_path / "other"))
  with pytest.raises(ConfigError, match=r"tokenizer_path: .*other/tokenizer.json .*is not the tokenizer dataset 'web'"):
    maxtext_config({**values, "tokenizer_path": str(tmp_path / "other")})


def test_maxtext_pipeline_runs_olmo_grain_values_as_maxtext_config_does(tmp_path, monkeypatch):
  """`MaxTextPipeline` with `dataset_type: olmo_grain` (no grain_train_files): the batches of
  `maxtext_config` + `Pipeline`, MaxText's features made with the tokenizer's pad (none: 0)."""
  monkeypatch.setenv("JAXDATA_CACHE_DIR", str(tmp_path / "cache"))
  length = 16
  index, _ = _olmo_files(tmp_path, [100, 64, 37], length)
  olmo = _olmo_values(tmp_path, index, length, num_epoch=1)
  with Pipeline(maxtext_config(olmo), prefetch=0) as pipe:
    expected = [maxtext_batch(b, 0) for b in pipe]
  with MaxTextPipeline(olmo, prefetch=0) as pipe:
    got = list(pipe)
    assert pipe.pad_id == 0
  assert len(got) == len(expected) > 0
  for a, b in zip(got, expected):
    assert all(np.array_equal(np.asarray(a[k]), np.asarray(b[k])) for k in MAXTEXT_FEATURES)


def test_olmo_index_fields_and_ignored_files_are_named(tmp_path):
  """An index whose dtype is missing or whose sequence_length is no number, grain_train_files beside an
  OLMo index, and an index rewritten with another dtype (same fingerprint): each named, none reused."""
  index, _ = _olmo_files(tmp_path, [64, 48], 16)
  olmo = _olmo_values(tmp_path, index, 16)
  base = json.loads(open(index).read())
  for name, change, message in (
    ("nodtype", {"dtype": None}, r"dtype None: the index must name its files' token dtype"),
    ("text", {"sequence_length": "16"}, r"sequence_length '16' is not a whole number of tokens"),
  ):
    (tmp_path / f"{name}.json").write_text(json.dumps({**base, **change}))
    with pytest.raises(ConfigError, match=message):
      maxtext_config({**olmo, "olmo_index_path": str(tmp_path / f"{name}.json")}, cache_dir=str(tmp_path / "c"))
  with pytest.raises(ConfigError, match=r"grain_train_files: dataset_type olmo_grain reads the files olmo_index_path"):
    maxtext_config({**olmo, "grain_train_files": "data/*.array_record"}, cache_dir=str(tmp_path / "c"))
  first = maxtext_config(olmo, cache_dir=str(tmp_path / "c")).datasets[0].path
  (tmp_path / "u16.json").write_text(json.dumps({**base, "dtype": "uint16"}))  # same fingerprint field
  assert first  # the uint32 index, cached; its uint16 rewrite is indexed anew (and its ids' dtype checked)
  with pytest.raises(DatasetError, match=r"part-0.npy: looks like uint32 ids read as uint16"):
    maxtext_config({**olmo, "olmo_index_path": str(tmp_path / "u16.json")}, cache_dir=str(tmp_path / "c"))


def test_a_dataset_written_with_a_tokenizer_object_is_that_of_its_tokenizer_path(values, tmp_path):
  # The object records the hash of its content, not of a file: the tokenizer_path check refused it.
  import transformers  # noqa: PLC0415 -- the chat extra
  from tokenizers import Tokenizer, models, pre_tokenizers  # noqa: PLC0415 -- the tokenizers extra

  tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(["<unk>", "<s>", "</s>", "a", "b"])}, "<unk>"))
  tok.pre_tokenizer = pre_tokenizers.Whitespace()
  fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>")
  fast.save_pretrained(str(tmp_path / "tok"))
  from_iterable(["a b a b"] * 8, str(tmp_path / "words"), tokenizer=fast)
  config = {**values, "grain_train_files": f"{tmp_path}/words/*.array_record", "tokenizer_path": str(tmp_path / "tok")}
  assert maxtext_config(config).packing.eos_id == 2
  fast.add_tokens(["c"])
  fast.save_pretrained(str(tmp_path / "other"))
  with pytest.raises(ConfigError, match=r"tokenizer_path: .*other/tokenizer.json .* is not the tokenizer dataset"):
    maxtext_config({**config, "tokenizer_path": str(tmp_path / "other")})
