"""What a training loop notices: only the features it reads (`batch.features`), and one log line
when `next()` waits longer than `wait_warning_s` for a step."""

from __future__ import annotations

import logging
import time

import jax
import numpy as np
import pytest
import yaml

from jaxdata import ConfigError, Pipeline, PipelineConfig
from jaxdata.config.layout import FEATURES
from jaxdata.demo.run import demo_config
from jaxdata.pipeline.execution import StepMaking
from jaxdata.tools.bench import bench
from pipeline_fixtures import coded_config

LOOP_FEATURES = ["tokens", "targets", "segment_ids", "loss_mask"]  # no source_ids, no positions
LENGTHS = [[int(n) for n in np.random.default_rng(3).integers(1, 40, 90)], [5, 17, 30, 2, 9] * 12]


def _with_features(cfg: PipelineConfig, features: list[str]) -> PipelineConfig:
  raw = cfg.to_dict()
  raw["batch"]["features"] = features
  return PipelineConfig.from_dict(raw)


def _mesh() -> jax.sharding.Mesh:
  return jax.make_mesh((8,), ("data",), axis_types=(jax.sharding.AxisType.Auto,))


@pytest.mark.parametrize(
  "arguments",
  [
    {"prefetch": 0},
    {"prefetch": 2},
    {"mesh": "8", "making": "here"},
    {"mesh": "8", "making": "process"},
    {"making": StepMaking("process", reader_processes=1)},
  ],
  ids=["prefetch0", "prefetch2", "mesh8", "mesh8-planner-process", "readers1"],
)
def test_a_loop_gets_only_its_features_and_each_equals_the_full_batchs(tmp_path, arguments):
  full_cfg = coded_config(
    tmp_path, LENGTHS, exhausted_policy="repeat", packing={"seq_len": 32}, batch={"global_batch_size": 8}
  )
  cfg = _with_features(full_cfg, list(reversed(LOOP_FEATURES)))  # any order given; FEATURES order kept
  assert cfg.batch.features == ("tokens", "targets", "segment_ids", "loss_mask")
  if arguments.get("mesh"):
    arguments = {**arguments, "mesh": _mesh()}
  with Pipeline(full_cfg, prefetch=0) as full, Pipeline(cfg, **arguments) as loop:
    for step in range(12):
      expected, batch = next(full), next(loop)
      assert list(batch) == LOOP_FEATURES, step
      for name in LOOP_FEATURES:
        np.testing.assert_array_equal(np.asarray(batch[name]), expected[name], err_msg=f"step {step} {name}")
    # The same state: a checkpoint restores under either choice of features.
    state = loop.get_state()
    assert state == full.get_state()
  with Pipeline(full_cfg, prefetch=0) as full, Pipeline(cfg, prefetch=0) as restored:
    full.set_state(state)
    restored.set_state(state)
    for _ in range(4):
      expected, batch = next(full), next(restored)
      assert all(np.array_equal(batch[n], expected[n]) for n in LOOP_FEATURES)


def test_trained_tokens_are_still_counted_without_source_ids_in_the_batch(tmp_path):
  full_cfg = coded_config(tmp_path, LENGTHS, masked=(0,), exhausted_policy="repeat")
  cfg = _with_features(full_cfg, ["tokens", "targets", "loss_mask"])
  with Pipeline(full_cfg, prefetch=0) as full, Pipeline(cfg, prefetch=2) as loop:
    for step in range(6):
      expected, batch = next(full), next(loop)
      assert "source_ids" not in batch
      trained = expected["loss_mask"] == 1
      counted = np.bincount(expected["source_ids"][trained], minlength=2).tolist()
      assert list(loop.stats()["trained_tokens_per_source"].values()) == counted, step
      assert loop.stats()["trained_tokens_per_source"] == full.stats()["trained_tokens_per_source"]


@pytest.mark.parametrize(
  ("features", "message"),
  [
    (["tokens", "positons"], "unknown feature 'positons'"),
    (["tokens", "tokens"], "named twice"),
    ([], "non-empty list"),
    ("tokens", "non-empty list"),
  ],
)
def test_bad_features_are_config_errors_naming_the_field(tmp_path, features, message):
  cfg = coded_config(tmp_path, LENGTHS)
  with pytest.raises(ConfigError, match="batch.features") as error:
    _with_features(cfg, features)
  assert message in str(error.value)


def test_bench_counts_the_same_tokens_whatever_features_the_config_keeps(tmp_path):
  cfg = coded_config(tmp_path, LENGTHS, exhausted_policy="repeat")
  full, only_tokens = bench(cfg, steps=6), bench(_with_features(cfg, ["tokens"]), steps=6)
  assert full.real_tokens == only_tokens.real_tokens > 0
  assert full.efficiency == only_tokens.efficiency < 1  # padding there, not counted


def test_the_demo_refuses_a_config_without_the_features_its_model_reads(tmp_path):
  raw = _with_features(coded_config(tmp_path, LENGTHS), ["tokens", "targets", "loss_mask"]).to_dict()
  path = tmp_path / "sub.yaml"
  path.write_text(yaml.safe_dump(raw))
  with pytest.raises(ConfigError, match=r"batch.features: .*reads segment_ids, positions, source_ids.*sub.yaml"):
    demo_config(str(tmp_path / "cache"), str(path))


def test_default_features_are_all_six(tmp_path):
  cfg = coded_config(tmp_path, LENGTHS)
  assert cfg.batch.features == FEATURES
  with Pipeline(cfg, prefetch=0) as pipe:
    assert tuple(next(pipe)) == FEATURES


def test_a_long_wait_logs_one_line_with_the_steps_ready(tmp_path, caplog):
  cfg = coded_config(tmp_path, LENGTHS, exhausted_policy="repeat")
  caplog.set_level(logging.WARNING, logger="jaxdata")
  # Any wait exceeds a threshold of a nanosecond: every step logs; prefetch=0 makes nothing ahead.
  with Pipeline(cfg, prefetch=0, wait_warning_s=1e-9) as pipe:
    next(pipe)
    next(pipe)
  lines = [r.getMessage() for r in caplog.records if r.name == "jaxdata"]
  assert len(lines) == 2
  assert lines[1].startswith("jaxdata: next() waited ") and "for step 1 (prefetch=0: no step is made ahead)" in lines[1]
  assert "\n" not in lines[1]
  caplog.clear()
  with Pipeline(cfg, prefetch=2, wait_warning_s=1e-9) as pipe:
    next(pipe)
    deadline = time.monotonic() + 60
    while not pipe._handout.prefetcher.queue.full():  # both steps made ahead before the next call
      assert time.monotonic() < deadline
      time.sleep(0.01)
    next(pipe)
  assert (
    "for step 1 (2 of 2 steps were ready ahead); the steps ahead were not handed out" in caplog.records[-1].getMessage()
  )


def test_no_line_below_the_threshold_or_when_turned_off(tmp_path, caplog):
  cfg = coded_config(tmp_path, LENGTHS, exhausted_policy="repeat")
  caplog.set_level(logging.WARNING, logger="jaxdata")
  for threshold in (None, 3600.0):
    with Pipeline(cfg, prefetch=2, wait_warning_s=threshold) as pipe:
      for _ in range(5):
        next(pipe)
  assert not [r for r in caplog.records if r.name == "jaxdata"]


@pytest.mark.parametrize("value", [0, -1.0, True, "10", float("nan"), -(10**400)])
def test_bad_wait_warning_s_is_a_value_error(tmp_path, value):
  cfg = coded_config(tmp_path, LENGTHS)
  with pytest.raises(ValueError, match="wait_warning_s") as raised:
    Pipeline(cfg, wait_warning_s=value)
  assert len(str(raised.value)) < 200  # a huge value is shortened, not printed whole
