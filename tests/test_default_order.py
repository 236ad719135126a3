"""The default order mixes every dataset of any size on every pass; stored order is asked for by name."""

from __future__ import annotations

import logging

import numpy as np

from jaxdata import Pipeline, from_iterable
from jaxdata.config import PipelineConfig
from jaxdata.mixture.stream import DatasetMeta, DocumentStream
from jaxdata.tools.doctor import order_checks

RECORDS = 10


def one_shard_config(**top: object) -> PipelineConfig:
  return PipelineConfig.from_dict(
    {
      "datasets": [{"name": "sft"}],
      "mixture": {"weights": {"sft": 1}, "unit": "documents"},
      "exhausted_policy": "repeat",
      **top,
    }
  )


def records_by_pass(cfg: PipelineConfig, passes: int, epoch: int = 0) -> np.ndarray:
  meta = {"sft": DatasetMeta.from_lengths([3] * RECORDS)}  # one shard, as conversion writes a small set
  batch = DocumentStream(cfg, meta, epoch=epoch).take(0, max_docs=passes * RECORDS)
  assert (batch.pass_index == np.repeat(np.arange(passes), RECORDS)).all()
  return batch.record.reshape(passes, RECORDS)


def test_a_one_shard_set_is_shuffled_every_pass_under_the_defaults():
  orders = records_by_pass(one_shard_config(), 3)
  assert not (orders == np.arange(RECORDS)).all(axis=1).any()  # no pass in stored order (was 0..9 three times)
  assert len({tuple(o) for o in orders}) == 3  # and every pass differs
  assert all(sorted(o) == list(range(RECORDS)) for o in orders)  # each pass is a permutation


def test_a_one_shard_sets_positions_are_uniform_over_passes():
  """Null: every pass a uniform permutation, so record r lands at position p with probability 1/10.
  Over 800 passes each of the 100 (record, position) cells expects 80; the chi-square statistic has
  (10 - 1)^2 = 81 degrees of freedom (mean 81, sd sqrt(162) = 12.7): fail above 81 + 5 sd = 145."""
  orders = records_by_pass(one_shard_config(), 800)
  table = np.zeros((RECORDS, RECORDS))
  np.add.at(table, (orders, np.broadcast_to(np.arange(RECORDS), orders.shape)), 1)
  chi2 = float(((table - 80) ** 2 / 80).sum())
  assert chi2 < 81 + 5 * np.sqrt(2 * 81), chi2
  # stored order (asked for by name) is the extreme: every pass 0..9, the statistic at its maximum
  stored = records_by_pass(one_shard_config(shuffle_block_size=None), 800)
  assert (stored == np.arange(RECORDS)).all()


def test_epochs_give_different_orders_under_the_defaults():
  first, second = records_by_pass(one_shard_config(), 1, epoch=0), records_by_pass(one_shard_config(), 1, epoch=1)
  assert first.tolist() != second.tolist()


def test_stored_order_is_named_by_the_doctor_and_the_pipeline_log(tmp_path, caplog):
  path = str(tmp_path / "sft")
  from_iterable([[1, 2, 3]] * 20, out=path)
  cfg = PipelineConfig.from_dict(
    {
      "datasets": [{"name": "sft", "path": path, "shuffle_block_size": None}, {"name": "web", "path": path}],
      "mixture": {"weights": {"sft": 1, "web": 1}},
      "exhausted_policy": "repeat",
      "packing": {"seq_len": 8},
      "batch": {"global_batch_size": 2},
    }
  )
  checks = {c.name: c for c in order_checks(cfg)}
  assert checks["order sft"].status == "warn" and "stored order" in checks["order sft"].figure
  assert checks["order web"].status == "ok" and checks["order web"].figure == "global shuffle"
  with caplog.at_level(logging.INFO, logger="jaxdata"):
    Pipeline(cfg, prefetch=0).close()
  logged = [r.getMessage() for r in caplog.records if "stored order" in r.getMessage()]
  assert len(logged) == 1 and "dataset sft" in logged[0]
