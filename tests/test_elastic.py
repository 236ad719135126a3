"""Checkpoints across processes: SIGKILL mid-run, and resume onto other host counts."""

from __future__ import annotations

import os

import numpy as np
import pytest
import yaml

import crash_trials
from jaxdata import Pipeline, load_config
from pipeline_fixtures import free_port, rebuilt_batch, run_workers, write_coded_dataset
from vision_fixtures import write_vision_dataset

pytestmark = [pytest.mark.slow, pytest.mark.multiprocess]

WORKER = os.path.join(os.path.dirname(__file__), "support", "elastic_worker.py")
SAVE_AT = 3


def launch(count: int, devices: int, config: str, ckpt: str, out: str, mode: str, steps: int) -> None:
  port = free_port()
  run_workers(
    WORKER,
    [
      [str(port), str(count), str(i), str(devices), config, ckpt, out, mode, str(SAVE_AT), str(steps)]
      for i in range(count)
    ],
  )


@pytest.fixture(scope="module")
def config(tmp_path_factory) -> str:
  return crash_trials.write_config(str(tmp_path_factory.mktemp("elastic")))


def reference_batches(config: str, steps: int) -> list[dict[str, np.ndarray]]:
  with Pipeline(load_config(config), prefetch=0) as pipe:
    return [next(pipe) for _ in range(steps)]


@pytest.fixture(scope="module")
def vision_config(tmp_path_factory) -> str:
  """Image-text chats (0-2 images) under three budgets beside a text set, a schedule changing the weights."""
  root = tmp_path_factory.mktemp("elastic-vision")
  write_vision_dataset(str(root / "vision"))
  write_coded_dataset(str(root / "d0"), 0, np.random.default_rng(6).integers(1, 50, 90).tolist())
  path = str(root / "pipeline.yaml")
  with open(path, "w") as f:
    yaml.safe_dump(
      {
        "seed": 5,
        "datasets": [{"name": "vl", "path": "vision/vl"}, {"name": "d0", "path": "d0"}],
        "mixture": {"schedule": [{"until_step": 4, "weights": {"vl": 3, "d0": 1}}, {"weights": {"vl": 1, "d0": 1}}]},
        "exhausted_policy": "repeat",
        "allow_mixed_tokenizers": True,
        "packing": {"seq_len": 64, "images": {"max_patches": 80, "max_images": 2}},
        "batch": {"global_batch_size": 8},
      },
      f,
    )
  return path


@pytest.mark.parametrize("which", ["documents", "vision"])
def test_elastic_resume_from_two_processes_onto_one_and_four(config, vision_config, which, tmp_path):
  config = vision_config if which == "vision" else config
  ckpt = str(tmp_path / "ckpt")
  launch(2, 4, config, ckpt, str(tmp_path), "save", 0)
  expected = reference_batches(config, SAVE_AT + 4)[SAVE_AT:]
  for count, devices in ((1, 8), (4, 2)):
    out = tmp_path / f"resume{count}"
    out.mkdir()
    launch(count, devices, config, ckpt, str(out), "restore", 4)
    for step, batch in enumerate(expected):
      rebuilt = rebuilt_batch(out, count, step, batch)
      for name in batch:
        assert np.array_equal(rebuilt[name], batch[name]), (count, step, name)


@pytest.mark.parametrize("kill_after", [SAVE_AT, SAVE_AT + 1, SAVE_AT + 2, SAVE_AT + 3, SAVE_AT + 5])
def test_sigkill_then_resume_gives_the_uninterrupted_batches(config, tmp_path, kill_after):
  # Five trials: killed while saving (the step is logged just before the save),
  # then 1, 2, 3 and 5 steps after it. tests/support/crash_trials.py runs more.
  expected = crash_trials.digests(config, crash_trials.TOTAL)
  assert crash_trials.trial(config, expected, kill_after, str(tmp_path)) == ""
