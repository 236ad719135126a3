"""The README's and the training-loop guide's code runs as written, on a tiny corpus.

Blocks run in order in a fresh directory: a ```bash block after
`<!-- test: run -->` runs in bash, a block after `<!-- test: write FILE -->`
is written to FILE, and every ```python block runs, all in one Python
process (as a reader pasting them into one session), with no XLA_FLAGS set
beforehand: the code must set up its own devices.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from docs_runner import run_markdown
from pipeline_fixtures import worker_env

pytestmark = [pytest.mark.slow, pytest.mark.integration]

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORDS = "the quick brown fox jumps over a lazy dog while the code runs fast and well".split()


def write_corpus(directory: str) -> None:
  os.makedirs(os.path.join(directory, "corpus"))
  rng = np.random.default_rng(0)
  for name, count in (("web", 400), ("code", 200)):
    with open(os.path.join(directory, "corpus", f"{name}.jsonl"), "w") as f:
      for _ in range(count):
        f.write(json.dumps({"text": " ".join(rng.choice(WORDS, int(rng.integers(3, 80))))}) + "\n")


def test_readme_code_runs(tmp_path):
  write_corpus(str(tmp_path))
  run_markdown(os.path.join(REPO, "README.md"), str(tmp_path))
  assert (tmp_path / "run" / "checkpoints" / "3").is_dir()


def test_training_loop_guide_runs(tmp_path):
  write_corpus(str(tmp_path))
  env = {**worker_env(), "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")}
  for name in ("web", "code"):
    subprocess.run(
      ["jaxdata", "convert", f"corpus/{name}.jsonl", "--out", f"data/{name}", "--name", name, "-q"],
      cwd=tmp_path,
      env=env,
      check=True,
      capture_output=True,
    )
  run_markdown(os.path.join(REPO, "docs", "training-loop.md"), str(tmp_path))


@pytest.mark.parametrize(
  "document", ["README.md", "docs/configuration.md", "docs/order.md", "docs/state.md", "docs/training-loop.md"]
)
def test_documents_point_only_inside_the_repository(document):
  text = open(os.path.join(REPO, document), encoding="utf-8").read()
  assert "DESIGN" not in text and "../shared" not in text
  for link in re.findall(r"\]\(([^)#]+)", text):
    assert os.path.exists(os.path.join(REPO, os.path.dirname(document), link)), f"{document}: broken link {link}"
