"""Layout: `transforms/` installs as `jaxdata.transforms`, in editable and normal installs."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile

import pytest

import jaxdata
import jaxdata.tpu_configs
import jaxdata.transforms

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_public_api_names_resolve():
  for name in jaxdata.__all__:
    assert getattr(jaxdata, name) is not None, name
  assert len(set(jaxdata.__all__)) == len(jaxdata.__all__)


def test_editable_install_maps_transforms_from_repo_root():
  # The test command runs against `pip install -e .`: the mapping must point
  # jaxdata.transforms at the repository's top-level transforms/ directory.
  here = os.path.dirname(jaxdata.transforms.__file__)
  assert os.path.samefile(here, os.path.join(REPO, "transforms"))
  assert os.path.samefile(os.path.dirname(jaxdata.tpu_configs.__file__), os.path.join(REPO, "tpu_configs"))


@pytest.mark.slow
@pytest.mark.integration
def test_normal_install_has_jaxdata_transforms_and_no_top_level_transforms(tmp_path):
  wheel_dir = tmp_path / "wheel"
  subprocess.run(
    [sys.executable, "-m", "pip", "wheel", REPO, "--no-deps", "--no-build-isolation", "-q", "-w", str(wheel_dir)],
    check=True,
    cwd=tmp_path,
  )
  (wheel,) = wheel_dir.glob("jaxdata-*.whl")
  names = zipfile.ZipFile(wheel).namelist()
  assert "jaxdata/transforms/__init__.py" in names
  assert "jaxdata/tpu_configs/__init__.py" in names
  assert not [n for n in names if n.startswith(("transforms/", "tpu_configs/"))]
  for extension in ("jaxdata/transforms/_native.", "jaxdata/mixture/_exact_pick."):  # the C loops
    assert [n for n in names if n.startswith(extension) and n.endswith(".so")], extension
  site = tmp_path / "site"
  subprocess.run(
    [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(site), str(wheel)],
    check=True,
    cwd=tmp_path,
  )
  probe = (
    "import jaxdata.transforms, jaxdata.tpu_configs, os;"
    "from jaxdata.transforms import kernels; from jaxdata.mixture import pick_loops;"
    "print(os.path.dirname(jaxdata.transforms.__file__), os.path.dirname(kernels._native.__file__),"
    "      os.path.dirname(pick_loops._exact_pick.__file__))"
  )
  out = subprocess.run(
    [sys.executable, "-c", probe],
    check=True,
    cwd=tmp_path,
    capture_output=True,
    text=True,
    env={**os.environ, "PYTHONPATH": str(site)},
  ).stdout.split()
  assert len(out) == 3 and all(os.path.samefile(path, site / "jaxdata" / "transforms") for path in out[:2])
  assert os.path.samefile(out[2], site / "jaxdata" / "mixture")


def test_console_script_lists_commands():
  out = subprocess.run(["jaxdata", "--help"], check=True, capture_output=True, text=True).stdout
  for command in ("convert", "index", "inspect", "plan", "audit", "mesh", "report", "bench", "demo"):
    assert command in out
