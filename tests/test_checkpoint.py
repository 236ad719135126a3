"""Orbax checkpoints of the pipeline: exact resume, elastic meshes, refusals."""

from __future__ import annotations

import base64
import json
import zlib

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
import pytest
from jax.sharding import Mesh

import jaxdata
from jaxdata import CheckpointError, Pipeline
from jaxdata.checkpoint import seal
from pipeline_fixtures import FIRST_CODE, coded_config, decode, digest, write_coded_dataset


@pytest.fixture(scope="module")
def cfg(tmp_path_factory):
  rng = np.random.default_rng(8)
  tmp = tmp_path_factory.mktemp("ckpt_data")
  return coded_config(
    tmp,
    [rng.integers(1, 60, 150).tolist(), rng.integers(1, 20, 200).tolist()],
    exhausted_policy="repeat",
    shuffle_block_size="global",
    mixture={"weights": {"d0": 3, "d1": 1}},
    packing={"seq_len": 32, "mode": "best_fit"},
    batch={"global_batch_size": 8},
  )


@pytest.fixture(scope="module")
def reference(cfg) -> list[tuple]:
  with Pipeline(cfg, prefetch=0) as pipe:
    return [digest(next(pipe)) for _ in range(14)]


@pytest.mark.slow
@pytest.mark.parametrize("use_async", [False, True])
def test_orbax_round_trip_with_a_model_in_one_manager(cfg, reference, tmp_path, use_async):
  params = {"w": jnp.arange(6.0).reshape(2, 3), "b": jnp.ones(3)}
  options = ocp.CheckpointManagerOptions(enable_async_checkpointing=use_async)
  with ocp.CheckpointManager(tmp_path / "ckpt", options=options) as manager, Pipeline(cfg, prefetch=3) as pipe:
    seen = [digest(next(pipe)) for _ in range(5)]
    manager.save(5, args=ocp.args.Composite(model=ocp.args.StandardSave(params), data=jaxdata.checkpoint.Save(pipe)))
    seen += [digest(next(pipe)) for _ in range(3)]  # after save(): must not reach the checkpoint
    manager.wait_until_finished()
  assert seen == reference[:8]
  with ocp.CheckpointManager(tmp_path / "ckpt") as manager, Pipeline(cfg, prefetch=1) as fresh:
    abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, params)
    restored = manager.restore(
      5, args=ocp.args.Composite(model=ocp.args.StandardRestore(abstract), data=jaxdata.checkpoint.Restore(fresh))
    )
    assert jax.tree.all(jax.tree.map(jnp.array_equal, restored.model, params))
    assert [digest(next(fresh)) for _ in range(9)] == reference[5:]
  state_file = next((tmp_path / "ckpt" / "5").rglob(jaxdata.checkpoint.STATE_FILE))
  assert len(state_file.read_bytes()) < 4096


@pytest.mark.slow
def test_restore_onto_other_meshes_8_to_4_to_8_devices(cfg, reference):
  devices = jax.devices()
  mesh8 = Mesh(np.array(devices[:8]), ("data",))
  mesh4 = Mesh(np.array(devices[:4]).reshape(2, 2), ("data", "model"))
  with Pipeline(cfg, mesh=mesh8) as first:
    got = [digest(next(first)) for _ in range(4)]
    state = first.get_state()
  with Pipeline(cfg, mesh=mesh4, data_axes=("data",)) as second:
    second.set_state(state)
    got += [digest(next(second)) for _ in range(5)]
    state = second.get_state()
  with Pipeline(cfg, mesh=mesh8) as third:
    third.set_state(json.loads(json.dumps(state)))
    got += [digest(next(third)) for _ in range(5)]
  assert got == reference


@pytest.mark.parametrize(
  "change, message",
  [
    (dict(seed=5), "seed: 0 -> 5"),
    (
      dict(shuffle_block_size=None),
      "shuffle.d0: shards=1 within=0 block=global reshuffle=1 -> shards=1 within=0 block=- reshuffle=1",
    ),
    (dict(packing={"seq_len": 64}), "packing: mode=best_fit seq_len=32"),
    (dict(batch={"global_batch_size": 16}), "global_batch_size: 8 -> 16"),
    (
      dict(mixture={"weights": {"d0": 3, "d1": 1}, "unit": "documents"}),
      "mixture: unit=tokens interleave=exact -> unit=documents",
    ),
  ],
)
def test_order_changes_are_refused_saying_what_changed(cfg, tmp_path, change, message):
  with Pipeline(cfg, prefetch=0) as pipe:
    next(pipe)
    state = pipe.get_state()
  changed = coded_config_like(cfg, tmp_path, **change)
  with Pipeline(changed, prefetch=0) as other:
    before = other.get_state()
    with pytest.raises(CheckpointError, match=message.replace("(", r"\(").replace(")", r"\)")):
      other.set_state(state)
    assert other.get_state() == before  # nothing half-applied


def coded_config_like(cfg, tmp_path, **change):
  """The same datasets as `cfg`, with top-level fields replaced."""
  raw = {
    "seed": cfg.seed,
    "datasets": [{"name": d.name, "path": d.path} for d in cfg.datasets],
    "mixture": {"weights": dict(cfg.mixture.weights)},
    "exhausted_policy": "repeat",
    "shuffle_block_size": "global",
    "packing": {"seq_len": 32, "mode": "best_fit"},
    "batch": {"global_batch_size": 8},
  }
  for key, value in change.items():
    raw[key] = {**raw[key], **value} if isinstance(value, dict) and isinstance(raw.get(key), dict) else value
  return jaxdata.PipelineConfig.from_dict(raw)


def test_changed_dataset_content_is_refused(cfg, tmp_path):
  with Pipeline(cfg, prefetch=0) as pipe:
    state = pipe.get_state()
  copy = tmp_path / "d1"
  write_coded_dataset(str(copy), 1, [5] * 200)  # same name, other documents
  changed = jaxdata.PipelineConfig.from_dict(
    {
      "datasets": [{"name": "d0", "path": cfg.datasets[0].path}, {"name": "d1", "path": str(copy)}],
      "mixture": {"weights": {"d0": 3, "d1": 1}},
      "exhausted_policy": "repeat",
      "shuffle_block_size": "global",
      "packing": {"seq_len": 32, "mode": "best_fit"},
      "batch": {"global_batch_size": 8},
    }
  )
  with Pipeline(changed, prefetch=0) as other, pytest.raises(CheckpointError, match=r"content.d1: \w+ -> \w+"):
    other.set_state(state)


def test_weight_change_is_accepted(cfg, reference):
  with Pipeline(cfg, prefetch=0) as pipe:
    next(pipe)
    state = pipe.get_state()
  reweighted = coded_config_like(cfg, None, mixture={"weights": {"d0": 1, "d1": 1}})
  with Pipeline(reweighted, prefetch=0) as other:
    other.set_state(state)
    assert digest(next(other)) != reference[1]  # the new weights rule from here


@pytest.mark.slow
def test_corrupt_missing_and_newer_checkpoints_name_the_path(cfg, tmp_path):
  with ocp.CheckpointManager(tmp_path / "ckpt") as manager, Pipeline(cfg, prefetch=0) as pipe:
    next(pipe)
    manager.save(1, args=ocp.args.Composite(data=jaxdata.checkpoint.Save(pipe)))
    manager.wait_until_finished()
  state_file = next((tmp_path / "ckpt" / "1").rglob(jaxdata.checkpoint.STATE_FILE))
  good = state_file.read_text()

  def restore():
    with ocp.CheckpointManager(tmp_path / "ckpt") as manager, Pipeline(cfg, prefetch=0) as fresh:
      manager.restore(1, args=ocp.args.Composite(data=jaxdata.checkpoint.Restore(fresh)))

  state_file.write_text(good[: len(good) // 2])
  with pytest.raises(CheckpointError, match=rf"{state_file}: pipeline state is not valid JSON"):
    restore()
  state_file.write_text(json.dumps({**json.loads(good), "version": 99}))
  with pytest.raises(CheckpointError, match=rf"{state_file}: pipeline state: format version 99 is newer"):
    restore()
  broken = json.loads(good)
  broken["stream"]["datasets"]["d0"]["position"] = -3
  state_file.write_text(json.dumps(broken))
  with pytest.raises(CheckpointError, match=rf"{state_file}: pipeline state: its digest does not match its content"):
    restore()
  # A state that is invalid but sealed (a bug, not an edit) meets the field validators.
  state_file.write_text(json.dumps(seal(broken)))
  with pytest.raises(CheckpointError, match=rf"{state_file}: pipeline state: stream state: datasets.d0"):
    restore()
  broken = json.loads(good)
  broken["packer"]["carry"] = "not base64!"
  state_file.write_text(json.dumps(seal(broken)))
  with pytest.raises(CheckpointError, match=rf"{state_file}: pipeline state: packer state: carry is not a valid"):
    restore()
  # A zlib bomb in the carry: 16 KB that would inflate to 16 MB, past the bound the config allows,
  # is cut off while inflating (0.1 inflated everything: 5 GB from 1 MB).
  broken = json.loads(good)
  broken["packer"]["carry"] = base64.b64encode(zlib.compress(b"[" + b"0," * (1 << 23) + b"0]", 9)).decode()
  state_file.write_text(json.dumps(seal(broken)))
  with pytest.raises(CheckpointError, match=r"carry is not a valid encoded piece list \(more than \d+ pieces"):
    restore()
  # restored without the pipeline to restore into: say what to pass (it was an AttributeError on None)
  state_file.write_text(good)
  for args in ({}, {"args": ocp.args.Composite(data=jaxdata.checkpoint.Restore())}):
    with ocp.CheckpointManager(tmp_path / "ckpt") as manager:
      with pytest.raises(CheckpointError, match=r"restored into no pipeline: .*jaxdata.checkpoint.Restore\(pipe\)"):
        manager.restore(1, **args)
  state_file.unlink()
  with pytest.raises(CheckpointError, match="no jaxdata pipeline state in this checkpoint"):
    restore()


def test_weight_change_at_a_checkpoint_loses_and_repeats_nothing(tmp_path):
  # Unshuffled datasets, "stop" policy: every document is read at most once,
  # in record order; across a weight change at a checkpoint, the documents
  # seen must be exactly a prefix of each dataset, each once.
  lengths = [[7] * 60, [5] * 90]
  base = dict(
    exhausted_policy="stop",
    shuffle_shards=False,
    batch={"global_batch_size": 4, "drop_remainder": False},
    packing={"seq_len": 16},
    shuffle_block_size=None,  # stored order: what was read is a prefix of the records
  )
  first_cfg = coded_config(tmp_path / "a", lengths, mixture={"weights": {"d0": 3, "d1": 1}}, **base)
  second_cfg = jaxdata.PipelineConfig.from_dict(
    {  # the same files, other weights
      "datasets": [{"name": d.name, "path": d.path} for d in first_cfg.datasets],
      "mixture": {"weights": {"d0": 1, "d1": 3}},
      **{k: v for k, v in base.items()},
    }
  )
  tokens = []
  with Pipeline(first_cfg, prefetch=2) as first:
    tokens += [np.asarray(next(first)["tokens"]) for _ in range(6)]
    state = first.get_state()
  with Pipeline(second_cfg, prefetch=2) as second:
    second.set_state(state)
    tokens += [np.asarray(b["tokens"]) for b in second]
    final = second.get_state()
  every = np.concatenate([t.ravel() for t in tokens])
  d, r, k = decode(every[every >= FIRST_CODE])
  for dataset in (0, 1):
    docs = sorted(set(r[d == dataset].tolist()))
    position = final["stream"]["datasets"][f"d{dataset}"]["position"]
    assert docs == list(range(position))  # a prefix, nothing skipped
    counts = np.bincount(r[d == dataset] * 16 + k[d == dataset])
    assert counts.max() == 1  # no token twice


def test_a_state_of_the_older_format_is_refused_and_changes_nothing(cfg, reference):
  with Pipeline(cfg, prefetch=0) as pipe:
    for _ in range(3):
      next(pipe)
    state = pipe.get_state()
  assert state["version"] == 2 and set(state["packer"]) == {"done", "carry"}  # the step is stored once
  # Format 1 (jaxdata 0.1) kept a versioned packer state with its own copy of the step; its
  # shuffles and mixture arithmetic differ, so continuing it would silently change the data.
  old = {**state, "version": 1, "packer": {"version": 1, "step": state["step"], **state["packer"]}}
  with Pipeline(cfg, prefetch=0) as other:
    next(other)
    before = other.get_state()
    with pytest.raises(CheckpointError, match="format version 1 was written by an older jaxdata"):
      other.set_state(old)
    assert other.get_state() == before
    rest = [digest(next(other)) for _ in range(3)]
  assert rest == reference[1:4]


@pytest.mark.parametrize(
  "where,value,message",
  [
    ("updates", [{"step": 2}], r"pipeline state: stream state: malformed mixture update \{'step': 2\}"),
    ("updates", "none", "pipeline state: stream state: updates must be a list"),
    ("ended", "no", "pipeline state: stream state: ended must be true or false, got 'no'"),
    ("done", 1, "pipeline state: packer state: done must be true or false, got '1'"),
  ],
)
def test_a_malformed_update_or_flag_is_a_checkpoint_error_and_changes_nothing(cfg, reference, where, value, message):
  # They raised a bare ValueError, or were taken as Python truth ("no" ended the stream).
  with Pipeline(cfg, prefetch=0) as pipe:
    next(pipe)
    state = pipe.get_state()
    if where == "done":
      broken = {**state, "packer": {**state["packer"], "done": value}}
    else:
      broken = {**state, "stream": {**state["stream"], where: value}}
    with pytest.raises(CheckpointError, match=message):
      pipe.set_state(seal(broken))  # written by hand, with its digest
    assert pipe.get_state() == state
    assert [digest(next(pipe)) for _ in range(2)] == reference[1:3]
