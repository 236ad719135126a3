"""The hostile-input campaign in CI: every kind gives a clear, named error
(never a hang, a silent success or a stray exception type); fuzzed configs
raise only ConfigError; edited checkpoint states are always refused."""

from __future__ import annotations

import copy
import json
import random
import subprocess

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import jaxdata
from hostile_cases import CASES, _pipeline_state, run_case
from jaxdata.cli import main

pytestmark = [pytest.mark.slow]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_every_hostile_input_gets_a_clear_named_error(case):
  outcome, detail = run_case(case)
  assert outcome == "clear", detail


def test_the_campaign_covers_at_least_25_kinds():
  assert len(CASES) >= 25 and len({c.name for c in CASES}) == len(CASES)


scalars = st.one_of(
  st.none(),
  st.booleans(),
  st.integers(-(2**70), 2**70),
  st.floats(allow_nan=True),
  st.text(max_size=8),
  st.sampled_from(
    [
      "auto",
      "global",
      "exact",
      "random",
      "tokens",
      "documents",
      "stop",
      "repeat",
      "first_fit",
      "concat",
      "none",
      "split",
    ]
  ),
)
values = st.recursive(
  scalars,
  lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.one_of(st.text(max_size=6), st.integers()), inner, max_size=3)
  ),
  max_leaves=8,
)
KEYS = [
  "datasets",
  "mixture",
  "seed",
  "shuffle_shards",
  "shuffle_within_shard",
  "shuffle_block_size",
  "reshuffle_on_repeat",
  "exhausted_policy",
  "max_repeats",
  "stop_after_passes",
  "packing",
  "batch",
  "stats_path",
  "allow_mixed_tokenizers",
]
dataset_entries = st.fixed_dictionaries(
  {"name": st.sampled_from(["a", "b"])},
  optional={k: values for k in ("path", "shuffle_block_size", "exhausted_policy", "max_repeats", "stop_after_passes")},
)
configs = st.fixed_dictionaries(
  {
    "datasets": st.one_of(st.lists(dataset_entries, max_size=3), values),
    "mixture": st.one_of(
      st.fixed_dictionaries({"weights": st.dictionaries(st.sampled_from(["a", "b"]), values)}), values
    ),
  },
  optional={
    **{k: values for k in KEYS[2:]},
    "packing": st.dictionaries(st.sampled_from(["mode", "seq_len", "pad_id", "warmup", "add_eos"]), values),
    "batch": st.dictionaries(st.sampled_from(["global_batch_size", "drop_remainder"]), values),
  },
)


@settings(max_examples=600, deadline=None)
@given(raw=st.one_of(configs, values))
def test_fuzzed_configs_raise_only_config_errors(raw):
  try:
    jaxdata.PipelineConfig.from_dict(raw)
  except jaxdata.ConfigError as e:
    assert len(str(e)) < 2000  # bounded, whatever the input


def test_every_edit_of_a_saved_state_is_refused(tmp_path):
  # 300 random edits of one field each (a value replaced, a key dropped or
  # added), without recomputing the digest: each must be a CheckpointError.
  # (0.1: 56 of 600 mutated states were accepted and gave different batches.)
  cfg, state = _pipeline_state(str(tmp_path))
  rng = random.Random(0)
  replacements = [None, -1, 0, 1, 2**40, 1.5, "x", "", [], {}, [1, 2], {"a": 1}, True]

  def paths(node, prefix=()):
    yield prefix
    if isinstance(node, dict):
      for key, child in node.items():
        yield from paths(child, (*prefix, key))

  fields = [p for p in paths(state) if p]
  with jaxdata.Pipeline(cfg, prefetch=0) as pipe:
    for _ in range(300):
      edited = copy.deepcopy(state)
      path = rng.choice(fields)
      parent = edited
      for key in path[:-1]:
        parent = parent[key]
      action = rng.random()
      if action < 0.1:
        del parent[path[-1]]
      elif action < 0.2:
        parent["extra"] = 1
      else:
        value = rng.choice(replacements)
        if json.dumps(parent[path[-1]]) == json.dumps(value):
          continue
        parent[path[-1]] = value
      with pytest.raises(jaxdata.CheckpointError):
        pipe.set_state(edited)
    pipe.set_state(state)  # the original still restores


def test_demo_refuses_a_cache_directory_of_user_files(tmp_path):
  # 0.1: `jaxdata demo --cache-dir DIR` deleted DIR (a user's thesis.txt and datasets/).
  (tmp_path / "thesis.txt").write_text("three years")
  (tmp_path / "datasets").mkdir()
  out = subprocess.run(["jaxdata", "demo", "--cache-dir", str(tmp_path)], capture_output=True, text=True, timeout=300)
  assert out.returncode == 1
  assert f"{tmp_path}: exists, is not empty and was not created by jaxdata demo" in " ".join(out.stderr.split())
  assert (tmp_path / "thesis.txt").read_text() == "three years" and (tmp_path / "datasets").is_dir()


def test_skip_invalid_skips_a_lone_surrogate_and_counts_it(tmp_path):
  src = tmp_path / "s.jsonl"
  src.write_text('{"text": "good"}\n{"text": "a\\ud800b"}\n{"text": "fine"}\n')
  assert main(["convert", str(src), "--out", str(tmp_path / "out"), "--name", "s", "-q", "--skip-invalid"]) == 0
  manifest = jaxdata.sources.Manifest.load(str(tmp_path / "out"))
  assert manifest.num_records == 2 and manifest.stats["skipped_invalid"] == 1
  assert "s.jsonl:2" in manifest.stats["invalid_examples"][0]
