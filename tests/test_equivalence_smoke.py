"""The equivalence matrix's smoke: a few features in the in-process modes, in the everyday tier (the whole
matrix, every feature in every mode, runs in the slow tier: tests/test_equivalence.py)."""

from __future__ import annotations

import pytest

import equivalence_matrix as matrix
from test_equivalence import check_cell, reference

SMOKE_FEATURES = [f for f in matrix.FEATURES if f.name in ("token-mixture-pass-ends", "pairs-one-row", "extra-feature")]
SMOKE_MODES = [m for m in matrix.MODES if m.name in ("prefetch2", "mesh8")]


@pytest.fixture(scope="module")
def local_data(tmp_path_factory) -> dict[str, str]:
  return matrix.write_data(str(tmp_path_factory.mktemp("smoke")))


def test_the_smoke_names_features_and_modes_of_the_matrix():
  assert len(SMOKE_FEATURES) == 3 and len(SMOKE_MODES) == 2


@pytest.mark.parametrize("mode", SMOKE_MODES, ids=[m.name for m in SMOKE_MODES])
@pytest.mark.parametrize("feature", SMOKE_FEATURES, ids=[f.name for f in SMOKE_FEATURES])
def test_smoke_cell(feature, mode, local_data):
  cell = matrix.run_cell(feature, local_data, mode, matrix.local_mesh() if mode.mesh else None)
  check_cell(feature, mode, cell, reference(feature, local_data))
