"""Epochs for fine-tuning loops: Pipeline(cfg, epoch=e) and set_epoch(e) start at pass e of every order."""

from __future__ import annotations

import numpy as np
import pytest

from jaxdata import Pipeline, PipelineConfig
from jaxdata.mixture.stream import DocumentStream
from jaxdata.pipeline.execution import StepMaking
from jaxdata.testing import wait_for_processes
from pipeline_fixtures import coded_config, decode, digest


@pytest.fixture()
def cfg(tmp_path):
  """Two datasets read once each (exhausted_policy stop), globally shuffled, one document per row."""
  rng = np.random.default_rng(5)
  return coded_config(
    tmp_path,
    [rng.integers(3, 12, 60).tolist(), rng.integers(3, 12, 40).tolist()],
    exhausted_policy="stop",
    shuffle_block_size="global",
    mixture={"weights": {"d0": 1, "d1": 1}, "interleave": "random"},
    packing={"mode": "none", "seq_len": 16},
    batch={"global_batch_size": 4, "drop_remainder": False},
  )


def epoch_documents(cfg, epoch: int) -> list[tuple[int, int]]:
  """(dataset, record) of every row of one epoch, in order."""
  with Pipeline(cfg, prefetch=0, epoch=epoch) as pipe:
    rows = np.concatenate([np.asarray(b["tokens"])[:, 0] for b in pipe])
  d, r, _ = decode(rows[rows > 0])
  return list(zip(d.tolist(), r.tolist()))


def single(cfg):
  raw = cfg.to_dict()
  raw.update(datasets=raw["datasets"][:1], mixture={"weights": {"d0": 1}})
  return PipelineConfig.from_dict(raw)


def test_two_epochs_are_two_different_complete_passes_and_each_reproduces(cfg):
  one = single(cfg)  # exhausted_policy stop: an epoch is one pass, then the loop rebuilds the pipeline
  first, second = epoch_documents(one, 0), epoch_documents(one, 1)
  assert sorted(first) == sorted(second) == [(0, r) for r in range(60)]  # every document once per epoch
  assert first != second  # in a fresh order
  assert epoch_documents(one, 1) == second  # reproducibly


def test_the_random_interleave_is_drawn_afresh_each_epoch(cfg):
  """Which dataset each row comes from differs between epochs too (the exact interleave is a fixed schedule)."""
  sources = [[d for d, _ in epoch_documents(cfg, epoch)][:30] for epoch in (0, 1)]
  assert sources[0] != sources[1]


def test_epoch_e_is_pass_e_of_the_keyed_order(cfg):
  """With repeat, epoch 1 starts where the dataset's pass 1 begins in epoch 0's stream."""

  raw = single(cfg).to_dict()
  raw.update(exhausted_policy="repeat")
  repeat = PipelineConfig.from_dict(raw)
  later = [r.record for _, r in zip(range(120), DocumentStream.open(repeat))]
  assert [r.record for _, r in zip(range(60), DocumentStream.open(repeat, epoch=1))] == later[60:]


def test_set_epoch_restarts_at_step_zero_of_that_epoch_and_the_state_carries_it(cfg):
  with Pipeline(cfg, prefetch=0) as pipe:
    next(pipe)
    pipe.set_epoch(1)
    assert pipe.epoch == 1 and pipe.get_state()["step"] == 0
    after_set = [digest(b) for b in pipe]
  with Pipeline(cfg, prefetch=0, epoch=1) as fresh:
    assert [digest(b) for b in fresh] == after_set
  with Pipeline(cfg, prefetch=0, epoch=1) as pipe:
    next(pipe)
    state = pipe.get_state()
    rest = [digest(b) for b in pipe]
  assert state["stream"]["epoch"] == 1
  with Pipeline(cfg, prefetch=0) as restored:  # built for epoch 0: the state's epoch wins
    restored.set_state(state)
    assert restored.epoch == 1 and [digest(b) for b in restored] == rest
  with pytest.raises(ValueError, match="epoch: expected an int >= 0"):
    Pipeline(cfg, prefetch=0).set_epoch(-1)


@pytest.mark.slow
@pytest.mark.multiprocess
def test_worker_processes_follow_the_epoch(cfg):
  with Pipeline(cfg, prefetch=0, epoch=2) as pipe:
    want = [digest(b) for b in pipe]
  with Pipeline(cfg, prefetch=0, epoch=2, making=StepMaking("process", reader_processes=1)) as pipe:
    wait_for_processes(pipe)
    assert [digest(b) for b in pipe] == want
