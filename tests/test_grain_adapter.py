"""Grain interop: a Pipeline as a grain.IterDataset, checkpointed by Grain's own Orbax handler."""

from __future__ import annotations

import grain
import numpy as np
import orbax.checkpoint as ocp
import pytest
from absl import flags

from checkpoint_property import assert_restores_exactly
from jaxdata import ConfigError
from jaxdata.integrations.grain import PipelineDataset
from jaxdata.integrations.grain_mixture import MixtureDataset
from pipeline_fixtures import coded_config


def test_grain_transforms_and_checkpoint_handler_work_on_the_pipeline(tmp_path):
  rng = np.random.default_rng(2)
  cfg = coded_config(
    tmp_path, [rng.integers(1, 40, 60).tolist(), rng.integers(1, 30, 40).tolist()], exhausted_policy="repeat"
  )
  dataset = PipelineDataset(cfg, prefetch=1).map(lambda batch: batch["tokens"].sum(axis=1))
  assert isinstance(dataset, grain.IterDataset)
  reference = iter(PipelineDataset(cfg, prefetch=0))
  expected = [next(reference)["tokens"].sum(axis=1) for _ in range(8)]

  iterator = iter(dataset)
  first = [next(iterator) for _ in range(3)]
  assert all(np.array_equal(a, b) for a, b in zip(first, expected[:3]))
  manager = ocp.CheckpointManager(tmp_path / "ckpt")
  manager.save(3, args=ocp.args.Composite(data=grain.checkpoint.CheckpointSave(iterator)))
  manager.wait_until_finished()
  next(iterator)  # moves on after the save; the checkpoint must not see it

  restored = iter(dataset)
  manager.restore(3, args=ocp.args.Composite(data=grain.checkpoint.CheckpointRestore(restored)))
  rest = [next(restored) for _ in range(5)]
  assert all(np.array_equal(a, b) for a, b in zip(rest, expected[3:]))
  manager.close()


def test_grain_worker_processes_are_refused_naming_jaxdatas_own(tmp_path):
  cfg = coded_config(tmp_path, [[5, 9, 3] * 10])
  dataset = PipelineDataset(cfg, prefetch=0)
  with pytest.raises(
    ValueError, match=r"mp_prefetch: .* use PipelineDataset\(cfg, making=StepMaking\('process', reader_processes=n\)\)"
  ):
    dataset.mp_prefetch(grain.MultiprocessingOptions(num_workers=2))
  flags.FLAGS.mark_as_parsed()  # Grain's workers read absl flags; outside absl.app.run nobody parses them
  # After a transform Grain builds mp_prefetch lazily: the first next() pickles the chain for its workers,
  # which is refused here, in the caller (a ValueError, not a worker's error), before a worker starts.
  with pytest.raises(ValueError, match=r"^PipelineDataset.mp_prefetch: Grain's worker processes slice"):
    next(iter(dataset.map(len).mp_prefetch(grain.MultiprocessingOptions(num_workers=2))))
  mixture = MixtureDataset(cfg)
  with pytest.raises(ValueError, match=r"^MixtureDataset.mp_prefetch: Grain's worker processes slice"):
    mixture.mp_prefetch(grain.MultiprocessingOptions(num_workers=2))
  with pytest.raises(ValueError, match=r"^MixtureDataset.mp_prefetch: Grain's worker processes slice"):
    next(iter(mixture.map(len).mp_prefetch(grain.MultiprocessingOptions(num_workers=2))))


class _Steered:
  """A MixtureDataset iterator and the loop's position (how many documents it handed out): its
  state is both, so that the loop's later updates are made at the same positions after a restore."""

  def __init__(self, cfg) -> None:
    self.iterator, self.position = iter(MixtureDataset(cfg, dataset_ids=True)), 0

  def get_state(self) -> dict:
    return {"iterator": self.iterator.get_state(), "position": self.position}

  def set_state(self, state: dict) -> None:
    self.iterator.set_state(state["iterator"])
    self.position = state["position"]


def test_the_mixture_dataset_takes_updates_at_their_step_and_every_state_restores_them(tmp_path):
  cfg = coded_config(tmp_path, [[5] * 300, [7] * 300], exhausted_policy="repeat", mixture={"update_lag_steps": 2})
  updates = {3: {"d0": 1, "d1": 0}, 60: {"d0": 0, "d1": 1}}
  returned = {}

  def advance(steered: _Steered, count: int) -> list[tuple[int, bytes]]:
    out = []
    for _ in range(count):
      if steered.position in updates:
        returned[steered.position] = steered.iterator.update_mixture(updates[steered.position])
      document = next(steered.iterator)
      out.append((int(document["dataset_ids"][0]), document["tokens"].tobytes()))
      steered.position += 1
    return out

  assert_restores_exactly(lambda: _Steered(cfg), advance, 120, range(0, 120, 7))
  documents = advance(_Steered(cfg), 120)
  # a step is 4 rows x 16 tokens; ~10 documents of 5 and 7 tokens each (+ EOS): each update takes
  # effect 2 steps after the step of the next document, then only its dataset's documents come
  assert returned[3] == 2 and {d for d, _ in documents[30:60]} == {0}
  assert {d for d, _ in documents[100:120]} == {1} and returned[60] == 6  # document 60 starts in step 4
  steered = _Steered(cfg)
  advance(steered, 5)  # the chunk being handed out holds the documents of step 0 (drawn)
  with pytest.raises(ValueError, match=r"at_step: 0 already has documents taken; the next step is 1"):
    steered.iterator.update_mixture({"d0": 1, "d1": 1}, at_step=0)
  with pytest.raises(ValueError, match=r"at_step: must be an int, got 2.5"):
    steered.iterator.update_mixture({"d0": 1, "d1": 1}, at_step=2.5)
  with pytest.raises(ConfigError, match=r"weight of 'd0'"):
    steered.iterator.update_mixture({"d0": -1, "d1": 1})
  ended = iter(MixtureDataset(coded_config(tmp_path / "once", [[5] * 20, [7] * 20], stop_after_passes=1)))
  assert len(list(ended)) >= 40  # each dataset once (the first to finish repeats until the other does)
  with pytest.raises(ValueError, match=r"update_mixture: the stream ended"):
    ended.update_mixture({"d0": 1, "d1": 1})
