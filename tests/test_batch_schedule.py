"""Batch-size schedules: a ramp or phases of sizes, a pure function of step; restored mid-ramp onto
other host counts; a schedule that changes from the restored step on is accepted."""

from __future__ import annotations

import os

import numpy as np
import pytest
import yaml

from checkpoint_property import assert_restores_exactly
from jaxdata import CheckpointError, Pipeline, PipelineConfig, load_config
from jaxdata.tools.exposure import plan_run
from pipeline_fixtures import digest, free_port, rebuilt_batch, run_workers, write_coded_dataset

WORKER = os.path.join(os.path.dirname(__file__), "support", "elastic_worker.py")


@pytest.fixture()
def config(tmp_path) -> str:
  rng = np.random.default_rng(6)
  for d, count in enumerate((300, 200)):
    write_coded_dataset(str(tmp_path / f"d{d}"), d, rng.integers(2, 60, count).tolist())
  path = tmp_path / "pipeline.yaml"
  path.write_text(
    yaml.safe_dump(
      {
        "seed": 2,
        "datasets": [{"name": "d0", "path": "d0"}, {"name": "d1", "path": "d1"}],
        "mixture": {"weights": {"d0": 2, "d1": 1}},
        "exhausted_policy": "repeat",
        "shuffle_block_size": "global",
        "packing": {"mode": "first_fit", "seq_len": 32},
        "batch": {"global_batch_size": 32, "ramp": {"start": 8, "steps": 8, "granularity": 8}},
      }
    )
  )
  return str(path)


def test_rows_follow_the_ramp_and_the_phases(config):
  cfg = load_config(config)
  with Pipeline(cfg, prefetch=0) as pipe:
    rows = [np.asarray(next(pipe)["tokens"]).shape[0] for _ in range(10)]
  assert rows == [8, 8, 8, 16, 16, 16, 24, 24, 32, 32]  # 8 + 24 s // 8, down to multiples of 8
  raw = cfg.to_dict()
  raw["batch"] = {
    "global_batch_size": 16,
    "schedule": [{"until_step": 2, "global_batch_size": 4}, {"until_step": 0.5, "global_batch_size": 8}],
  }
  phases = PipelineConfig.from_dict({**raw, "total_steps": 10})
  assert [phases.rows_at(s) for s in range(7)] == [4, 4, 8, 8, 8, 16, 16]


@pytest.mark.slow
def test_state_at_every_step_of_the_ramp_restores(config):
  cfg = load_config(config)

  def advance(pipe: Pipeline, n: int) -> list[tuple]:
    return [digest(next(pipe)) for _ in range(n)]

  assert_restores_exactly(lambda: Pipeline(cfg, prefetch=0), advance, total=11, stops=range(11))


@pytest.mark.slow
@pytest.mark.multiprocess
def test_a_ramp_restored_mid_ramp_onto_other_host_counts_gives_the_same_batches(config, tmp_path):
  save_at, steps = 3, 6  # saved mid-ramp, resumed through 16, 16, 16, 24, 24, 32 rows
  with Pipeline(load_config(config), prefetch=0) as pipe:
    expected = [next(pipe) for _ in range(save_at + steps)][save_at:]

  def launch(count: int, devices: int, out: str, mode: str) -> None:
    port = free_port()
    run_workers(
      WORKER,
      [
        [
          str(port),
          str(count),
          str(i),
          str(devices),
          config,
          str(tmp_path / "ckpt"),
          out,
          mode,
          str(save_at),
          str(steps),
        ]
        for i in range(count)
      ],
    )

  launch(2, 4, str(tmp_path), "save")
  for count, devices in ((1, 8), (4, 2)):
    out = tmp_path / f"resume{count}"
    out.mkdir()
    launch(count, devices, str(out), "restore")
    for step, batch in enumerate(expected):
      rebuilt = rebuilt_batch(out, count, step, batch)
      for name in batch:
        assert np.array_equal(rebuilt[name], batch[name]), (count, step, name)


def test_a_schedule_may_change_from_the_restored_step_on_but_not_before(config):
  cfg = load_config(config)
  with Pipeline(cfg, prefetch=0) as pipe:
    for _ in range(5):
      next(pipe)
    state = pipe.get_state()  # at step 5 (sizes so far 8, 8, 8, 16, 16)
  raw = cfg.to_dict()
  raw["batch"] = {
    "global_batch_size": 64,
    "schedule": [{"until_step": 3, "global_batch_size": 8}, {"until_step": 5, "global_batch_size": 16}],
  }
  later = PipelineConfig.from_dict(raw)  # the same sizes before step 5, then 64 rows
  with Pipeline(later, prefetch=0) as restored:
    restored.set_state(state)
    assert [np.asarray(next(restored)["tokens"]).shape[0] for _ in range(2)] == [64, 64]
  raw["batch"] = {"global_batch_size": 64, "schedule": [{"until_step": 4, "global_batch_size": 8}]}
  with Pipeline(PipelineConfig.from_dict(raw), prefetch=0) as refused:
    with pytest.raises(CheckpointError, match=r"global_batch_size: ramp:8->32/8x8 -> 8<4,64"):
      refused.set_state(state)  # step 3 had 16 rows, the new schedule says 8


def test_the_plan_counts_the_smaller_steps_of_a_ramp(config):
  cfg = load_config(config)
  table, _, _ = plan_run(cfg, 10_000, max_passes=1e9)
  sizes = [cfg.rows_at(s) * 32 for s in range(100)]  # 256, 256, 256, 512, ... then 1,024 tokens a step
  assert table.steps == int(np.searchsorted(np.cumsum(sizes), 10_000)) + 1  # more steps than 10,000 / 1,024
  assert table.steps > -(-10_000 // cfg.tokens_per_step)
  assert sum(sum(d.processed_tokens) for d in table.datasets.values()) == pytest.approx(10_000)
