"""Every command's output fits an 80-column terminal: wide tables turn into one block per row.

`demo` and `ablate` train a model, so their width is checked where they already
run: tests/test_demo.py and tests/test_ablate.py."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml

from jaxdata import Pipeline, load_config
from jaxdata.cli import main
from pipeline_fixtures import write_coded_dataset


@pytest.fixture()
def setup(tmp_path, monkeypatch):
  monkeypatch.setenv("COLUMNS", "80")
  rng = np.random.default_rng(1)
  for d, count in enumerate((120, 80)):
    write_coded_dataset(str(tmp_path / f"d{d}"), d, rng.integers(2, 40, count).tolist())
  config = tmp_path / "pipeline.yaml"
  config.write_text(
    yaml.safe_dump(
      {
        "datasets": [{"name": "a_long_dataset_name", "path": "d0"}, {"name": "code", "path": "d1"}],
        "mixture": {"weights": {"a_long_dataset_name": 0.7, "code": 0.4}},
        "exhausted_policy": "repeat",
        "packing": {"seq_len": 32},
        "batch": {"global_batch_size": 4},
        "stats_path": "stats.jsonl",
      }
    )
  )
  with Pipeline(load_config(str(config)), prefetch=0) as pipe:
    for _ in range(20):
      next(pipe)
  (tmp_path / "in.jsonl").write_text("".join(json.dumps({"text": f"document number {i}"}) + "\n" for i in range(30)))
  return tmp_path, str(config)


@pytest.mark.slow
def test_every_command_fits_80_columns(setup, capsys):
  tmp_path, config = setup
  commands = [
    ["convert", str(tmp_path / "in.jsonl"), "--out", str(tmp_path / "conv"), "--name", "conv", "-q"],
    ["inspect", str(tmp_path / "d0"), str(tmp_path / "d1"), str(tmp_path / "conv")],
    ["plan", config, "--tokens", "20k", "--hosts", "4"],
    ["audit", config, "--hosts", "2", "--steps", "10"],
    ["report", str(tmp_path / "stats.jsonl"), "--out", str(tmp_path / "report")],
    ["doctor", str(tmp_path / "stats.jsonl")],
    ["mesh", "--tpu", "v5p-128", "--global-batch", "128", "--seq-len", "512", "--config", config, "--steps", "2"],
    ["mesh", "--list"],
    ["bench", config, "--steps", "3"],
    ["--version"],
  ]
  for argv in commands:
    try:
      main(argv)
    except SystemExit:  # --version exits after printing
      pass
    out = capsys.readouterr()
    text = out.out + out.err
    wide = [line for line in text.splitlines() if len(line) > 80]
    assert not wide, (argv[0], wide[:3])
    assert text.strip(), argv[0]
