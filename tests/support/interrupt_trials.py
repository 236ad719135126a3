"""Ctrl-C trials: SIGINT sent to a training loop's whole process group at random moments, as a
terminal sends it, and the batches the loop got compared with the uninterrupted order.

The loop runs in a process (and process group) of its own, beside the planner and reader processes
its `StepMaking` starts. A thread in it sends SIGINT to the group after random gaps (a third of them
short: two Ctrl-Cs in a row). The loop catches each `KeyboardInterrupt` and calls `next()` again, as
a notebook user re-running an interrupted cell does. What is checked: the batches got are the
reference order exactly (none skipped, none repeated), and no call hangs.

Python runs a signal's handler in the main thread between two bytecodes. One that lands in the loop's
own code after `next()` returned (or before it is called) is the loop's, not the pipeline's: there a
`KeyboardInterrupt` would drop a batch `next()` already handed out, as it would for any iterator. The
handler here raises only where the interrupted frame is inside `next()` (jaxdata's code or what it
called) and counts the others apart. Used by tests/test_interrupt_trials.py and runnable on its own:

    python tests/support/interrupt_trials.py --making process --prefetch 2 --trials 5
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from types import FrameType
from typing import Any

import numpy as np

SUPPORT = os.path.dirname(os.path.abspath(__file__))
MAKINGS = {"here": ("here", 0), "process": ("process", 0), "readers": ("process", 1)}
TRIAL_TIMEOUT_S = 240  # a trial runs ~10-30 s; past this it hangs


def write_config(directory: str) -> dict[str, Any]:
  """Two coded datasets of random lengths, packed into 16 rows of 32 over a repeating stream."""
  sys.path.insert(0, SUPPORT)
  from pipeline_fixtures import write_coded_dataset  # noqa: PLC0415 -- the tests' helpers, on the path just set

  rng = np.random.default_rng(5)
  for d, count in enumerate((300, 200)):
    write_coded_dataset(os.path.join(directory, f"d{d}"), d, rng.integers(1, 60, count).tolist())
  return {
    "seed": 11,
    "datasets": [{"name": f"d{d}", "path": os.path.join(directory, f"d{d}")} for d in range(2)],
    "mixture": {"weights": {"d0": 2, "d1": 1}},
    "shuffle_block_size": "global",
    "exhausted_policy": "repeat",
    "packing": {"mode": "first_fit", "seq_len": 32, "bos_id": 1, "eos_id": 0, "add_bos": True},
    "batch": {"global_batch_size": 16},
  }


def run_trial(config: dict[str, Any], making: str, prefetch: int, seed: int, steps: int, interrupts: int) -> dict:
  """Runs one trial in a new process group; its report, or {"hung": True} past TRIAL_TIMEOUT_S."""
  with tempfile.TemporaryDirectory() as work:
    out = os.path.join(work, "report.json")
    arguments = [json.dumps(config), making, str(prefetch), str(seed), str(steps), str(interrupts), out]
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "JAX_PLATFORMS")}
    child = subprocess.Popen(
      [sys.executable, os.path.abspath(__file__), "--child", *arguments],
      env=env,
      start_new_session=True,  # its own process group: the SIGINTs reach it and its workers, not us
      stdout=subprocess.PIPE,
      stderr=subprocess.STDOUT,
    )
    try:
      output = child.communicate(timeout=TRIAL_TIMEOUT_S)[0].decode(errors="replace")
    except subprocess.TimeoutExpired:
      os.killpg(child.pid, signal.SIGKILL)
      child.communicate()
      return {"hung": True, "output": ""}
    if child.returncode != 0 or not os.path.exists(out):
      return {"failed": child.returncode, "output": output[-4000:]}
    with open(out) as f:
      return json.load(f)


def _digest(batch: dict[str, Any]) -> str:
  return hashlib.sha256(b"".join(np.asarray(batch[k]).tobytes() for k in sorted(batch))).hexdigest()[:16]


class _Interrupts:
  """SIGINT to the process group after random gaps; the handler raises only inside `next()`."""

  def __init__(self, loop_code: Any, seed: int, count: int, step_s: float) -> None:
    self.loop_code = loop_code
    self.rng = np.random.default_rng(seed)
    self.count, self.step_s = count, step_s
    self.raised = self.outside = 0
    self.where: list[str] = []  # each raise's innermost frames, for a failure's report
    self.done = threading.Event()
    self.package = os.path.dirname(os.path.abspath(__import__("jaxdata").__file__))

  def handler(self, _signum: int, frame: FrameType | None) -> None:
    innermost = frame
    while frame is not None and frame.f_code is not self.loop_code:
      if frame.f_code.co_filename.startswith(self.package):
        self.raised += 1
        self.where.append(_frames(innermost, self.loop_code))
        raise KeyboardInterrupt
      frame = frame.f_back
    self.outside += 1

  def send(self) -> None:
    for _ in range(self.count):
      short = self.rng.random() < 1 / 3
      gap = self.rng.uniform(0, self.step_s / 10 if short else 3 * self.step_s)
      if self.done.wait(gap):
        return
      os.killpg(os.getpgrp(), signal.SIGINT)
    self.done.set()


def _frames(frame: FrameType | None, stop: Any) -> str:
  names = []
  while frame is not None and frame.f_code is not stop:
    names.append(f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno} {frame.f_code.co_name}")
    frame = frame.f_back
  return " < ".join(names[:4])


def child(config_json: str, making: str, prefetch: int, seed: int, steps: int, count: int, out: str) -> None:
  os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
  import jax  # noqa: PLC0415 -- after the device count is set

  import jaxdata  # noqa: PLC0415 -- after jax's settings

  cfg = jaxdata.PipelineConfig.from_dict(json.loads(config_json))
  mesh = jax.make_mesh((4, 2), ("data", "model"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
  started = time.perf_counter()
  with jaxdata.Pipeline(cfg, mesh=mesh, prefetch=0, making="here") as pipe:
    reference = [_digest(next(pipe)) for _ in range(steps)]
  step_s = (time.perf_counter() - started) / steps
  planning, readers = MAKINGS[making]
  pipe = jaxdata.Pipeline(
    cfg, mesh=mesh, prefetch=prefetch, making=jaxdata.StepMaking(planning, reader_processes=readers)
  )
  got: list[str] = []

  def loop() -> None:
    while len(got) < steps:
      try:
        got.append(_digest(next(pipe)))
      except KeyboardInterrupt:
        interrupts.where[-1:] = [f"{len(got)}: {w}" for w in interrupts.where[-1:]]
        continue

  interrupts = _Interrupts(loop.__code__, seed, count, step_s)
  signal.signal(signal.SIGINT, interrupts.handler)
  sender = threading.Thread(target=interrupts.send, daemon=True)
  sender.start()
  loop()
  interrupts.done.set()
  sender.join()
  signal.signal(signal.SIGINT, signal.SIG_IGN)  # one still on its way must not cut the report short
  pipe.close()
  index = {digest: i for i, digest in enumerate(reference)}
  report = {"got": [index.get(d, -1) for d in got], "raised": interrupts.raised, "outside": interrupts.outside}
  report["where"] = interrupts.where
  with open(out, "w") as f:
    json.dump(report, f)


def main() -> None:
  if sys.argv[1:2] == ["--child"]:
    config, making, prefetch, seed, steps, count, out = sys.argv[2:]
    child(config, making, int(prefetch), int(seed), int(steps), int(count), out)
    return
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--making", choices=sorted(MAKINGS), default="here")
  parser.add_argument("--prefetch", type=int, default=2)
  parser.add_argument("--trials", type=int, default=3)
  parser.add_argument("--first-seed", type=int, default=0)
  parser.add_argument("--steps", type=int, default=60)
  parser.add_argument("--interrupts", type=int, default=40)
  args = parser.parse_args()
  with tempfile.TemporaryDirectory() as directory:
    config = write_config(directory)
    for seed in range(args.first_seed, args.first_seed + args.trials):
      report = run_trial(config, args.making, args.prefetch, seed, args.steps, args.interrupts)
      print(seed, json.dumps(report))


if __name__ == "__main__":
  main()
