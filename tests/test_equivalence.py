"""Every feature in every mode gives the in-process, prefetch=0 reference's batches (tests/support/equivalence_matrix.py).

Cells that run in this interpreter are one test each; the C loops off
(JAXDATA_NATIVE=0) and two jax.distributed hosts run each in fresh
interpreters, once for all their features, and are then checked per feature.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

import equivalence_matrix as matrix
import object_store
from pipeline_fixtures import free_port, worker_env

pytestmark = [pytest.mark.slow, pytest.mark.multiprocess, pytest.mark.integration]

HERE = [m for m in matrix.MODES if m.runs == "here"]
SCRIPT = os.path.abspath(matrix.__file__)


@pytest.fixture(scope="module")
def local_data(tmp_path_factory) -> dict[str, str]:
  return matrix.write_data(str(tmp_path_factory.mktemp("equivalence")))


@pytest.fixture(scope="module")
def stores(local_data):
  """Both object stores, with d0, d1 and the Megatron files uploaded (their endpoints in os.environ)."""
  yield from object_store.servers()


def data_for(feature: matrix.Feature, data: dict[str, str], request: Any) -> dict[str, str]:
  """The local data, plus its URLs in both stores for a remote feature (the stores start on first use)."""
  if feature.store is None:
    return data
  return {**data, **request.getfixturevalue("uploaded")}


@pytest.fixture(scope="module")
def uploaded(stores, local_data) -> dict[str, str]:
  urls = {}
  for scheme, server in stores.items():
    for name in ("d0", "d1", "meg", "sft", "pairs0", "pairs1", "vl"):
      urls[f"{scheme}:{name}"] = server.upload(local_data[name], "jaxdata-equivalence", f"{scheme}-{name}")
  return urls


_references: dict[str, list] = {}


def reference(feature: matrix.Feature, data: dict[str, str]) -> list:
  if feature.name not in _references:
    _references[feature.name] = matrix.reference(feature, data)
  return _references[feature.name]


def check_cell(feature: matrix.Feature, mode: matrix.Mode, cell: dict[str, Any], expected: list) -> None:
  assert len(expected) > matrix.SPLIT, f"{feature.name}: the reference must run past the round trip"
  assert cell["first"] == expected[: matrix.SPLIT], f"{feature.name} in {mode.name}: first steps differ"
  assert cell["rest"] == expected[matrix.SPLIT :], f"{feature.name} in {mode.name}: after set_state(get_state())"
  assert cell["restored"] == expected[matrix.SPLIT :], f"{feature.name} in {mode.name}: restored on a fresh pipeline"
  if mode.usable_cores is not None and mode.usable_cores >= 4 and feature.store is None:
    # as on a host with cores to spare: local spans are read on the read thread, a span ahead
    assert cell["read_thread"], f"{feature.name} in {mode.name}: no read thread"
  if mode.uses_workers:  # the mode really ran: its processes made every step handed out (and some ahead)
    made_here = matrix.CHANGE_STEP if feature.changed_to is not None else 0  # by the pipeline before the change
    assert cell["from_workers"] >= len(expected) - made_here, (feature.name, mode.name, cell["from_workers"])


@pytest.mark.parametrize("mode", HERE, ids=[m.name for m in HERE])
@pytest.mark.parametrize("feature", matrix.FEATURES, ids=[f.name for f in matrix.FEATURES])
def test_cell(feature, mode, local_data, request):
  data = data_for(feature, local_data, request)
  expected = reference(feature, data)
  cell = matrix.run_cell(feature, data, mode, matrix.local_mesh() if mode.mesh else None)
  check_cell(feature, mode, cell, expected)


def test_the_matrix_is_every_feature_the_issue_names_in_every_mode():
  """Generated from two lists: these are the contract's rows and columns."""
  assert len({f.name for f in matrix.FEATURES}) == len(matrix.FEATURES) >= 20
  assert {m.name for m in matrix.MODES} >= {
    "prefetch2",
    "planner-process",
    "readers1",
    "readers2",
    "mesh8",
    "native-off",
    "two-hosts",
  }
  assert sum(f.multihost for f in matrix.FEATURES) >= 5


def write_data_json(data: dict[str, str], tmp_path) -> str:
  path = tmp_path / "data.json"
  path.write_text(json.dumps(data))
  return str(path)


def test_every_feature_with_the_c_loops_off(local_data, uploaded, tmp_path):
  """JAXDATA_NATIVE=0 is read at import: one fresh interpreter runs every feature's cell."""
  data = {**local_data, **uploaded}
  mode = next(m for m in matrix.MODES if m.runs == "native-off")
  out = tmp_path / "cells.json"
  env = {**os.environ, "JAXDATA_NATIVE": "0"}
  done = subprocess.run(
    [
      sys.executable,
      SCRIPT,
      "cell",
      write_data_json(data, tmp_path),
      mode.name,
      str(out),
      *[f.name for f in matrix.FEATURES],
    ],
    env=env,
    capture_output=True,
    text=True,
    timeout=600,
  )
  assert done.returncode == 0, done.stderr[-3000:]
  cells = json.loads(out.read_text())
  for feature in matrix.FEATURES:
    check_cell(feature, mode, cells[feature.name], reference(feature, data))


def test_the_representative_features_on_two_jax_distributed_hosts(local_data, tmp_path):
  data = local_data
  mode = next(m for m in matrix.MODES if m.runs == "two-hosts")
  features = [f for f in matrix.FEATURES if f.multihost]
  data_json, port = write_data_json(data, tmp_path), free_port()
  procs = [
    subprocess.Popen(
      [sys.executable, SCRIPT, "host", data_json, str(port), "2", str(i), str(tmp_path), *[f.name for f in features]],
      env=worker_env(),
      stdout=subprocess.PIPE,
      stderr=subprocess.STDOUT,
      text=True,
    )
    for i in range(2)
  ]
  try:
    outputs = [p.communicate(timeout=600)[0] for p in procs]
  finally:  # a hung host (a collective one side never joins) leaves no process behind
    for p in procs:
      if p.poll() is None:
        p.kill()
        p.wait()
  for p, output in zip(procs, outputs):
    assert p.returncode == 0, output[-3000:]
  for host in range(2):
    cells = json.loads((tmp_path / f"host{host}.json").read_text())
    for feature in features:
      check_cell(feature, mode, cells[feature.name], reference(feature, data))
