"""Run a Markdown document's code as written, in order, in a fresh directory (README, docs/).

Blocks, top to bottom:

    <!-- test: run -->           the ```bash block after it runs in bash (-euo pipefail)
    <!-- test: write FILE -->    the block after it is written to FILE
    <!-- test: script -->        the ```python block after it runs alone, as the script FILE.py
                                 (Grain's worker processes import it: it needs its __main__ guard)
    ```python                    every other python block runs, all in one Python process, as a
                                 reader pasting them into one session, after `preamble` (what the
                                 document assumes its reader has: a mesh, a training step)

No XLA_FLAGS is set beforehand: the code must set up its own devices.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

from pipeline_fixtures import worker_env

BLOCK = re.compile(r"(?:<!-- test: (run|script|write \S+) -->\n)?```(\w+)\n(.*?)```", re.S)


def _environment() -> dict[str, str]:
  env = worker_env()
  env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
  return env


def run_markdown(path: str, directory: str, preamble: str = "", require_python: bool = True) -> int:
  """Runs `path`'s blocks in `directory`; returns how many blocks ran or were written."""
  env = _environment()
  python, done = [preamble] if preamble else [], 0
  for number, (marker, language, body) in enumerate(BLOCK.findall(open(path, encoding="utf-8").read())):
    if marker == "run":
      assert language == "bash", f"{path}: only bash blocks are run"
      out = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", body], cwd=directory, env=env, capture_output=True, text=True, timeout=300
      )
      assert out.returncode == 0, f"{path}: bash block failed:\n{body}\n{out.stdout[-2000:]}{out.stderr[-3000:]}"
    elif marker == "script":
      script = os.path.join(directory, f"block{number}.py")
      with open(script, "w") as f:
        f.write(body)
      out = subprocess.run(
        [sys.executable, script], cwd=directory, env=env, capture_output=True, text=True, timeout=300
      )
      assert out.returncode == 0, f"{path}: script block failed:\n{body}\n{out.stdout[-2000:]}{out.stderr[-3000:]}"
    elif marker.startswith("write "):
      with open(os.path.join(directory, marker.split(" ", 1)[1]), "w") as f:
        f.write(body)
    elif language == "python":
      python.append(body)
    else:
      continue
    done += 1
  if require_python:
    assert len(python) > bool(preamble), f"{path}: no python blocks found"
  if len(python) > bool(preamble):
    out = subprocess.run(
      [sys.executable, "-c", "\n".join(python)], cwd=directory, env=env, capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0, f"{path}: python blocks failed:\n{out.stdout[-2000:]}{out.stderr[-4000:]}"
  return done
