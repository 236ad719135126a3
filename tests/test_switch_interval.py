"""The GIL switch interval while a pipeline's prefetch thread runs: lowered to
`switch_interval_s`, never raised, the program's value back after; None (the
default) leaves it."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import numpy as np
import pytest

from jaxdata import Pipeline, PipelineConfig
from jaxdata.pipeline.switch_interval import SWITCH_INTERVAL_S, lower_switch_interval
from pipeline_fixtures import coded_config


@pytest.fixture
def small_cfg(tmp_path) -> PipelineConfig:
  return coded_config(tmp_path, [[5, 17, 30, 2, 9] * 12], exhausted_policy="repeat")


@pytest.fixture
def program_interval() -> Iterator[float]:
  """The interval a program would have set (not the library's value), restored after the test."""
  before = sys.getswitchinterval()
  sys.setswitchinterval(0.004)
  yield 0.004
  sys.setswitchinterval(before)


def test_a_prefetching_pipeline_lowers_the_interval_and_gives_it_back(small_cfg, program_interval) -> None:
  pipe = Pipeline(small_cfg, prefetch=2, switch_interval_s=SWITCH_INTERVAL_S)
  assert sys.getswitchinterval() == program_interval  # nothing yet: no thread runs
  next(pipe)
  assert sys.getswitchinterval() == SWITCH_INTERVAL_S
  pipe.set_state(pipe.get_state())  # the thread restarts: still lowered once it runs again
  next(pipe)
  assert sys.getswitchinterval() == SWITCH_INTERVAL_S
  pipe.close()
  assert sys.getswitchinterval() == program_interval


def test_the_default_none_and_prefetch_zero_leave_it_alone(small_cfg, program_interval) -> None:
  for kwargs in ({}, {"switch_interval_s": None}, {"prefetch": 0, "switch_interval_s": SWITCH_INTERVAL_S}):
    with Pipeline(small_cfg, **kwargs) as pipe:
      next(pipe)
      assert sys.getswitchinterval() == program_interval, kwargs


def test_a_smaller_program_value_is_never_raised(small_cfg) -> None:
  before = sys.getswitchinterval()
  sys.setswitchinterval(0.0002)
  small = sys.getswitchinterval()  # as the interpreter keeps it (whole microseconds)
  try:
    with Pipeline(small_cfg, prefetch=2, switch_interval_s=SWITCH_INTERVAL_S) as pipe:
      next(pipe)
      assert sys.getswitchinterval() == small
    assert sys.getswitchinterval() == small
  finally:
    sys.setswitchinterval(before)


def test_two_pipelines_restore_only_when_both_are_done(small_cfg, program_interval) -> None:
  first, second = Pipeline(small_cfg, switch_interval_s=0.002), Pipeline(small_cfg, switch_interval_s=0.0005)
  next(first)
  assert sys.getswitchinterval() == 0.002
  next(second)
  assert sys.getswitchinterval() == 0.0005  # the lowest asked for
  second.close()
  assert sys.getswitchinterval() == 0.002
  first.close()
  assert sys.getswitchinterval() == program_interval


def test_a_value_the_program_sets_meanwhile_is_kept() -> None:
  before = sys.getswitchinterval()
  try:
    sys.setswitchinterval(0.004)
    lease = lower_switch_interval(0.001)
    sys.setswitchinterval(0.003)  # the program changes its mind while the lease is held
    other = lower_switch_interval(0.002)
    assert sys.getswitchinterval() == 0.001  # the lowest lease still rules
    other.release()
    assert sys.getswitchinterval() == 0.001
    lease.release()
    lease.release()  # idempotent
    assert sys.getswitchinterval() == 0.003
  finally:
    sys.setswitchinterval(before)


@pytest.mark.parametrize("bad", [0, -0.001, 5e-7, 2.0, True, "0.001", float("nan"), 10**400])
def test_a_bad_value_names_the_argument(small_cfg, bad) -> None:
  with pytest.raises(ValueError, match="switch_interval_s") as raised:
    Pipeline(small_cfg, switch_interval_s=bad)
  assert len(str(raised.value)) < 200  # a huge value is shortened, not printed whole


def test_a_numpy_value_is_taken(small_cfg, program_interval) -> None:
  with Pipeline(small_cfg, switch_interval_s=np.float32(0.002)) as pipe:
    next(pipe)
    assert sys.getswitchinterval() == 0.002
  assert sys.getswitchinterval() == program_interval
