"""A value a tool or benchmark cannot use gets one line naming the flag and the value (argparse's exit 2),
never a traceback later on."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from benchmarks import cpu_breakdown, device_feed
from jaxdata.cli import main

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.parametrize(
  ("module", "argv", "message"),
  [
    (cpu_breakdown, ["--repetitions", "0"], "argument --repetitions: 0 is below 1"),
    (cpu_breakdown, ["--scale", "-1"], "argument --scale: -1 is not above 0"),
    (cpu_breakdown, ["--shard-kib", "-4"], "argument --shard-kib: -4 is below 1"),
    (cpu_breakdown, ["--mesh", "-2"], "argument --mesh: -2 is below 0"),
    (cpu_breakdown, ["--repetitions", "two"], "argument --repetitions: 'two' is not a whole number"),
    (device_feed, ["--steps", "0"], "argument --steps: 0 is below 1"),
    (device_feed, ["--steps", "-3"], "argument --steps: -3 is below 1"),
  ],
)
def test_benchmark_arguments_are_checked(module, argv, message, monkeypatch, capsys):
  monkeypatch.setattr(sys, "argv", [module.__name__, *argv])
  with pytest.raises(SystemExit) as exit_:
    module.main()
  assert exit_.value.code == 2
  assert capsys.readouterr().err.strip().splitlines()[-1].endswith(message)


@pytest.mark.parametrize("value", ["-1", "1.5", "nan"])
def test_doctor_share_floor_is_a_share(value, capsys):
  with pytest.raises(SystemExit) as exit_:
    main(["doctor", "stats.jsonl", "--share-floor", value])
  assert exit_.value.code == 2
  assert "argument --share-floor:" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["--steps"], ["--steps", "--out", "x"], ["--wheels"]])
def test_accelerator_check_flags_need_values(argv):
  done = subprocess.run(
    ["bash", os.path.join(REPO, "benchmarks", "accelerator_check.sh"), *argv], capture_output=True, text=True
  )
  assert done.returncode == 2
  assert done.stderr.strip() == f"accelerator_check.sh: {argv[0]} needs a value (see the header of this script)"


def test_a_path_that_is_no_dataset_says_what_would_make_it_one(tmp_path):
  """Raw text points to `inputs:` / `jaxdata convert`; token files another tool wrote to `jaxdata index`."""
  from jaxdata import DatasetError, open_dataset  # noqa: PLC0415

  (tmp_path / "chat.jsonl").write_text('{"text": "hi"}\n')
  with pytest.raises(DatasetError, match=r"chat.jsonl is raw text: name it under the dataset's `inputs:`"):
    open_dataset(str(tmp_path / "chat.jsonl"))
  (tmp_path / "shards").mkdir()
  (tmp_path / "shards" / "part-0.array_record").write_bytes(b"")
  with pytest.raises(
    DatasetError, match=r"index them in place with `jaxdata index .*shards --format arrayrecord --dtype"
  ):
    open_dataset(str(tmp_path / "shards"))
  (tmp_path / "megatron").mkdir()
  (tmp_path / "megatron" / "c4_text_document.idx").write_bytes(b"")
  with pytest.raises(DatasetError, match=r"--format megatron` \(no tokens copied\)"):
    open_dataset(str(tmp_path / "megatron"))


def test_raw_input_settings_that_cannot_be_used_are_named(monkeypatch):
  from jaxdata import ConfigError, PipelineConfig  # noqa: PLC0415
  from jaxdata.conversion.options import ConvertOptions  # noqa: PLC0415
  from jaxdata.pipeline.raw_inputs import with_built_inputs  # noqa: PLC0415

  raw = {"mixture": {"weights": {"a": 1}}, "packing": {"seq_len": 8}, "batch": {"global_batch_size": 1}}
  with pytest.raises(ConfigError, match=r"datasets.a.inputs: names no files \(empty or missing\), so tokenizer"):
    PipelineConfig.from_dict({**raw, "datasets": [{"name": "a", "inputs": [], "tokenizer": "byte"}]})
  with pytest.raises(ValueError, match=r"shard_bytes: '1MB' is not a whole number of bytes"):
    ConvertOptions(shard_bytes="1MB")  # type: ignore[arg-type]
  cfg = PipelineConfig.from_dict({**raw, "datasets": [{"name": "a", "inputs": ["x/*.jsonl"], "tokenizer": "byte"}]})
  monkeypatch.setenv("JAXDATA_BUILD_WAIT_S", "ten")
  with pytest.raises(ConfigError, match=r"\$JAXDATA_BUILD_WAIT_S: 'ten' is not a number of seconds"):
    with_built_inputs(cfg)
