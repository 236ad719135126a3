"""benchmarks/device_feed.py at its tiny size on the CPU mesh: its outputs, never its times."""

from __future__ import annotations

import math

import jax
import pytest

from benchmarks.device_feed import PACKED, SIZES, count_parameters, measure, parameters, refusal
from benchmarks.make_corpus import VOCABS, make_corpus


@pytest.mark.slow  # several seconds: the everyday tier stays short
def test_the_device_feed_benchmark_feeds_the_model_the_same_batches_both_ways(tmp_path):
  size = SIZES["tiny"]
  corpus = str(tmp_path / "corpus")
  make_corpus(corpus, scale=size.corpus_scale, vocab_size=VOCABS["uint32"])
  result = measure(corpus, size)
  assert result["devices"] == len(jax.devices()) == 8
  assert (
    result["parameters"]
    == count_parameters(parameters(size))
    == size.vocab * size.width + size.seq_len * size.width + size.layers * 8 * size.width**2
  )
  # The same batches, in the same order, reached the jitted step both ways: identical losses.
  assert result["losses_equal"] is True
  assert len(result["losses"]) == 3 + size.steps and all(math.isfinite(loss) for loss in result["losses"])
  assert result["restored_equal"] is True
  assert result["features_fed"] == list(PACKED)  # every feature a packed-attention model reads
  assert result["batch_bytes"] == len(PACKED) * size.rows * size.seq_len * 4  # only the features the model reads
  assert sum(result["shares"].values()) == pytest.approx(1.0, abs=1e-3)
  for key in ("step_s_on_device", "step_s_jaxdata", "h2d_bytes_per_s_jaxdata", "h2d_bytes_per_s_device_put"):
    assert result[key] > 0, key
  assert result["first_batch_s"] > 0 and result["restore_first_batch_s"] > 0


@pytest.mark.slow  # several seconds: the everyday tier stays short
def test_a_size_that_does_not_fit_the_device_is_refused_in_one_line():
  """The accelerator size on this CPU host (XLA's own figure for the compiled step, ~135 GiB, against the
  host's memory): one line naming both and the smaller sizes; the tiny size fits."""
  line = refusal("accelerator")
  assert line is not None and "\n" not in line
  assert line.startswith("--size accelerator: its step needs ") and "GiB of this host's memory (cpu)" in line
  assert "step-3ms" in line and refusal("tiny") is None


@pytest.mark.slow
def test_the_accelerator_check_script_runs_end_to_end_at_its_smallest_size(tmp_path):
  """benchmarks/accelerator_check.sh on this CPU host: the tiny size fed both ways (the same losses), the
  accelerator size refused in its one line, one table printed and the JSON written."""
  import json  # noqa: PLC0415
  import os  # noqa: PLC0415
  import subprocess  # noqa: PLC0415

  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=8", "JAX_PLATFORMS": "cpu"}
  script = os.path.join(root, "benchmarks", "accelerator_check.sh")
  run = subprocess.run(
    ["bash", script, "--sizes", "tiny accelerator", "--kinds", "none", "--out", str(tmp_path)],
    capture_output=True,
    text=True,
    env=env,
    timeout=600,
  )
  assert run.returncode == 0, run.stderr[-2000:]
  result = json.loads((tmp_path / "accelerator_check.json").read_text())
  assert result["device_feed"]["tiny"]["losses_equal"] is True
  assert result["device_feed"]["accelerator"]["refused"].startswith("--size accelerator: its step needs")
  assert "tiny" in run.stdout and "refused: --size accelerator" in run.stdout


def test_the_accelerator_summary_sets_the_mesh_against_numpy_output_on_each_corpus(tmp_path):
  """The check's table gives, per corpus, the mesh defaults over NumPy output against the 0.95x goal
  (from pipeline_throughput's JSON as `--lengths both` writes it: one key per corpus)."""
  import json  # noqa: PLC0415

  from benchmarks.accelerator_summary import summary, table  # noqa: PLC0415

  def row(rate: float) -> dict:
    return {"tokens_per_s": rate, "shares": [0.62, 0.18, 0.12, 0.08]}

  results = {
    "uint32": {"jaxdata": row(50e6), "jaxdata-mesh8": row(51e6), "grain-mp": row(10e6)},
    "uint32-short": {"jaxdata": row(50e6), "jaxdata-mesh8": row(40e6), "grain-mp": row(10e6)},
  }
  (tmp_path / "pipeline_throughput.json").write_text(json.dumps({"repetitions": 1, "cores": 16, "results": results}))
  text = table(summary(str(tmp_path)))
  assert "uint32 mesh defaults / NumPy output: 1.02x (ok: >= 0.95x)" in text
  assert "uint32-short mesh defaults / NumPy output: 0.80x (UNDER GOAL: >= 0.95x)" in text
  assert "uint32-short jaxdata-mesh8" in text and "4.00x Grain" in text
