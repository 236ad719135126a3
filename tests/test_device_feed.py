"""benchmarks/device_feed.py at its tiny size on the CPU mesh: its outputs, never its times."""

from __future__ import annotations

import math

import jax
import pytest

from benchmarks.device_feed import FED, SIZES, count_parameters, measure, parameters
from benchmarks.make_corpus import VOCABS, make_corpus


def test_the_device_feed_benchmark_feeds_the_model_the_same_batches_both_ways(tmp_path):
  size = SIZES["tiny"]
  corpus = str(tmp_path / "corpus")
  make_corpus(corpus, scale=size.corpus_scale, vocab_size=VOCABS["uint32"])
  result = measure(corpus, size)
  assert result["devices"] == len(jax.devices()) == 8
  assert (
    result["parameters"]
    == count_parameters(parameters(size))
    == size.vocab * size.width + size.layers * 8 * size.width**2
  )
  # The same batches, in the same order, reached the jitted step both ways: identical losses.
  assert result["losses_equal"] is True
  assert len(result["losses"]) == 3 + size.steps and all(math.isfinite(loss) for loss in result["losses"])
  assert result["restored_equal"] is True
  assert result["features_fed"] == list(FED)
  assert result["batch_bytes"] == len(FED) * size.rows * size.seq_len * 4  # only the features the model reads
  assert sum(result["shares"].values()) == pytest.approx(1.0, abs=1e-3)
  for key in ("step_s_on_device", "step_s_jaxdata", "h2d_bytes_per_s_jaxdata", "h2d_bytes_per_s_device_put"):
    assert result[key] > 0, key
  assert result["first_batch_s"] > 0 and result["restore_first_batch_s"] > 0
