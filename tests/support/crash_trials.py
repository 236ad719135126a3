"""SIGKILL / resume trials: kill a training process at a chosen step (possibly
mid-save), restart it, and compare the exact sequence of batch digests with
an uninterrupted run. Used by tests/test_elastic.py (5 trials in CI) and
runnable on its own for more:

    python tests/support/crash_trials.py --trials 20
"""

from __future__ import annotations

import argparse
import hashlib
import os
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np
import yaml

import jaxdata

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pipeline_fixtures import worker_env, write_coded_dataset  # after the path insert

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "elastic_worker.py")
SAVE_AT = 3
TOTAL = 12


def write_config(directory: str) -> str:
  rng = np.random.default_rng(4)
  for d, count in enumerate((120, 70)):
    write_coded_dataset(os.path.join(directory, f"d{d}"), d, rng.integers(1, 50, count).tolist())
  path = os.path.join(directory, "pipeline.yaml")
  with open(path, "w") as f:
    yaml.safe_dump(
      {
        "seed": 3,
        "datasets": [
          {"name": "d0", "path": "d0", "open_shards": 3},
          {"name": "d1", "path": "d1", "shuffle_within_shard": True},
        ],
        "mixture": {"schedule": [{"until_step": 5, "weights": {"d0": 1, "d1": 1}}, {"weights": {"d0": 3, "d1": 1}}]},
        "shuffle_block_size": "auto",
        "exhausted_policy": "repeat",
        "packing": {"mode": "first_fit", "seq_len": 32, "add_bos": True, "bos_id": 1},
        "batch": {"global_batch_size": 16},
      },
      f,
    )
  return path


def digests(config: str, steps: int) -> list[str]:
  """The uninterrupted run's batch digests (one process, NumPy output: the
  same bytes as the worker's global arrays)."""
  with jaxdata.Pipeline(jaxdata.load_config(config), prefetch=0) as pipe:
    return [
      hashlib.sha256(b"".join(np.asarray(b[k]).tobytes() for k in sorted(b))).hexdigest()
      for b in (next(pipe) for _ in range(steps))
    ]


def run_jobs(config: str, work: str, steps: int) -> subprocess.Popen:
  return subprocess.Popen(
    [
      sys.executable,
      WORKER,
      "0",
      "1",
      "0",
      "8",
      config,
      os.path.join(work, "ckpt"),
      work,
      "run",
      str(SAVE_AT),
      str(steps),
    ],
    env=worker_env(),
    stdout=subprocess.PIPE,
    stderr=subprocess.STDOUT,
  )


def trial(config: str, expected: list[str], kill_after: int, work: str) -> str:
  """Kills the run once `kill_after` steps are logged (kill_after == SAVE_AT:
  while it saves), restarts it, and returns "" or what went wrong."""
  log = os.path.join(work, "digests.txt")
  proc = run_jobs(config, work, 10_000)
  deadline = time.time() + 240
  while time.time() < deadline and proc.poll() is None:
    if os.path.exists(log) and len(open(log).read().splitlines()) >= kill_after:
      break
    time.sleep(0.005)
  proc.send_signal(signal.SIGKILL)
  proc.wait()
  if proc.returncode != -signal.SIGKILL:
    return f"worker did not run until the kill: {proc.stdout.read()[-2000:]!r}"
  before = [line.split() for line in open(log).read().splitlines()]
  open(log, "w").close()
  resumed = run_jobs(config, work, TOTAL)
  output = resumed.communicate(timeout=300)[0]
  if resumed.returncode != 0:
    return f"restart failed: {output[-2000:]!r}"
  after = [line.split() for line in open(log).read().splitlines()]
  start = int(after[0][0]) - 1 if after else TOTAL
  if start not in (0, SAVE_AT):  # the checkpoint, or from scratch if killed before it was complete
    return f"resumed after step {start}"
  if [int(s) for s, _ in after] != list(range(start + 1, TOTAL + 1)):
    return "steps after the restart are not consecutive"
  if [d for _, d in before] != expected[: len(before)] or [d for _, d in after] != expected[start:]:
    return "batches differ from the uninterrupted run"
  return ""


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--trials", type=int, default=20)
  args = parser.parse_args()
  with tempfile.TemporaryDirectory() as root:
    config = write_config(root)
    expected = digests(config, TOTAL)
    failures = 0
    for i in range(args.trials):
      work = tempfile.mkdtemp(dir=root)
      kill_after = SAVE_AT + i % 6  # at the save (mid-save), then 1..5 steps after it
      problem = trial(config, expected, kill_after, work)
      failures += bool(problem)
      print(f"trial {i}: killed after {kill_after} logged steps: {problem or 'identical batches'}", flush=True)
    print(f"{args.trials} trials, {failures} with divergent, missing or repeated batches")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
  main()
