"""Config dataclasses and `load_config`: the example YAML of docs/configuration.md, validation errors that name the field."""

from __future__ import annotations

import json
import math
import pickle
import textwrap

import pytest

from jaxdata import ConfigError, PipelineConfig, load_config
from jaxdata.config import schema
from jaxdata.config.schedule import normalize_weights

EXAMPLE_YAML = """
seed: 1234
datasets:
  - name: web
    path: data/web                 # a dataset directory written by `jaxdata convert`
    shuffle_block_size: auto
  - name: code
    path: data/code
    exhausted_policy: repeat
    max_repeats: 2
    reshuffle_on_repeat: true
mixture:
  unit: tokens
  interleave: exact
  weights: {web: 0.75, code: 0.25}
stop_after_passes: 1               # top-level values are defaults for every dataset
packing: {mode: first_fit, seq_len: 2048, long_docs: split, add_eos: true, eos_id: 0}
batch: {global_batch_size: 256, drop_remainder: true}
"""


def write(tmp_path, text: str) -> str:
  path = tmp_path / "pipeline.yaml"
  path.write_text(textwrap.dedent(text))
  return str(path)


def test_example_config_loads(tmp_path):
  cfg = load_config(write(tmp_path, EXAMPLE_YAML))
  assert cfg.seed == 1234
  assert cfg.names == ("web", "code")
  assert cfg.datasets[0].path == str(tmp_path / "data" / "web")  # relative to the YAML file
  assert cfg.packing.seq_len == 2048 and cfg.packing.add_eos
  assert cfg.batch.global_batch_size == 256
  web, code = cfg.dataset_settings()
  assert web.block_size == "auto" and web.shuffle_shards and not web.shuffle_within_shard
  assert (web.policy, web.target_passes) == ("passes", 1)
  assert (code.policy, code.max_passes, code.block_size) == ("repeat", 3, "global")  # the default mixes
  assert cfg.schedule.weights_at(0) == (0.75, 0.25)


def test_schedule_from_yaml(tmp_path):
  cfg = load_config(
    write(
      tmp_path,
      """
      datasets: [{name: a}, {name: b}]
      mixture:
        schedule:
          - {until_step: 100, weights: {a: 1, b: 0}}
          - {until_step: 200, weights: {a: 1, b: 1}, ramp_steps: 10}
          - {weights: {a: 0, b: 1}}
      exhausted_policy: repeat
  """,
    )
  )
  s = cfg.schedule
  assert s.weights_at(99) == (1.0, 0.0)
  assert s.weights_at(110) == (0.5, 0.5) and s.weights_at(105)[1] == pytest.approx(6 / 11 * 0.5)
  assert s.weights_at(109)[1] == pytest.approx(10 / 11 * 0.5)
  assert s.weights_at(200) == (0.0, 1.0)
  assert s.constant_from == 200


def test_paths_in_a_yaml_file_are_relative_to_it_except_remote_ones(tmp_path):
  cfg = load_config(
    write(
      tmp_path,
      """
      datasets: [{name: a, path: data/a}, {name: b, path: "gs://bucket/corpora/b"}]
      mixture: {weights: {a: 1, b: 1}}
      cache_dir: cache
      stats_path: run/stats.jsonl
  """,
    )
  )
  assert [d.path for d in cfg.datasets] == [str(tmp_path / "data/a"), "gs://bucket/corpora/b"]
  assert (cfg.cache_dir, cfg.stats_path) == (str(tmp_path / "cache"), str(tmp_path / "run/stats.jsonl"))


@pytest.mark.parametrize(
  "body, message",
  [
    ("datasets: [{name: a}]\nmixture: {weights: {a: 1}}\nsed: 3", "config: unknown key 'sed'"),
    (
      "datasets: [{name: a, shufle_shards: true}]\nmixture: {weights: {a: 1}}",
      r"datasets\[0\]: unknown key 'shufle_shards'",
    ),
    (
      "datasets: [{name: a}]\nmixture: {weights: {a: 1}, unit: bytes}",
      "mixture.unit: 'bytes' is not one of tokens, documents",
    ),
    ("datasets: [{name: a}, {name: a}]\nmixture: {weights: {a: 1}}", "name 'a' is used more than once"),
    ("datasets: [{name: a}, {name: b}]\nmixture: {weights: {a: 1}}", "'b' has no weight"),
    ("datasets: [{name: a}]\nmixture: {weights: {a: 1, c: 2}}", "'c' is not one of 'a'"),
    ("datasets: [{name: a}, {name: b}]\nmixture: {weights: {a: -1, b: 2}}", "weight of 'a' must be >= 0, got -1"),
    ("datasets: [{name: a}, {name: b}]\nmixture: {weights: {a: .nan, b: 2}}", "weight of 'a' must be finite"),
    ("datasets: [{name: a}, {name: b}]\nmixture: {weights: {a: 0, b: 0}}", "positive sum"),
    ("datasets: [{name: a}]\nmixture: {weights: {a: yes}}", "weight of 'a' must be a number"),
    ("datasets: [{name: a}]\nmixture: {weights: {a: 1}}\nshuffle_block_size: -4", "shuffle_block_size: expected null"),
    ("datasets: [{name: a}]\nmixture: {weights: {a: 1}}\npacking: {mode: greedy}", "packing.mode: 'greedy'"),
    ("datasets: [{name: a}]\nmixture: {weights: {a: 1}}\nbatch: {global_batch_size: 0}", "batch.global_batch_size"),
    (
      "datasets: [{name: a}]\nmixture: {weights: {a: 1}, schedule: [{weights: {a: 1}}]}",
      "exactly one of weights or schedule",
    ),
    (
      "datasets: [{name: a}]\nmixture: {schedule: [{weights: {a: 1}}, {until_step: 5, weights: {a: 1}}]}",
      r"schedule\[0\].until_step: every phase but the last",
    ),
    (
      "datasets: [{name: a}]\nmixture: {schedule: [{until_step: 5, weights: {a: 1}}, {until_step: 9, weights: {a: 1}}]}",
      r"schedule\[1\].until_step: the last phase runs to the end",
    ),
    (
      "datasets: [{name: a}]\nmixture: {schedule: [{until_step: 5, weights: {a: 1}}, {until_step: 3, weights: {a: 1}}, {weights: {a: 1}}]}",
      "3 must be greater than the phase start 5",
    ),
    ("datasets: [{name: a}]\nmixture: {weights: {a: 1}}\nmax_repeats: -1", "max_repeats: expected an int >= 0"),
    (
      "datasets: [{name: a}]\nmixture: {weights: {a: 1}}\nexhausted_policy: {a: forever}",
      "exhausted_policy.a: 'forever'",
    ),
    ("datasets: []\nmixture: {weights: {}}", "at least one dataset"),
    ("mixture: {weights: {a: 1}}", "missing 'datasets'"),
  ],
)
def test_invalid_configs_name_the_offender(tmp_path, body, message):
  path = write(tmp_path, body)
  with pytest.raises(ConfigError, match=message) as info:
    load_config(path)
  assert str(path) in str(info.value)


def test_yaml_is_loaded_safely_and_syntax_errors_name_the_file(tmp_path):
  path = write(tmp_path, "datasets: !!python/object/apply:os.system ['echo pwned']\nmixture: {}")
  with pytest.raises(ConfigError, match="not valid YAML"):
    load_config(path)
  path = write(tmp_path, "datasets: [unclosed")
  with pytest.raises(ConfigError, match=r"pipeline\.yaml: not valid YAML"):
    load_config(path)


def test_weights_normalise_without_overflow():
  assert normalize_weights({"a": 1e308, "b": 1e308}, ["a", "b"]) == (0.5, 0.5)
  w = normalize_weights({"a": 1, "b": 2, "c": 7}, ["a", "b", "c"])
  assert math.fsum(w) == pytest.approx(1.0, abs=1e-15) and w[2] == pytest.approx(0.7)


def test_dataclasses_validate_directly():
  with pytest.raises(ConfigError, match="datasets.x.max_repeats"):
    PipelineConfig.from_dict({"datasets": [{"name": "x", "max_repeats": 1.5}], "mixture": {"weights": {"x": 1}}})


SCHEDULED_YAML = """
datasets:
  - {name: a, path: /data/a, shuffle_block_size: global, exhausted_policy: repeat}
  - {name: b, path: /data/b}
mixture:
  schedule:
    - {until_step: 100, weights: {a: 0.9, b: 0.1}}
    - {weights: {a: 0.5, b: 0.5}}
shuffle_block_size: 64
stats_path: /tmp/stats.jsonl
packing: {mode: best_fit, seq_len: 512, add_bos: true, warmup: [{until_step: 10, seq_len: 128}]}
batch: {global_batch_size: 16}
"""


@pytest.mark.parametrize("text", [EXAMPLE_YAML, SCHEDULED_YAML])
def test_to_dict_reads_back_to_the_same_config(tmp_path, text):
  """Worker processes get the config this way: it must survive JSON exactly,
  unset per-dataset fields included (they must still inherit)."""
  cfg = load_config(write(tmp_path, text))
  again = PipelineConfig.from_dict(json.loads(json.dumps(cfg.to_dict())))
  assert again == cfg
  assert again.dataset_settings() == cfg.dataset_settings()
  assert "shuffle_block_size" not in again.to_dict()["datasets"][1]  # still inherits


def test_a_pickled_config_still_inherits(tmp_path):
  """Pickled configs (Grain pickles datasets for its worker processes) keep
  unset per-dataset fields unset: INHERIT unpickles to itself."""
  cfg = load_config(write(tmp_path, SCHEDULED_YAML))
  again = pickle.loads(pickle.dumps(cfg))
  assert again == cfg and again.dataset_settings() == cfg.dataset_settings()
  assert again.datasets[1].shuffle_block_size is schema.INHERIT


def test_a_weight_too_large_for_a_float_is_named_by_its_size():
  from fractions import Fraction  # noqa: PLC0415 -- only this test gives exact weights

  from jaxdata.config.validate import weight  # noqa: PLC0415

  for huge, bits in ((10**400, 1329), (Fraction(10**400, 3), 1328)):
    with pytest.raises(ConfigError, match=rf"w must be finite, got an int of {bits} bits"):
      weight(huge, "w")
