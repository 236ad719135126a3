"""Grain interop: a Pipeline as a grain.IterDataset, checkpointed by Grain's own Orbax handler."""

from __future__ import annotations

import grain
import numpy as np
import orbax.checkpoint as ocp
import pytest
from absl import flags

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
  with pytest.raises(ValueError, match=r"mp_prefetch: .* use PipelineDataset\(cfg, workers=n\)"):
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
