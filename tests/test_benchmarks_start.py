"""Every benchmark the README lists starts as the README gives it (its --help: the imports and the
argument parser run), so moving a module a benchmark imports can never break one silently."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = open(os.path.join(REPO, "README.md"), encoding="utf-8").read()
# `python -m benchmarks.NAME` and `python benchmarks/NAME.py` as the README's benchmark block gives them
LISTED = sorted(
  set(re.findall(r"python -m (benchmarks(?:\.\w+)+)", README))
  | {f"benchmarks.{name}" for name in re.findall(r"python benchmarks/(\w+)\.py", README)}
)


def test_the_readme_lists_the_benchmarks():
  assert len(LISTED) >= 12 and "benchmarks.flat_throughput" in LISTED and "benchmarks.peers.run" in LISTED


@pytest.mark.slow  # several seconds: the everyday tier stays short
@pytest.mark.parametrize("module", LISTED)
def test_a_listed_benchmark_starts(module):
  done = subprocess.run([sys.executable, "-m", module, "--help"], cwd=REPO, capture_output=True, text=True, timeout=120)
  assert done.returncode == 0, f"{module} --help:\n{done.stderr[-2000:]}"
  assert "usage:" in done.stdout


def test_the_peers_benchmark_without_its_setup_says_which_command_to_run(tmp_path):
  missing = str(tmp_path / "no-venv" / "bin" / "python")
  done = subprocess.run(
    [sys.executable, "-m", "benchmarks.peers.run", "--sides", "megatron w0", "--megatron-python", missing],
    cwd=REPO,
    capture_output=True,
    text=True,
    timeout=120,
  )
  assert done.returncode != 0 and "Traceback" not in done.stderr
  assert done.stderr.strip().count("\n") == 0  # one line
  assert f"{missing} does not exist: set up that peer first" in done.stderr and "pip install -r" in done.stderr
