"""The C loops (`jaxdata.transforms._native`) against their NumPy and Python versions,
their errors, the GIL they release, and the `JAXDATA_NATIVE` switch."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

from jaxdata.transforms import kernels
from jaxdata.transforms.fit import first_fit
from pipeline_fixtures import fresh_python

TESTS = os.path.dirname(os.path.abspath(__file__))
SUPPORT = os.path.join(TESTS, "support")
FEATURES = ("tokens", "targets", "segment_ids", "positions", "loss_mask", "source_ids")
BUFFER_DTYPES = (np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32)


def test_the_extension_is_built_and_used_by_default() -> None:
  # CI installs with `pip install -e .`, which compiles transforms/_native.c: a missing
  # compiler or a broken build must show here, not as a silent 25% slowdown.
  assert kernels._native is not None, "jaxdata.transforms._native was not built (pip install -e . compiles it)"
  assert kernels.NATIVE


def random_runs(rng: np.random.Generator, grid: int, buffer_size: int) -> tuple[np.ndarray, ...]:
  """Runs that tile [0, grid) in order, some of them padding (segment 0)."""
  cuts = np.unique(np.r_[0, rng.integers(0, grid + 1, int(rng.integers(0, 12))), grid])
  run_dst, run_len = cuts[:-1], np.diff(cuts)
  run_src = rng.integers(0, buffer_size - run_len)  # + run_len + 1 <= buffer_size
  run_segment = np.where(rng.random(run_len.size) < 0.25, 0, rng.integers(1, 9, run_len.size)).astype(np.int32)
  run_source = np.where(run_segment == 0, -1, rng.integers(0, 5, run_len.size)).astype(np.int32)
  return run_src, run_dst, run_len, run_segment, run_source


def written(
  native: bool, buffer: np.ndarray, runs: tuple[np.ndarray, ...], grid: int, trained: np.ndarray | None = None
) -> dict[str, np.ndarray]:
  flat = {name: np.full(grid, -7, np.int32) for name in FEATURES}
  kernels.write_runs(buffer, *runs, flat=flat, native=native, trained=trained)
  return flat


@pytest.mark.parametrize("dtype", BUFFER_DTYPES)
def test_write_runs_in_c_equals_numpy_on_random_runs(dtype: type) -> None:
  rng = np.random.default_rng(np.dtype(dtype).num)
  info = np.iinfo(dtype)
  for _ in range(60):
    grid = int(rng.integers(1, 200))
    buffer = rng.integers(info.min, info.max, int(rng.integers(grid + 2, 3 * grid + 4)), endpoint=True).astype(dtype)
    runs = random_runs(rng, grid, buffer.size)
    c, numpy = written(True, buffer, runs, grid), written(False, buffer, runs, grid)
    for name in FEATURES:
      np.testing.assert_array_equal(c[name], numpy[name], err_msg=name)
    # And against the definition, slot by slot, for the first run.
    s, d, k = (int(a[0]) for a in runs[:3])
    np.testing.assert_array_equal(c["tokens"][d : d + k], buffer[s : s + k].astype(np.int32))
    np.testing.assert_array_equal(c["targets"][d : d + k], buffer[s + 1 : s + k + 1].astype(np.int32))
    piece = runs[3][0] != 0
    assert c["positions"][d : d + k].tolist() == (list(range(k)) if piece else [0] * k)


def test_write_runs_with_trained_flags_in_c_equals_numpy_and_the_definition() -> None:
  rng = np.random.default_rng(29)
  for _ in range(60):
    grid = int(rng.integers(1, 200))
    buffer = rng.integers(0, 2**32, int(rng.integers(grid + 2, 3 * grid + 4)), dtype=np.uint64).astype(np.uint32)
    trained = (rng.random(buffer.size) < 0.5).astype(np.uint8)
    runs = random_runs(rng, grid, buffer.size)
    c, numpy = written(True, buffer, runs, grid, trained), written(False, buffer, runs, grid, trained)
    for name in FEATURES:
      np.testing.assert_array_equal(c[name], numpy[name], err_msg=name)
    untrained = written(True, buffer, runs, grid)
    for name in FEATURES[:-2] + FEATURES[-1:]:  # only the loss mask depends on the flags
      np.testing.assert_array_equal(c[name], untrained[name], err_msg=name)
    # The definition: a piece's slot trains where its target's flag is set; padding never does.
    for s, d, k, segment in zip(*(a.tolist() for a in runs[:4])):
      expected = trained[s + 1 : s + k + 1].tolist() if segment else [0] * k
      assert c["loss_mask"][d : d + k].tolist() == expected
  with pytest.raises(ValueError, match="trained must be uint8 laid out as the buffer"):
    written(True, buffer, runs, grid, trained[:-1])


def restarted(starts: np.ndarray, seq_len: int, segments: np.ndarray, positions: np.ndarray) -> tuple[list, list]:
  """restart_segments by its definition, slot by slot."""
  segments, positions = segments.copy(), positions.copy()
  for slot in range(segments.size):
    row_begin = slot - slot % seq_len
    mine = starts[(starts >= row_begin) & (starts <= slot)]
    if mine.size:
      if segments[slot] > 0:
        segments[slot] += mine.size
      positions[slot] = min(positions[slot], slot - int(mine.max()))
  return segments.tolist(), positions.tolist()


def test_restart_segments_in_c_equals_numpy_and_the_definition() -> None:
  rng = np.random.default_rng(11)
  for _ in range(80):
    seq_len, rows = int(rng.integers(1, 40)), int(rng.integers(1, 6))
    grid = seq_len * rows
    starts = rng.integers(0, grid, int(rng.integers(0, 10)))  # unsorted, repeats allowed
    segments = np.where(rng.random(grid) < 0.2, 0, rng.integers(1, 5, grid)).astype(np.int32)
    positions = rng.integers(0, 3 * seq_len, grid).astype(np.int32)
    expected = restarted(starts, seq_len, segments, positions)
    for native in (True, False):
      got_segments, got_positions = segments.copy(), positions.copy()
      kernels.restart_segments(starts, seq_len, got_segments, got_positions, native=native)
      assert (got_segments.tolist(), got_positions.tolist()) == expected, native


@pytest.mark.parametrize("native", [True, False])
def test_restart_segments_refuses_starts_outside_the_grid(native: bool) -> None:
  segments, positions = np.ones(8, np.int32), np.zeros(8, np.int32)
  with pytest.raises(ValueError, match="restart_segments: a start lies outside the grid"):
    kernels.restart_segments(np.array([3, 8]), 4, segments, positions, native=native)
  assert segments.tolist() == [1] * 8  # nothing written


@pytest.mark.parametrize("native", [True, False])
def test_write_runs_refuses_runs_outside_the_buffer_or_grid_and_writes_nothing(native: bool) -> None:
  buffer = np.arange(10, dtype=np.uint16)
  flat = {name: np.full(8, -7, np.int32) for name in FEATURES}
  one = np.ones(1, np.int32)
  cases = [
    ((np.array([5]), np.array([0]), np.array([5])), "run 0 .src 5, dst 0, length 5. lies outside"),
    ((np.array([0]), np.array([4]), np.array([5])), "run 0 .src 0, dst 4, length 5."),
    ((np.array([-1]), np.array([0]), np.array([2])), "run 0 .src -1"),
    ((np.array([0]), np.array([0]), np.array([-2])), "length -2"),
  ]
  for (src, dst, length), message in cases:
    with pytest.raises(ValueError, match=message):
      kernels.write_runs(buffer, src, dst, length, one, one, flat=flat, native=native)
  assert all((flat[name] == -7).all() for name in FEATURES)  # checked before any write
  with pytest.raises(ValueError, match="run_len holds 2 items, expected 1"):
    kernels.write_runs(buffer, np.array([0]), np.array([0]), np.array([1, 1]), one, one, flat=flat, native=native)
  with pytest.raises(ValueError, match="positions holds 4 items, expected 8"):
    kernels.write_runs(
      buffer,
      np.array([0]),
      np.array([0]),
      np.array([1]),
      one,
      one,
      flat={**flat, "positions": np.zeros(4, np.int32)},
      native=native,
    )
  with pytest.raises(ValueError, match="buffer kind d is not one of"):
    kernels._native.write_runs(
      buffer.astype(np.float64), "d", np.array([0]), np.array([0]), np.array([1]), one, one, *flat.values()
    )
  with pytest.raises((ValueError, BufferError)):  # NumPy: "ndarray is not C-contiguous"
    kernels.write_runs(
      buffer,
      np.array([0]),
      np.array([0]),
      np.array([1]),
      one,
      one,
      flat={**flat, "tokens": np.zeros(16, np.int32)[::2]},
      native=True,
    )
  with pytest.raises((ValueError, BufferError, TypeError)):  # read-only output
    readonly = np.zeros(8, np.int32)
    readonly.flags.writeable = False
    kernels.write_runs(
      buffer, np.array([0]), np.array([0]), np.array([1]), one, one, flat={**flat, "loss_mask": readonly}, native=True
    )


def test_a_buffer_in_the_other_byte_order_is_read_right() -> None:
  rng = np.random.default_rng(8)
  buffer = rng.integers(0, 60_000, 300).astype(np.uint16)
  runs = random_runs(rng, 120, buffer.size)
  want = written(True, buffer, runs, 120)
  swapped = buffer.astype(buffer.dtype.newbyteorder())  # the same values, stored big-endian
  got = written(True, swapped, runs, 120)
  assert all(np.array_equal(got[name], want[name]) for name in FEATURES)


def test_first_fit_in_c_equals_the_python_reference() -> None:
  rng = np.random.default_rng(3)
  for trial in range(300):
    rows, seq_len = int(rng.integers(1, 40)), int(rng.integers(1, 300))
    count = int(rng.integers(0, 200))
    lengths = rng.integers(0, seq_len + seq_len // 4 + 2, count)  # some never fit
    documents = np.where(rng.random(count) < 0.4, rng.integers(0, max(1, count // 4), count), -1)
    if trial % 3 == 0:
      documents = rng.integers(2**40, 2**40 + 3, count)  # large ids, heavy blocking
    for docs in (documents, None):
      want = first_fit(lengths.tolist(), rows, seq_len, None if docs is None else docs.tolist())
      got = kernels.first_fit_rows(lengths, docs, rows, seq_len, native=True)
      assert got.dtype == np.int64 and got.tolist() == want
      assert kernels.first_fit_rows(lengths, docs, rows, seq_len, native=False).tolist() == want


def test_first_fit_refuses_mismatched_sizes_and_rows_below_one() -> None:
  out = np.empty(2, np.int64)
  with pytest.raises(ValueError, match="one size"):
    kernels._native.first_fit(np.ones(3, np.int64), None, 2, 8, out)
  with pytest.raises(ValueError, match="rows must be in"):
    kernels._native.first_fit(np.ones(2, np.int64), None, 0, 8, out)


def test_the_c_loops_release_the_gil() -> None:
  # With a switch interval far longer than the test, a thread gives up the GIL only when it
  # blocks or a C call releases it. This thread blocks until the other has entered the call;
  # it can run again before the call returned only if the call released the GIL. An order
  # of events, not a timing: held, this thread would run only after `returned` is set.
  lengths = np.ones(20_000_000, np.int64)
  entered, returned = threading.Event(), threading.Event()

  def call() -> None:
    entered.set()
    kernels.first_fit_rows(lengths, None, 4096, 10**9, native=True)
    returned.set()

  interval = sys.getswitchinterval()
  sys.setswitchinterval(1000.0)
  try:
    thread = threading.Thread(target=call)
    thread.start()
    entered.wait()
    ran_during_the_call = not returned.is_set()
    thread.join()
  finally:
    sys.setswitchinterval(interval)
  assert returned.is_set() and ran_during_the_call


def batches_digest(native: str) -> str:
  """sha256 of 12 steps of a small pipeline run in a fresh process with JAXDATA_NATIVE=native."""
  script = (
    "import hashlib, sys, tempfile, pathlib, numpy as np\n"
    f"sys.path.insert(0, {SUPPORT!r})\n"
    "from pipeline_fixtures import coded_config, digest\n"
    "import jaxdata\n"
    "from jaxdata.transforms import kernels\n"
    "tmp = pathlib.Path(tempfile.mkdtemp())\n"
    "rng = np.random.default_rng(5)\n"
    "cfg = coded_config(tmp, [rng.integers(1, 70, 120).tolist(), rng.integers(1, 30, 200).tolist()],\n"
    "    exhausted_policy='repeat', shuffle_block_size='global',\n"
    "    packing={'seq_len': 32, 'add_bos': True, 'add_eos': True}, batch={'global_batch_size': 8})\n"
    "h = hashlib.sha256()\n"
    "with jaxdata.Pipeline(cfg, prefetch=0) as pipe:\n"
    "  for _ in range(12):\n"
    "    for part in digest(next(pipe)): h.update(part)\n"
    "print(kernels.NATIVE, h.hexdigest())\n"
  )
  done = subprocess.run(
    [sys.executable, "-c", script],
    env={**os.environ, "JAXDATA_NATIVE": native},
    capture_output=True,
    text=True,
    timeout=120,
  )
  assert done.returncode == 0, done.stderr[-2000:]
  return done.stdout.split()


@pytest.mark.slow
def test_jaxdata_native_0_runs_the_numpy_loops_with_the_same_batches() -> None:
  c, numpy = batches_digest("1"), batches_digest("0")
  assert c[0] == "True" and numpy[0] == "False"
  assert c[1] == numpy[1] and len(c[1]) == len(hashlib.sha256().hexdigest())


def test_without_the_extension_the_numpy_loops_run() -> None:
  script = (
    "from jaxdata.transforms import kernels\n"
    "import numpy as np\n"
    "print(kernels._native, kernels.NATIVE, kernels.first_fit_rows(np.array([3, 3, 2]), None, 2, 5).tolist())"
  )
  out = fresh_python(script, missing="jaxdata.transforms._native")
  assert out.split("\n")[0] == "None False [0, 1, 0]"


def test_an_invalid_jaxdata_native_is_a_named_error() -> None:
  done = subprocess.run(
    [sys.executable, "-c", "import jaxdata.transforms.kernels"],
    env={**os.environ, "JAXDATA_NATIVE": "yes"},
    capture_output=True,
    text=True,
    timeout=60,
  )
  assert done.returncode != 0
  assert "JAXDATA_NATIVE: 'yes' is not 0 (Python / NumPy loops) or 1 (C loops where built)" in done.stderr


@pytest.mark.parametrize("native", [True, False])
def test_restart_segments_refuses_arrays_that_are_not_flat_int32(native: bool) -> None:
  positions = np.zeros(8, np.int32)
  with pytest.raises(ValueError, match="restart_segments: segment_ids must be flat contiguous int32, got int64"):
    kernels.restart_segments(np.array([3]), 4, np.ones(8, np.int64), positions, native=native)
  assert positions.tolist() == [0] * 8
