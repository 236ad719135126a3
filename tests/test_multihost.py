"""Real `jax.distributed` processes on localhost: global batches and per-host reads."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import yaml

from jaxdata import Pipeline, load_config
from jaxdata.pipeline.planner import StepPlanner
from pipeline_fixtures import free_port, run_workers, write_coded_dataset

pytestmark = [pytest.mark.slow, pytest.mark.multiprocess]

WORKER = os.path.join(os.path.dirname(__file__), "support", "multihost_worker.py")
STEPS = 4


def run_processes(count: int, config: str, out_dir: str, workers: int = 0) -> None:
  port = free_port()
  run_workers(
    WORKER, [[str(port), str(count), str(i), config, out_dir, str(STEPS), str(workers)] for i in range(count)]
  )


def write_two_datasets(tmp_path) -> str:
  rng = np.random.default_rng(11)
  for d, count in enumerate((90, 40)):
    write_coded_dataset(str(tmp_path / f"d{d}"), d, rng.integers(1, 50, count).tolist())
  config = tmp_path / "pipeline.yaml"
  config.write_text(
    yaml.safe_dump(
      {
        "seed": 7,
        "datasets": [{"name": "d0", "path": "d0"}, {"name": "d1", "path": "d1"}],
        "mixture": {"weights": {"d0": 2, "d1": 1}},
        "shuffle_block_size": "global",
        "exhausted_policy": "repeat",
        "packing": {"mode": "best_fit", "seq_len": 32, "add_eos": True, "eos_id": 2},
        "batch": {"global_batch_size": 16},
      }
    )
  )
  return str(config)


def rebuilt_global_batches(out_dir, expected: list[dict]) -> dict[int, dict[int, set[int]]]:
  """Checks the processes' saved row blocks assemble to `expected`; returns
  the rows each process held, per step."""
  host_rows = {}
  for step in range(STEPS):
    rebuilt = {name: np.full_like(value, -999) for name, value in expected[step].items()}
    rows_of = {}
    for process in range(2):
      saved = np.load(out_dir / f"p{process}_step{step}.npz")
      rows_of[process] = set()
      for key in saved.files:
        name, start = key.split("/")
        block = saved[key]
        rebuilt[name][int(start) : int(start) + block.shape[0]] = block
        rows_of[process].update(range(int(start), int(start) + block.shape[0]))
    for name in expected[step]:
      assert np.array_equal(rebuilt[name], expected[step][name]), (step, name)
    assert rows_of[0].isdisjoint(rows_of[1]) and len(rows_of[0] | rows_of[1]) == 16
    host_rows[step] = rows_of
  return host_rows


def test_two_processes_build_the_single_process_global_batch(tmp_path):
  config = write_two_datasets(tmp_path)
  out_dir = tmp_path / "out"
  out_dir.mkdir()
  run_processes(2, config, str(out_dir))

  cfg = load_config(config)
  with Pipeline(cfg, prefetch=0) as reference:
    expected = [next(reference) for _ in range(STEPS)]
    expected_state = reference.get_state()
  plans = list(StepPlanner(cfg).plans(STEPS))
  host_rows = rebuilt_global_batches(out_dir, expected)
  # Each process read exactly the documents of its own rows, window by window
  # (the windows grow from one step; together they cover every step once).
  for process in range(2):
    reads = np.load(out_dir / f"p{process}_reads.npz")
    windows = sorted({tuple(map(int, key.split("/")[0].split("-"))) for key in reads.files})
    covered = [step for start, stop in windows for step in range(start, stop)]
    assert covered[:STEPS] == list(range(STEPS)) and windows[0] == (0, 1)
    for start, stop in windows:
      for d, name in enumerate(cfg.names):
        key = f"{start}-{stop}/{name}"
        got = reads[key].tolist() if key in reads.files else []
        wanted = set()
        for step in range(start, min(stop, STEPS)):
          plan = plans[step]
          mine = plan.pieces.take(plan.in_rows(np.array(sorted(host_rows[step][process]))))
          wanted |= set(mine.record[mine.dataset == d].tolist())
        if stop <= STEPS:
          assert got == sorted(wanted), (start, stop, process, name)
  for process in range(2):
    state = json.loads((out_dir / f"p{process}_state.json").read_text())
    assert state == expected_state  # identical on every host


@pytest.mark.parametrize("workers", [1, -1])  # -1: planner_process=True
def test_two_processes_with_worker_processes_build_the_same_global_batch(tmp_path, workers):
  """Each host's worker assembles exactly that host's rows (taken from the mesh);
  with only a planner process, each host plans in it and assembles its rows itself."""
  config = write_two_datasets(tmp_path)
  out_dir = tmp_path / "out"
  out_dir.mkdir()
  run_processes(2, config, str(out_dir), workers=workers)
  cfg = load_config(config)
  with Pipeline(cfg, prefetch=0) as reference:
    expected = [next(reference) for _ in range(STEPS)]
    expected_state = reference.get_state()
  rebuilt_global_batches(out_dir, expected)
  for process in range(2):
    assert json.loads((out_dir / f"p{process}_state.json").read_text()) == expected_state
