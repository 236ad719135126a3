"""group_by_length: unpacked rows of similar length batched together, randomness kept at group level."""

from __future__ import annotations

import numpy as np
import pytest

from checkpoint_property import assert_restores_exactly
from jaxdata import ConfigError, Pipeline, PipelineConfig
from pipeline_fixtures import coded_config, decode, digest


def config(tmp_path, group: int) -> PipelineConfig:
  rng = np.random.default_rng(12)
  lengths = np.clip(rng.lognormal(3.0, 0.9, 600).astype(int), 1, 200).tolist()
  return coded_config(
    tmp_path,
    [lengths],
    shuffle_block_size="global",
    exhausted_policy="repeat",
    packing={"mode": "none", "seq_len": 128, "group_by_length": group},
    batch={"global_batch_size": 8},
  )


def run(cfg: PipelineConfig, steps: int) -> tuple[list[tuple[int, int]], float]:
  """(record, row length) of every row over `steps` steps, and the padding left when every batch is
  cut to its longest row (what a loop with per-batch lengths pays; the stats report it per step)."""
  rows, pad, cells = [], 0, 0
  with Pipeline(cfg, prefetch=0) as pipe:
    for _ in range(steps):
      batch = next(pipe)
      tokens, segments = np.asarray(batch["tokens"]), np.asarray(batch["segment_ids"])
      _, records, _ = decode(tokens[:, 0])
      lengths = (segments > 0).sum(axis=1)
      rows.extend(zip(records.tolist(), lengths.tolist()))
      pad += int((lengths.max() - lengths).sum())
      cells += lengths.size * int(lengths.max())
      stats = pipe.stats()
      assert stats["longest_row"] == lengths.max()
      assert stats["padding_fraction_to_longest"] == pytest.approx(1 - lengths.sum() / (lengths.size * lengths.max()))
  return rows, pad / cells


@pytest.mark.slow
def test_grouping_reads_the_same_documents_with_far_less_padding(tmp_path):
  plain, plain_pad = run(config(tmp_path / "a", 0), 150)  # 1,200 rows: two passes of 600 documents
  grouped, grouped_pad = run(config(tmp_path / "b", 20), 150)
  # Six groups of 20 batches x 8 rows = 960 rows re-ordered; the documents read are the same multiset.
  assert sorted(plain[:960]) == sorted(grouped[:960])
  assert grouped_pad < 0.5 * plain_pad, (plain_pad, grouped_pad)
  # Inside every batch the lengths are close: within a batch, the spread is a fraction of the plain one.
  spread = lambda rows: np.mean([np.ptp([n for _, n in rows[i : i + 8]]) for i in range(0, 960, 8)])
  assert spread(grouped) < 0.2 * spread(plain)


def test_batch_order_inside_a_group_is_shuffled_not_sorted(tmp_path):
  grouped, _ = run(config(tmp_path, 20), 20)  # exactly one group
  longest = [max(n for _, n in grouped[i : i + 8]) for i in range(0, 160, 8)]
  assert longest != sorted(longest, reverse=True) and longest != sorted(longest)


@pytest.mark.slow
def test_state_at_every_step_restores_mid_group(tmp_path):
  cfg = config(tmp_path, 5)

  def advance(pipe: Pipeline, n: int) -> list[tuple]:
    return [digest(next(pipe)) for _ in range(n)]

  assert_restores_exactly(lambda: Pipeline(cfg, prefetch=0), advance, total=12, stops=range(12))


def test_grouping_needs_unpacked_rows():
  with pytest.raises(ConfigError, match=r"packing\.group_by_length: 4 groups unpacked rows; it needs mode: none"):
    PipelineConfig.from_dict(
      {
        "datasets": [{"name": "a"}],
        "mixture": {"weights": {"a": 1}},
        "packing": {"mode": "first_fit", "group_by_length": 4},
      }
    )
