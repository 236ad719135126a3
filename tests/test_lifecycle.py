"""A pipeline's lifecycle: a closed pipeline hands out nothing and keeps its state."""

from __future__ import annotations

import pytest

import jaxdata
from pipeline_fixtures import coded_config, digest


@pytest.mark.parametrize("prefetch", [0, 2])
def test_next_after_close_raises_one_named_error_and_the_state_stays(tmp_path, prefetch):
  cfg = coded_config(tmp_path, [[5, 9, 3, 7] * 20, [11, 4, 6] * 20])
  reference = [digest(b) for b in jaxdata.Pipeline(cfg, prefetch=0)]
  pipe = jaxdata.Pipeline(cfg, prefetch=prefetch)
  taken = [digest(next(pipe)) for _ in range(2)]
  assert taken == reference[:2]
  state = pipe.get_state()
  pipe.close()
  for call in (lambda: next(pipe), lambda: pipe.set_state(state), lambda: pipe.update_mixture({"d0": 1, "d1": 2})):
    with pytest.raises(jaxdata.PipelineClosedError, match="closed.*after step 2"):
      call()
  assert pipe.get_state() == state and state["step"] == 2
  resumed = jaxdata.Pipeline(cfg, prefetch=prefetch)
  resumed.set_state(pipe.get_state())
  assert [digest(b) for b in resumed] == reference[2:]


def test_a_pipeline_closed_before_its_first_batch(tmp_path):
  cfg = coded_config(tmp_path, [[5, 9, 3, 7] * 10])
  pipe = jaxdata.Pipeline(cfg, prefetch=2)
  pipe.close()
  with pytest.raises(jaxdata.PipelineClosedError, match="after step 0"):
    next(pipe)
  assert pipe.get_state()["step"] == 0
  assert pipe.get_state() == jaxdata.Pipeline(cfg, prefetch=0).get_state()


def test_an_update_after_the_stream_ended_is_refused_and_bad_arguments_are_named(tmp_path):
  cfg = coded_config(tmp_path, [[5, 9, 3, 7] * 10], exhausted_policy="stop")
  with jaxdata.Pipeline(cfg, prefetch=0) as pipe:
    steps = len(list(pipe))
    with pytest.raises(ValueError, match=rf"update_mixture: the stream ended after step {steps}"):
      pipe.update_mixture({"d0": 1})
  for name, value in (("prefetch", True), ("prefetch", "2"), ("workers", 1.0), ("read_ahead_tokens", 2.5)):
    with pytest.raises(ValueError, match=rf"{name}: must be an int"):
      jaxdata.Pipeline(cfg, **{name: value})
