"""The README's main command, `jaxdata demo`, on a fresh cache and on a reused one."""

from __future__ import annotations

import subprocess

import pydoc_data.topics

from jaxdata import TokenDataset
from jaxdata.demo import run_demo


def test_demo_builds_then_reuses_the_corpus(tmp_path):
  cache = tmp_path / "cache"
  out = subprocess.run(
      ["jaxdata", "demo", "--cache-dir", str(cache)], check=True, capture_output=True, text=True
  ).stdout
  assert "converted code" in out and "converted docs" in out
  assert "jaxdata datasets" in out
  with TokenDataset(str(cache / "docs")) as docs:
    assert docs.num_records == len(pydoc_data.topics.topics)
  logs: list[str] = []
  result = run_demo(str(cache), log=logs.append)
  assert logs == [f"reusing code dataset in {cache / 'code'}", f"reusing docs dataset in {cache / 'docs'}"]
  with TokenDataset(str(cache / "code")) as code, TokenDataset(str(cache / "docs")) as docs:
    assert result.records_read == code.num_records + docs.num_records
    assert result.tokens_read == code.num_tokens + docs.num_tokens
  first_topic = pydoc_data.topics.topics[sorted(pydoc_data.topics.topics)[0]]
  assert result.sample == first_topic[:120]
