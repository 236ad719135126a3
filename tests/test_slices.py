"""TPU slice configs, `jaxdata mesh`, and pipelines built from a slice name."""

from __future__ import annotations

import math

import numpy as np
import pytest
import yaml

from jaxdata import ConfigError, Pipeline
from jaxdata.cli import main
from jaxdata.pipeline.slices import available_slices, load_slice
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
  with pytest.raises(ConfigError, match="global batch 1000 does not divide over the 64 data-parallel shards of v5p-128"):
    spec.rows_per_host(1000)
  with pytest.raises(ConfigError, match="no slice config 'v9-1'"):
    load_slice("v9-1")


def test_mesh_command_prints_per_host_figures(tmp_path, capsys):
  cfg = coded_config(tmp_path, [[300] * 50, [40] * 300], exhausted_policy="repeat")
  config = tmp_path / "pipeline.yaml"
  config.write_text(yaml.safe_dump({
      "datasets": [{"name": d.name, "path": d.path} for d in cfg.datasets],
      "mixture": {"weights": {"d0": 1, "d1": 1}}, "exhausted_policy": "repeat"}))
  assert main(["mesh", "--tpu", "v5p-128", "--global-batch", "128", "--seq-len", "512",
               "--config", str(config), "--steps", "2"]) == 0
  out = capsys.readouterr().out
  assert "v5p-128: 64 chips, 16 hosts x 4" in out
  assert out.count("4,096") == 16  # 8 rows x 512 tokens on each of the 16 hosts
  assert "planning one global step on this machine" in out
  assert main(["mesh", "--tpu", "v5e-256", "--global-batch", "1000", "--seq-len", "2048"]) == 1
  assert "does not divide over the 256 data-parallel shards" in capsys.readouterr().err


def test_pipeline_from_a_slice_name(tmp_path):
  cfg = coded_config(tmp_path, [list(range(1, 60)), [9] * 80], exhausted_policy="repeat",
                     batch={"global_batch_size": 16})
  with Pipeline(cfg, prefetch=0) as reference, Pipeline(cfg, tpu="cpu-8") as on_slice, \
       Pipeline(cfg, tpu="v5e-8") as on_v5e:
    for _ in range(2):
      expected = next(reference)
      for pipe in (on_slice, on_v5e):
        batch = next(pipe)
        assert all(np.array_equal(np.asarray(batch[k]), expected[k]) for k in expected)
  with pytest.raises(ConfigError, match="slice v5p-128 has 64 chips but 8 devices are visible"):
    Pipeline(cfg, tpu="v5p-128")
