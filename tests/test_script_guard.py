"""A script that converts raw inputs without `if __name__ == "__main__":` gets one clear last line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from pipeline_fixtures import worker_env

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def checkout_env() -> dict[str, str]:
  """The workers' environment, importing this checkout's jaxdata."""
  env = worker_env()
  env["PYTHONPATH"] = REPO + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
  return env


@pytest.mark.slow
@pytest.mark.multiprocess
def test_a_script_without_the_main_guard_is_told_to_add_it(tmp_path):
  (tmp_path / "raw").mkdir()
  for i in range(2):
    rows = [{"text": f"document {i} {j} " * 20} for j in range(200)]
    (tmp_path / "raw" / f"part-{i}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
  script = tmp_path / "train.py"
  script.write_text(
    textwrap.dedent(
      f"""
      import jaxdata
      cfg = jaxdata.PipelineConfig.from_dict({{
        "datasets": [{{"name": "web", "inputs": [{str(tmp_path / "raw" / "*.jsonl")!r}], "tokenizer": "byte",
                       "convert": {{"workers": 2, "unit_bytes": 65536}}}}],
        "mixture": {{"weights": {{"web": 1}}}},
        "packing": {{"seq_len": 64}},
        "batch": {{"global_batch_size": 2}},
        "cache_dir": {str(tmp_path / "cache")!r},
      }})
      with jaxdata.Pipeline(cfg, prefetch=0) as pipe:
        print(next(pipe)["tokens"].shape)
      """
    )
  )
  done = subprocess.run(
    [sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path, env=checkout_env(), timeout=240
  )
  assert done.returncode != 0
  last = done.stderr.strip().splitlines()[-1]
  assert last.startswith("jaxdata.errors.WorkerStartError: a conversion worker process died")
  assert 'if __name__ == "__main__":' in last
  guarded = script.read_text().replace("\nimport jaxdata\n", "\nimport jaxdata\nif __name__ == '__main__':\n")
  guarded = "\n".join(
    line if not line or line.startswith(("import", "if __name__")) else "  " + line for line in guarded.splitlines()
  )
  script.write_text(guarded)
  done = subprocess.run(
    [sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path, env=checkout_env(), timeout=240
  )
  assert done.returncode == 0, done.stderr[-2000:]
  assert "(2, 64)" in done.stdout
