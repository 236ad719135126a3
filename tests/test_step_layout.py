"""`StepLayout`: what a step holds, built once from the config; a feature of its own dtype and extent is
one `batch.extra_features` entry and one function (tests/support/layout_extension.py), and it runs
through every making mode and a restore (the equivalence matrix's "extra-feature" row)."""

from __future__ import annotations

import jax
import numpy as np
import pytest

import layout_extension as extension
from jaxdata import ConfigError, Pipeline
from jaxdata.config.layout import FEATURES, FeatureSpec, StepLayout
from pipeline_fixtures import coded_config


def config(tmp_path, **batch):
  rng = np.random.default_rng(8)
  lengths = [rng.integers(1, 40, 120).tolist(), rng.integers(1, 20, 90).tolist()]
  return coded_config(
    tmp_path, lengths, exhausted_policy="repeat", batch={"global_batch_size": 8, **batch}, masked=(1,)
  )


def test_the_layout_names_every_array_with_its_dtype_and_shape(tmp_path):
  cfg = config(tmp_path, features=["tokens", "targets", "loss_mask"], extra_features=[extension.ROW_SUMMARY])
  layout = cfg.layout
  assert layout.names == (*FEATURES, "row_summary") and layout.kept == ("tokens", "targets", "loss_mask", "row_summary")
  summary = layout.spec("row_summary")
  assert (summary.numpy_dtype, summary.shape(8, 16)) == (np.dtype(np.uint8), (8, 5))
  arrays = layout.arrays(8, 16, aligned=True)
  assert all(a.ctypes.data % 64 == 0 for a in arrays.values())  # each on its own aligned block
  assert {n: (a.dtype, a.shape) for n, a in arrays.items()}["row_summary"] == (np.dtype(np.uint8), (8, 5))
  assert StepLayout.from_json(layout.to_json()) == layout  # as worker processes get it


def test_an_extra_feature_is_made_for_every_step_and_restores(tmp_path):
  cfg = config(tmp_path, extra_features=[extension.ROW_SUMMARY])
  with Pipeline(cfg, prefetch=2, making="here") as pipe:
    batches = [next(pipe) for _ in range(6)]
    state = pipe.get_state()
    rest = [next(pipe) for _ in range(3)]
  for batch in batches + rest:
    made = batch["row_summary"]
    assert made.dtype == np.uint8 and made.shape == (8, 5)
    assert np.array_equal(made[:, :4], extension.expected_summary(batch))
    assert made[:, 4].sum() >= made[:, 0].sum()  # at least a piece per document begun in a row
  with Pipeline(cfg, prefetch=0, making="here") as again:
    again.set_state(state)
    for expected in rest:
      got = next(again)
      assert all(np.array_equal(got[k], expected[k]) for k in expected)


def test_an_extra_feature_is_a_global_array_sharded_by_rows(tmp_path):
  cfg = config(tmp_path, extra_features=[extension.ROW_SUMMARY])
  mesh = jax.make_mesh((4, 2), ("data", "model"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
  with Pipeline(cfg, prefetch=0, making="here") as host, Pipeline(cfg, mesh=mesh, prefetch=2, making="here") as meshed:
    for _ in range(3):
      want, got = next(host), next(meshed)
      summary = got["row_summary"]
      assert summary.shape == (8, 5) and summary.dtype == np.uint8
      assert summary.sharding.spec == jax.sharding.PartitionSpec("data", None)
      assert np.array_equal(np.asarray(summary), want["row_summary"])


@pytest.mark.parametrize(
  "entry,message",
  [
    ({**extension.ROW_SUMMARY, "dtype": "complex64"}, "row_summary.dtype: 'complex64' is not one of"),
    ({**extension.ROW_SUMMARY, "extent": [-1]}, r"row_summary.extent: a per-row shape of ints >= 0"),
    (
      {k: v for k, v in extension.ROW_SUMMARY.items() if k != "assemble"},
      "row_summary: assemble: the 'module:function'",
    ),
    ({**extension.ROW_SUMMARY, "shape": [5]}, "batch.extra_features: unknown key 'shape'"),
    ({**extension.ROW_SUMMARY, "name": "tokens"}, "batch.extra_features: 'tokens' names another feature"),
  ],
)
def test_a_bad_extra_feature_is_refused_naming_its_key(tmp_path, entry, message):
  with pytest.raises(ConfigError, match=message):
    config(tmp_path, extra_features=[entry])


def test_an_extra_feature_whose_function_fails_its_contract_names_it(tmp_path):
  missing = {**extension.ROW_SUMMARY, "assemble": "layout_extension:nothing_here"}
  with pytest.raises(ConfigError, match="assemble 'layout_extension:nothing_here' cannot be imported"):
    next(Pipeline(config(tmp_path / "a", extra_features=[missing]), prefetch=0))
  wrong = {**extension.ROW_SUMMARY, "extent": [6]}  # the function makes 5 a row
  with pytest.raises(ValueError, match=r"row_summary: layout_extension:row_summary made \(8, 5\), not \(8, 6\)"):
    next(Pipeline(config(tmp_path / "b", extra_features=[wrong]), prefetch=0))


def test_reference_log_probabilities_travel_as_float32():
  spec = FeatureSpec("ref_logp", "float32")
  assert spec.numpy_dtype == np.float32 and spec.nbytes(2, 8) == 64
