"""Linear sequence-length warmup (the documented example: 512 -> 2048 over 2,000 steps, multiples of 64) and step
boundaries as fractions of total_steps."""

from __future__ import annotations

import numpy as np
import pytest

from checkpoint_property import assert_restores_exactly
from jaxdata import ConfigError, Pipeline, PipelineConfig
from pipeline_fixtures import coded_config, digest


def max_seq_len(step: int, start: int = 512, final: int = 2048, warmup: int = 2000, multiple: int = 64) -> int:
  """The documented schedule, as docs/configuration.md states it: linear, rounded down to a multiple."""
  if step >= warmup:
    return final
  return int((start + (final - start) * step / warmup) // multiple * multiple)


def test_the_linear_warmup_is_seed_000s_function_step_by_step():
  cfg = PipelineConfig.from_dict(
    {
      "datasets": [{"name": "a"}],
      "mixture": {"weights": {"a": 1}},
      "packing": {"seq_len": 2048, "linear_warmup": {"start": 512, "steps": 2000}},
      "batch": {"global_batch_size": 64},
    }
  )
  assert [cfg.packing.seq_len_at(s) for s in range(2600)] == [max_seq_len(s) for s in range(2600)]
  assert {cfg.rows_at(s) for s in range(2600)} == {64}  # constant rows: tokens per step grow
  assert cfg.packing.seq_lens() == tuple(range(512, 2049, 64))  # 25 shapes to compile, no more


def test_fractions_of_total_steps_place_boundaries_like_the_seed():
  total = 12_345
  cfg = PipelineConfig.from_dict(
    {
      "datasets": [{"name": "a"}, {"name": "b"}],
      "total_steps": total,
      "mixture": {"schedule": [{"weights": {"a": 1, "b": 1}, "until_step": 0.9}, {"weights": {"a": 1, "b": 0}}]},
      "packing": {"seq_len": 2048, "linear_warmup": {"start": 512, "steps": 0.1}},
    }
  )
  assert cfg.mixture.schedule[0].until_step == int(0.9 * total)  # anneal_start = int(0.9 * total_steps)
  assert cfg.packing.linear_warmup.steps == int(0.1 * total)
  with pytest.raises(ConfigError, match=r"mixture\.schedule\[0\]\.until_step: 0\.9 is a fraction of total_steps, but "):
    PipelineConfig.from_dict(
      {
        "datasets": [{"name": "a"}],
        "mixture": {"schedule": [{"weights": {"a": 1}, "until_step": 0.9}, {"weights": {"a": 1}}]},
      }
    )
  with pytest.raises(ConfigError, match=r"packing\.linear_warmup: give it or packing\.warmup"):
    PipelineConfig.from_dict(
      {
        "datasets": [{"name": "a"}],
        "mixture": {"weights": {"a": 1}},
        "packing": {
          "seq_len": 64,
          "warmup": [{"until_step": 5, "seq_len": 32}],
          "linear_warmup": {"start": 16, "steps": 10},
        },
      }
    )


@pytest.mark.slow
def test_batches_follow_the_warmup_and_resume_exactly_mid_warmup(tmp_path):
  cfg = coded_config(
    tmp_path,
    [np.random.default_rng(2).integers(2, 60, 400).tolist()],
    exhausted_policy="repeat",
    packing={"mode": "first_fit", "seq_len": 32, "linear_warmup": {"start": 8, "steps": 12, "granularity": 4}},
    batch={"global_batch_size": 4},
  )
  with Pipeline(cfg, prefetch=0) as pipe:
    shapes = [np.asarray(next(pipe)["tokens"]).shape for _ in range(16)]
  assert shapes == [(4, max_seq_len(s, 8, 32, 12, 4)) for s in range(16)]

  def advance(pipe: Pipeline, n: int) -> list[tuple]:
    return [digest(next(pipe)) for _ in range(n)]

  assert_restores_exactly(lambda: Pipeline(cfg, prefetch=0), advance, total=14, stops=range(14))


def test_keep_tokens_shrinks_the_rows_as_the_length_grows(tmp_path):
  cfg = coded_config(
    tmp_path,
    [np.random.default_rng(3).integers(2, 60, 400).tolist()],
    exhausted_policy="repeat",
    packing={
      "mode": "first_fit",
      "seq_len": 32,
      "linear_warmup": {"start": 8, "steps": 12, "granularity": 4, "keep": "tokens", "row_multiple": 2},
    },
    batch={"global_batch_size": 4},
  )
  expected = [max(2, 4 * 32 // max_seq_len(s, 8, 32, 12, 4) // 2 * 2) for s in range(16)]
  assert [cfg.rows_at(s) for s in range(16)] == expected and expected[0] == 16 and expected[-1] == 4
  with Pipeline(cfg, prefetch=0) as pipe:
    shapes = [np.asarray(next(pipe)["tokens"]).shape for _ in range(16)]
  assert shapes == [(expected[s], max_seq_len(s, 8, 32, 12, 4)) for s in range(16)]
  assert all(rows * length <= 4 * 32 for rows, length in shapes)  # never more tokens than a full step
