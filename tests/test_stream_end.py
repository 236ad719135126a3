"""A stream that ends under `exhausted_policy: stop` says so: once on the logger and as a warning, and
every `StopIteration` after it carries the reason (a loop asking for more steps ends with a word)."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from jaxdata import Pipeline
from pipeline_fixtures import coded_config


def test_the_end_of_the_data_is_said_once_and_carried_by_stop_iteration(tmp_path, caplog):
  rng = np.random.default_rng(2)
  cfg = coded_config(
    tmp_path,
    [rng.integers(3, 12, 30).tolist()],
    exhausted_policy="stop",
    packing={"mode": "none", "seq_len": 16},
    batch={"global_batch_size": 4, "drop_remainder": True},
  )
  with Pipeline(cfg, prefetch=0) as pipe, caplog.at_level(logging.WARNING, logger="jaxdata"):
    steps = 0
    with pytest.warns(RuntimeWarning, match=r"the data ended after 7 steps: a dataset ran out") as said:
      for _ in range(2000):  # asks for more than the data holds
        try:
          next(pipe)
        except StopIteration as stop:
          reason = str(stop)
          break
        steps += 1
    assert steps == 7 and sum("the data ended" in str(w.message) for w in said) == 1
    assert reason.startswith("the data ended after 7 steps") and "passes completed: d0 1" in reason
    with pytest.raises(StopIteration, match="the data ended after 7 steps"):
      next(pipe)  # again: the same reason, no second warning
  assert sum("the data ended" in r.message for r in caplog.records) == 1
