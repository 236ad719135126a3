"""Token shares are shares of the tokens that reach the batches, under every packing rule.

The oracle is the packer's own output (the pieces it places), not the
stream's counts: the mixture counts what `PackingConfig.kept_tokens` says
packing keeps, and these tests check that the batches hold that.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jaxdata.config import PipelineConfig
from jaxdata.errors import ConfigError
from jaxdata.mixture.stream import DatasetMeta, DocumentStream
from jaxdata.pipeline.planner import StepPlanner
from jaxdata.pipeline.step_stats import StepStats
from jaxdata.tools.audit import audit
from jaxdata.tools.doctor import diagnose
from jaxdata.tools.exposure import kept_supply
from jaxdata.tools.report import report_series

SEQ_LEN = 64


def config(weights: dict[str, float], **packing: object) -> PipelineConfig:
  return PipelineConfig.from_dict(
    {
      "seed": 5,
      "datasets": [{"name": n} for n in weights],
      "mixture": {"weights": weights},
      "exhausted_policy": "repeat",
      "packing": {"seq_len": SEQ_LEN, **packing},
      "batch": {"global_batch_size": 4},
    }
  )


def kept_by_rule(lengths: np.ndarray, mode: str, long_docs: str, extra: int, seq_len: int) -> np.ndarray:
  """The rule as docs/configuration.md states it, written here again (not the library's function)."""
  span = lengths + extra
  if long_docs == "drop":
    return np.where(span > seq_len, 0, span)
  if mode == "none" or (long_docs == "truncate" and mode != "concat"):
    return np.minimum(span, seq_len)
  return span


def realised(planner: StepPlanner, steps: int, count: int) -> np.ndarray:
  tokens = np.zeros(count)
  for plan in planner.plans(steps):
    tokens += np.bincount(plan.pieces.dataset, weights=plan.pieces.length, minlength=count)
  return tokens


# Length distributions: short, mixed, and sets where most documents exceed a row.
lengths_strategy = st.one_of(
  st.lists(st.integers(1, SEQ_LEN // 2), min_size=1, max_size=40),
  st.lists(st.integers(1, 4 * SEQ_LEN), min_size=1, max_size=40),
  st.lists(st.integers(SEQ_LEN - 4, 8 * SEQ_LEN), min_size=1, max_size=40).map(lambda v: [*v, 3]),
)


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(
  data=st.data(),
  count=st.integers(2, 4),
  mode=st.sampled_from(["first_fit", "best_fit", "concat", "none"]),
  long_docs=st.sampled_from(["split", "truncate", "drop"]),
  add_eos=st.booleans(),
  cap=st.sampled_from([None, 2]),
  group=st.sampled_from([0, 3]),
)
def test_the_batches_hold_the_weights_in_kept_tokens(data, count, mode, long_docs, add_eos, cap, group):
  names = [f"d{i}" for i in range(count)]
  weights = data.draw(st.lists(st.integers(1, 9), min_size=count, max_size=count))
  lengths = {n: np.asarray(data.draw(lengths_strategy)) for n in names}
  if long_docs == "drop":  # every set keeps one document that fits a row (else refused: below)
    lengths = {n: np.append(v, 2) for n, v in lengths.items()}
  packing = {"mode": mode, "long_docs": long_docs, "add_eos": add_eos, "eos_id": 0}
  if cap is not None and mode != "none":
    packing["max_segments_per_row"] = cap
  if group and mode == "none":  # batches of similar lengths: a group of 3 steps is drawn at once
    packing["group_by_length"] = group
  cfg = config(dict(zip(names, weights)), **packing)
  metas = {n: DatasetMeta.from_lengths(v) for n, v in lengths.items()}
  # The stream: at every prefix, each dataset's kept tokens within one kept document of its target.
  batch = DocumentStream(cfg, metas).take(0, max_docs=600)
  kept = np.zeros(len(batch))
  for i in range(count):
    mine = batch.dataset == i
    kept[mine] = kept_by_rule(batch.length[mine], mode, long_docs, int(add_eos), SEQ_LEN)
  share = np.asarray(weights, float) / sum(weights)
  per_dataset = np.zeros((len(batch), count))
  per_dataset[np.arange(len(batch)), batch.dataset] = kept
  cumulative = np.cumsum(per_dataset, axis=0)
  longest = max(int(kept_by_rule(v, mode, long_docs, int(add_eos), SEQ_LEN).max()) for v in lengths.values())
  worst = np.abs(cumulative - share[None, :] * cumulative.sum(axis=1, keepdims=True)).max()
  assert worst <= longest + 1e-6  # the exact interleave's bound, for kept tokens
  # The batches: what reached them is the stream's kept tokens less the carry (under a step plus a
  # document, or a group of steps, so that bounds the gap, with one more document for the stream).
  planner = StepPlanner(cfg, metas)
  tokens = realised(planner, 40, count)
  gap = np.abs(tokens - share * tokens.sum()).max()
  held_back = cfg.tokens_per_step * max(1, cfg.packing.group_by_length)
  assert gap <= 2 * held_back + 2 * longest


@pytest.mark.parametrize("long_docs", ["split", "truncate", "drop"])
@pytest.mark.parametrize("mode", ["first_fit", "none"])
def test_web_and_code_keep_their_shares_when_code_documents_exceed_a_row(long_docs, mode):
  """The reported case: web .75 / code .25, code documents averaging ~6,000 tokens, rows of 2,048.
  Before the mixture counted kept tokens, truncate gave .90 / .10 and drop 1.0 / 0.0."""
  rng = np.random.default_rng(0)
  metas = {
    "web": DatasetMeta.from_lengths(rng.integers(50, 1500, 4000)),
    "code": DatasetMeta.from_lengths(rng.integers(2000, 10000, 1000)),
  }
  cfg = PipelineConfig.from_dict(
    {
      "datasets": [{"name": "web"}, {"name": "code"}],
      "mixture": {"weights": {"web": 0.75, "code": 0.25}},
      "exhausted_policy": "repeat",
      "packing": {"mode": mode, "seq_len": 2048, "long_docs": long_docs, "add_eos": True, "eos_id": 2},
      "batch": {"global_batch_size": 32},
    }
  )
  tokens = realised(StepPlanner(cfg, metas), 100, 2)
  # 100 steps of 65,536 tokens; the carry and one document (< 3 steps) bound the gap: 3 / 100.
  assert abs(tokens[1] / tokens.sum() - 0.25) < 0.03
  assert abs(tokens[1] / tokens.sum() - 0.25) < 0.005  # what it is in fact (a regression guard)


def test_drop_refuses_a_dataset_none_of_whose_documents_fits_a_row():
  metas = {"a": DatasetMeta.from_lengths([10, 20]), "long": DatasetMeta.from_lengths([100, 200])}
  cfg = config({"a": 1, "long": 1}, long_docs="drop")
  with pytest.raises(ConfigError, match=r"datasets\.long: every document is longer than the rows of step 0"):
    next(iter(StepPlanner(cfg, metas).plans(1)))


def test_drop_refuses_at_the_warmup_step_whose_rows_are_too_short():
  """A length warmup (16 -> 64) with documents of 20-59 tokens: no document fits the first rows."""
  metas = {"a": DatasetMeta.from_lengths(list(range(20, 60)))}
  cfg = config({"a": 1}, long_docs="drop", warmup=[{"until_step": 2, "seq_len": 16}])
  with pytest.raises(ConfigError, match="rows of step 0 .* rows hold 16"):
    next(iter(StepPlanner(cfg, metas).plans(1)))


def test_audit_compares_the_batches_shares_with_the_targets():
  rng = np.random.default_rng(1)
  metas = {
    "web": DatasetMeta.from_lengths(rng.integers(5, 60, 400)),
    "code": DatasetMeta.from_lengths(rng.integers(50, 400, 100)),
  }
  cfg = config({"web": 3, "code": 1}, long_docs="truncate")
  result = audit(cfg, 1, 60, metas)
  assert result.ok, result.failures
  assert abs(result.realised_share["code"] - 0.25) <= result.realised_bound
  assert result.realised_bound < 0.25  # the check can fail: a policy that moved a share by .15 would


def stats_of(planner: StepPlanner, steps: int, names: list[str], weights: list[float]) -> list[StepStats]:
  out = []
  for plan in planner.plans(steps):
    tokens = np.bincount(plan.pieces.dataset, weights=plan.pieces.length, minlength=len(names)).astype(int)
    begun = np.bincount(plan.pieces.dataset[plan.pieces.offset == 0], minlength=len(names))
    out.append(
      StepStats(
        step=plan.step,
        tokens_per_source=dict(zip(names, tokens.tolist())),
        documents_per_source=dict(zip(names, begun.tolist())),
        target_share=dict(zip(names, weights)),
      )
    )
  return out


def test_doctor_and_report_flag_shares_off_target_and_pass_a_correct_run():
  rng = np.random.default_rng(2)
  metas = {
    "web": DatasetMeta.from_lengths(rng.integers(5, 60, 400)),
    "code": DatasetMeta.from_lengths(rng.integers(50, 400, 100)),
  }
  cfg = config({"web": 3, "code": 1}, long_docs="drop")
  stats = stats_of(StepPlanner(cfg, metas), 200, ["web", "code"], [0.75, 0.25])
  check = next(c for c in diagnose(stats) if c.name == "shares")
  assert check.status == "ok", check.line()
  assert report_series(stats)["off_target"] == []
  # The same steps with code's tokens as the mixture gave before it counted kept tokens (~.09):
  skewed = [
    dataclasses.replace(
      s,
      tokens_per_source={
        "web": 91 * sum(s.tokens_per_source.values()) // 100,
        "code": 9 * sum(s.tokens_per_source.values()) // 100,
      },
    )
    for s in stats
  ]
  check = next(c for c in diagnose(skewed) if c.name == "shares")
  assert check.status == "fail", check.line()
  assert report_series(skewed)["off_target"] == ["web", "code"]


def test_report_and_doctor_count_documents_for_a_document_mixture():
  """unit: documents: targets are document shares, so the realised side counts documents."""
  rng = np.random.default_rng(3)
  metas = {
    "chat": DatasetMeta.from_lengths(rng.integers(5, 60, 300)),
    "safety": DatasetMeta.from_lengths(rng.integers(2, 8, 300)),
  }
  cfg = PipelineConfig.from_dict(
    {
      **config({"chat": 0.9, "safety": 0.1}).to_dict(),
      "mixture": {"weights": {"chat": 0.9, "safety": 0.1}, "unit": "documents"},
    }
  )
  stats = [
    dataclasses.replace(s, unit="documents")
    for s in stats_of(StepPlanner(cfg, metas), 100, ["chat", "safety"], [0.9, 0.1])
  ]
  series = report_series(stats)
  assert series["unit"] == "documents" and series["off_target"] == []
  # tokens would say safety is ~.02 of the batches: short documents
  tokens = np.array([[s.tokens_per_source[n] for n in ("chat", "safety")] for s in stats]).sum(axis=0)
  assert tokens[1] / tokens.sum() < 0.05
  assert abs(series["cumulative_share"]["safety"][-1] - 0.1) < 0.01
  assert next(c for c in diagnose(stats) if c.name == "shares").status == "ok"


def test_plan_counts_passes_of_what_packing_keeps():
  """Exposure's supply (what one pass holds) is in kept tokens, as the mixture counts them: under
  truncate a 5,000-token document is one row's worth, under drop nothing, with EOS one more each."""
  meta = DatasetMeta.from_lengths([10, 5000, 30])
  expected = {"split": 10 + 5000 + 30 + 3, "truncate": 11 + SEQ_LEN + 31, "drop": 11 + 31}
  for long_docs, tokens in expected.items():
    assert kept_supply(meta, config({"a": 1}, long_docs=long_docs, add_eos=True, eos_id=0)) == tokens
