"""Per-step stats as a typed record: the stats file is the record's JSON, and files written before a
field existed (or by a later version) still read."""

from __future__ import annotations

import json

import pytest

from jaxdata import Pipeline
from jaxdata.errors import InputFormatError
from jaxdata.pipeline.step_stats import REQUIRED, StepStats
from jaxdata.tools.report import load_stats
from pipeline_fixtures import coded_config


def test_the_stats_file_is_each_records_json_and_reads_back_as_the_same_records(tmp_path):
  cfg = coded_config(tmp_path, [[5, 9, 3, 7] * 10, [4, 6, 8] * 12], seed=1, exhausted_policy="repeat")
  path = str(tmp_path / "stats.jsonl")
  with Pipeline(cfg, prefetch=0, stats_path=path) as pipe:
    for _ in range(5):
      next(pipe)
    last = pipe.stats()
  with open(path) as f:
    lines = [json.loads(line) for line in f]
  records = load_stats(path)
  assert [r.to_json() for r in records] == lines  # the same keys, in the same order, the same values
  assert [r.step for r in records] == [0, 1, 2, 3, 4]
  assert {k: v for k, v in last.items() if k != "time_total_s"} == lines[-1]
  assert "mixture_update" not in lines[0] and "trained_tokens_per_source" not in lines[0]  # only where they apply


def test_an_old_file_reads_with_defaults_and_a_later_versions_keys_are_ignored(tmp_path):
  old = {"step": 7, "tokens_per_source": {"a": 3}, "target_share": {"a": 1.0}, "share_batch": {"a": 1.0}}
  path = tmp_path / "old.jsonl"
  path.write_text(json.dumps({**old, "padding_fraction": 0.5, "from_the_future": 1}) + "\n")
  (record,) = load_stats(str(path))
  assert record == StepStats(
    7, tokens_per_source={"a": 3}, target_share={"a": 1.0}, share_batch={"a": 1.0}, padding_fraction=0.5
  )
  for key in REQUIRED:
    broken = tmp_path / f"no-{key}.jsonl"
    broken.write_text(json.dumps({k: v for k, v in {**old, "padding_fraction": 0.5}.items() if k != key}) + "\n")
    with pytest.raises(InputFormatError, match=rf"no-{key}.jsonl:1: stats record has no '{key}'"):
      load_stats(str(broken))
  (tmp_path / "list.jsonl").write_text("[1, 2]\n")
  with pytest.raises(InputFormatError, match="list.jsonl:1: a stats record is an object, got list"):
    load_stats(str(tmp_path / "list.jsonl"))
