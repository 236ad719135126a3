"""TPU slice configs, `jaxdata mesh`, and pipelines built from a slice name."""

from __future__ import annotations

import argparse
import math

import numpy as np
import pytest
import yaml

from jaxdata import ConfigError, Pipeline
from jaxdata.cli import build_parser, main
from jaxdata.pipeline.slices import available_slices, explicit_slice, load_slice
from pipeline_fixtures import coded_config

REQUIRED = {"v4-8", "v4-32", "v5e-8", "v5e-256", "v5p-8", "v5p-128", "v6e-8", "v6e-256", "cpu-8", "cpu-2x4"}


def test_every_slice_file_loads_and_multiplies_out():
  assert REQUIRED <= set(available_slices())
  for name in available_slices():
    spec = load_slice(name)
    assert math.prod(spec.mesh_shape) == spec.chips == spec.hosts * spec.chips_per_host
    assert sum(spec.data_shards_per_host()) * (spec.chips // spec.data_parallel) == spec.chips


def test_rows_per_host_and_the_divisibility_error():
  spec = load_slice("v5p-128")
  assert spec.rows_per_host(1024) == 1024 // 16
  with pytest.raises(
    ConfigError, match="global batch 1000 does not divide over the 64 data-parallel shards of v5p-128"
  ):
    spec.rows_per_host(1000)
  with pytest.raises(ConfigError, match="no slice 'v9-1'; built in: .*v5p-128.*; or give a slice YAML file's path"):
    load_slice("v9-1")


def test_the_table_covers_the_families_at_their_usual_sizes():
  names = set(available_slices())
  for family, sizes in (
    ("v4", (8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)),
    ("v5p", (8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 12288)),
    ("v5e", (1, 4, 8, 16, 32, 64, 128, 256)),
    ("v6e", (1, 4, 8, 16, 32, 64, 128, 256)),
  ):
    assert {f"{family}-{n}" for n in sizes} <= names, family
  v5p = load_slice("v5p-1024")  # TensorCores in the name: 512 chips, 128 hosts of 4
  assert (v5p.chips, v5p.hosts, v5p.chips_per_host, v5p.topology, v5p.mesh_shape) == (512, 128, 4, "8x8x8", (128, 4, 1))
  v6e = load_slice("v6e-64")  # chips in the name, 4 a host beyond one host's 8
  assert (v6e.chips, v6e.hosts, v6e.topology) == (64, 16, "8x8")
  assert load_slice("v5e-8").hosts == 1 and load_slice("v5e-8").chips_per_host == 8


def test_a_slice_yaml_path_and_an_explicit_mesh(tmp_path, capsys):
  path = tmp_path / "my-slice.yaml"
  path.write_text(
    yaml.safe_dump(
      {
        "name": "mine",
        "accelerator": "tpu-v5p",
        "chips": 16,
        "hosts": 4,
        "chips_per_host": 4,
        "topology": "2x2x4",
        "mesh": {"axes": ["replica", "data"], "shape": [4, 4]},
        "data_axes": ["replica", "data"],
      }
    )
  )
  assert load_slice(str(path)).mesh_axes == ("replica", "data")
  spec = explicit_slice([2, 4], ["data", "model"], ["data"], hosts=2)
  assert (spec.chips, spec.hosts, spec.data_parallel) == (8, 2, 2)
  assert main(["mesh", "--mesh-shape", "16x4x1", "--hosts", "16", "--global-batch", "128", "--seq-len", "512"]) == 0
  assert "mesh: 64 chips, 16 hosts x 4" in capsys.readouterr().out
  assert main(["mesh", "--tpu", str(path), "--global-batch", "32", "--seq-len", "64"]) == 0
  assert main(["mesh", "--list"]) == 0 and "v6e-256" in capsys.readouterr().out


def test_mesh_command_prints_per_host_figures(tmp_path, capsys):
  cfg = coded_config(tmp_path, [[300] * 50, [40] * 300], exhausted_policy="repeat")
  config = tmp_path / "pipeline.yaml"
  config.write_text(
    yaml.safe_dump(
      {
        "datasets": [{"name": d.name, "path": d.path} for d in cfg.datasets],
        "mixture": {"weights": {"d0": 1, "d1": 1}},
        "exhausted_policy": "repeat",
      }
    )
  )
  assert (
    main(
      ["mesh", "--tpu", "v5p-128", "--global-batch", "128", "--seq-len", "512", "--config", str(config), "--steps", "2"]
    )
    == 0
  )
  out = capsys.readouterr().out
  assert "v5p-128: 64 chips, 16 hosts x 4" in out
  assert out.count("4,096") == 16  # 8 rows x 512 tokens on each of the 16 hosts
  assert "planning one global step on this machine" in out
  said = " ".join(out.split())
  for column in ("rows", "tokens / step", "documents read / step"):
    assert f" {column}: " in said, column
  assert "Every step waits for the busiest host" in said
  assert main(["mesh", "--tpu", "v5e-256", "--global-batch", "1000", "--seq-len", "2048"]) == 1
  assert "does not divide over the 256 data-parallel shards" in capsys.readouterr().err


@pytest.mark.slow
def test_pipeline_from_a_slice_name(tmp_path):
  cfg = coded_config(
    tmp_path, [list(range(1, 60)), [9] * 80], exhausted_policy="repeat", batch={"global_batch_size": 16}
  )
  with (
    Pipeline(cfg, prefetch=0) as reference,
    Pipeline(cfg, tpu="cpu-8") as on_slice,
    Pipeline(cfg, tpu="v5e-8") as on_v5e,
    Pipeline(cfg, tpu=explicit_slice([2, 4], ["data", "model"], ["data"])) as explicit,
  ):
    for _ in range(2):
      expected = next(reference)
      for pipe in (on_slice, on_v5e, explicit):
        batch = next(pipe)
        assert all(np.array_equal(np.asarray(batch[k]), expected[k]) for k in expected)
  with pytest.raises(ConfigError, match="slice v5p-128 has 64 chips but 8 devices are visible"):
    Pipeline(cfg, tpu="v5p-128")


def test_every_command_option_has_help_text():
  commands = build_parser().commands
  missing = [
    (name, action.dest)
    for name, sub in commands.items()
    for action in sub._actions
    if not action.help and not isinstance(action, argparse._HelpAction)
  ]
  assert not missing, missing


def test_mesh_warns_when_the_data_is_smaller_than_the_steps_asked_for(tmp_path, capsys):
  cfg = coded_config(tmp_path, [[5, 7, 3]], exhausted_policy="stop")
  config = tmp_path / "tiny.yaml"
  config.write_text(
    yaml.safe_dump(
      {
        "datasets": [{"name": "d0", "path": cfg.datasets[0].path}],
        "mixture": {"weights": {"d0": 1}},
        "exhausted_policy": "stop",
      }
    )
  )
  assert (
    main(["mesh", "--tpu", "v5p-8", "--global-batch", "8", "--seq-len", "64", "--config", str(config), "--steps", "5"])
    == 0
  )
  printed = " ".join(capsys.readouterr().out.split())
  assert "warning: the data ends after 0 of the 5 steps asked for: it is smaller than one step" in printed
  # said instead of figures of nothing: no 0.0 documents per host, no spread of 1.00
  assert "0.0" not in printed and "max / mean =" not in printed and "planning one global step" not in printed


@pytest.mark.parametrize(
  "argv,suggestion",
  [
    (["plna", "x.yaml"], "did you mean 'plan'?"),
    (["index", "x", "--format", "megatorn"], "did you mean 'megatron'?"),
    (["audit", "x.yaml", "--hosts", "2", "--steps", "2", "--jsn"], "did you mean '--json'?"),
    (["convert", "a.jsonl", "--out", "o", "--name", "n", "--format=jsnl"], "did you mean 'jsonl'?"),
    (["inspect", "d", "--quite"], "did you mean '--quiet'?"),  # a flag every command takes
  ],
)
def test_a_mistyped_command_choice_or_flag_gets_a_suggestion(argv, suggestion, capsys):
  with pytest.raises(SystemExit) as exit_info:
    main(argv)
  assert exit_info.value.code == 2 and suggestion in capsys.readouterr().err
