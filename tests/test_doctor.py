"""`jaxdata doctor` on runs made to show each symptom it names (docs/diagnostics.md), and on a healthy run."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from jaxdata import InputFormatError, Pipeline, load_config
from jaxdata.cli import main
from jaxdata.pipeline.planner import StepPlanner
from jaxdata.pipeline.stats import MAX_LISTED_SHARDS, _ShardNumbering
from jaxdata.testing import opened_datasets
from jaxdata.tools.doctor import diagnose
from jaxdata.tools.doctor_files import load_losses
from jaxdata.tools.report import load_stats
from pipeline_fixtures import write_coded_dataset

STEPS = 80


def run(tmp_path, name: str, counts: tuple[int, int] = (400, 300), **top) -> tuple[str, list[dict]]:
  """A run of STEPS steps over two datasets; returns its config path and its stats."""
  rng = np.random.default_rng(4)
  for d, count in enumerate(counts):
    if not (tmp_path / f"d{d}").exists():
      write_coded_dataset(str(tmp_path / f"d{d}"), d, rng.integers(2, 30, count).tolist(), shard_bytes=1200)
  config = tmp_path / f"{name}.yaml"
  raw = {
    "seed": 1,
    "datasets": [{"name": "d0", "path": "d0"}, {"name": "d1", "path": "d1"}],
    "mixture": {"weights": {"d0": 0.6, "d1": 0.4}, "interleave": "random"},
    "exhausted_policy": "repeat",
    "shuffle_block_size": "global",
    "packing": {"mode": "first_fit", "seq_len": 32},
    "batch": {"global_batch_size": 4},
    "stats_path": f"{name}.jsonl",
  }
  raw.update(top)
  config.write_text(yaml.safe_dump(raw))
  with Pipeline(load_config(str(config)), prefetch=0) as pipe:
    for _ in range(STEPS):
      next(pipe)
  return str(config), load_stats(str(tmp_path / f"{name}.jsonl"))


def write_losses(path, stats: list[dict], loss) -> str:
  with open(path, "w") as f:
    for s in stats:
      f.write(json.dumps({"step": s.step, "losses": {n: loss(s, n) for n in s.tokens_per_source}}) + "\n")
  return str(path)


def noise(s: dict, seed: int = 0) -> float:
  return float(np.random.default_rng([seed, s.step]).normal(0, 0.05))


def statuses(checks) -> dict[str, str]:
  return {c.name: c.status for c in checks}


def test_a_healthy_run_passes_every_check(tmp_path, capsys):
  config, stats = run(tmp_path, "healthy")
  losses = write_losses(tmp_path / "losses.jsonl", stats, lambda s, n: 2.0 + noise(s))
  assert (
    main(
      [
        "doctor",
        str(tmp_path / "healthy.jsonl"),
        "--losses",
        losses,
        "--config",
        config,
        "--hosts",
        "2",
        "--html",
        str(tmp_path / "doctor.html"),
      ]
    )
    == 0
  )
  printed = capsys.readouterr().out
  assert "0 failed, 0 warnings" in printed and "OK   histogram: D = " in printed and "OK   overlap: 0 pieces" in printed
  assert "<h1>jaxdata doctor</h1>" in (tmp_path / "doctor.html").read_text()


def test_swinging_histograms_fail_against_their_null(tmp_path):
  # 16 x 32 tokens a step: the documents (2..29 tokens) are small parts of a step, so a swing is the order's
  _, stats = run(tmp_path, "healthy", batch={"global_batch_size": 16})
  swung = []
  for s in stats:  # whole steps from one source, alternating: the totals stay, the steps swing
    total = sum(s.documents_per_source.values())
    one_source = {"d0": total, "d1": 0} if s.step % 2 else {"d0": 0, "d1": total}
    swung.append(dataclasses.replace(s, documents_per_source=one_source))
  assert statuses(diagnose(stats))["histogram"] == "ok"
  assert statuses(diagnose(swung))["histogram"] == "fail"


def test_an_unshuffled_dataset_read_shard_by_shard_shows_the_sawtooth(tmp_path):
  _, stats = run(
    tmp_path,
    "stored",
    shuffle_block_size=None,
    shuffle_shards=False,
    mixture={"weights": {"d0": 0.5, "d1": 0.5}, "interleave": "exact"},
  )
  checks = statuses(diagnose(stats))
  assert checks["sawtooth d0"] == "warn"  # one shard at a time, no loss log: a risk
  # The loss follows the position inside each shard (what a model sees when each shard drifts in difficulty).
  first_step = {}
  for s in stats:
    first_step.setdefault(s.shards["d0"][-1], s.step)
  losses = {
    s.step: {"d0": 2.0 + 0.1 * (s.step - first_step[s.shards["d0"][-1]]) + noise(s), "d1": 2.0 + noise(s, 1)}
    for s in stats
  }
  measured = {c.name: c for c in diagnose(stats, losses)}
  assert measured["sawtooth d0"].status == "warn" and "position inside the shard" in measured["sawtooth d0"].figure
  healthy_losses = {s.step: {"d0": 2.0 + noise(s), "d1": 2.0 + noise(s, 1)} for s in stats}
  assert statuses(diagnose(stats, healthy_losses))["sawtooth d0"] == "ok"


def test_the_same_order_every_pass_shows_a_drop_at_each_boundary(tmp_path):
  _, stats = run(tmp_path, "same", counts=(60, 40), reshuffle_on_repeat=False)
  assert stats[-1].passes["d1"] >= 2
  # A model that memorises the order: every new pass of d1 starts lower.
  drop = write_losses(tmp_path / "drop.jsonl", stats, lambda s, n: 3.0 - 0.3 * s.passes[n] + noise(s))
  flat = write_losses(tmp_path / "flat.jsonl", stats, lambda s, n: 3.0 + noise(s))
  assert main(["doctor", str(tmp_path / "same.jsonl"), "--losses", drop]) == 1

  assert statuses(diagnose(stats, load_losses(drop)))["boundaries d1"] == "fail"
  assert statuses(diagnose(stats, load_losses(flat)))["boundaries d1"] == "ok"


def test_many_passes_of_a_small_source_warn(tmp_path):
  _, stats = run(tmp_path, "healthy")
  tired = [*stats[:-1], dataclasses.replace(stats[-1], passes={**stats[-1].passes, "d1": 9})]
  assert statuses(diagnose(tired))["passes d1"] == "warn"


def test_a_malformed_loss_log_is_named(tmp_path):
  (tmp_path / "bad.jsonl").write_text('{"step": 1, "losses": {"a": 1.0}}\n{"step": 2}\n')
  with pytest.raises(InputFormatError, match=r"bad\.jsonl:2: expected"):
    load_losses(str(tmp_path / "bad.jsonl"))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.integers(0, 5), min_size=1, max_size=6), min_size=1, max_size=4), st.integers(0, 2**31))
def test_one_search_finds_every_records_shard(shard_sizes, seed):
  # Empty shards included: they share their start with the next shard and must never be named.
  starts = [np.concatenate([[0], np.cumsum(sizes)]) for sizes in shard_sizes]
  numbering = _ShardNumbering(starts)
  rng = np.random.default_rng(seed)
  for d, s in enumerate(starts):
    if s[-1] == 0:
      continue
    records = rng.integers(0, s[-1], 20)
    naive = np.searchsorted(s, records, side="right") - 1
    assert np.array_equal(numbering.of(np.full(20, d), records) - numbering.base[d], naive)
    assert (np.asarray(shard_sizes[d])[naive] > 0).all()


def test_a_global_shuffle_lists_eight_shards_and_counts_them_all(tmp_path):
  # Tiny shards (400 bytes) and a global shuffle: a step touches many shards of each source.
  config, stats = run(tmp_path, "wide", batch={"global_batch_size": 16})
  wide = [s for s in stats if max(s.shard_count.values()) > MAX_LISTED_SHARDS]
  assert wide  # the cap is exercised
  cfg = load_config(config)
  with Pipeline(cfg, prefetch=0) as pipe:
    starts = [np.asarray(d.record_starts) for d in opened_datasets(pipe)]
  from_plans = {}
  for plan in StepPlanner(cfg).plans():
    if plan.step >= len(stats):
      break
    per = {}
    for d, name in enumerate(cfg.names):
      records = plan.pieces.record[plan.pieces.dataset == d]
      if records.size:
        per[name] = np.unique(np.searchsorted(starts[d], records, side="right") - 1).tolist()
    from_plans[plan.step] = per
  for s in stats:
    expected = from_plans[s.step]
    assert s.shard_count == {name: len(ids) for name, ids in expected.items()}
    assert s.shards == {name: ids[:MAX_LISTED_SHARDS] for name, ids in expected.items()}


def run_steps(tmp_path, name: str, lengths: list[list[int]], steps: int, shard_bytes: int, **top) -> list[dict]:
  for d, doc_lengths in enumerate(lengths):
    write_coded_dataset(str(tmp_path / f"{name}{d}"), d, doc_lengths, shard_bytes=shard_bytes)
  raw = {
    "seed": 1,
    "datasets": [{"name": f"d{d}", "path": f"{name}{d}"} for d in range(len(lengths))],
    "mixture": {"weights": {f"d{d}": 1 for d in range(len(lengths))}},
    "exhausted_policy": "repeat",
    "shuffle_block_size": "global",
    "packing": {"mode": "first_fit", "seq_len": 32},
    "batch": {"global_batch_size": 4},
    "stats_path": f"{name}.jsonl",
    **top,
  }
  (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(raw))
  with Pipeline(load_config(str(tmp_path / f"{name}.yaml")), prefetch=0) as pipe:
    for _ in range(steps):
      next(pipe)
  return load_stats(str(tmp_path / f"{name}.jsonl"))


def test_a_single_shard_source_already_shuffled_shows_no_sawtooth_even_as_the_loss_falls(tmp_path):
  """One shard read over the whole run, globally shuffled: no shard period, no warning; a falling
  training loss over 200 steps is not a sawtooth."""
  rng = np.random.default_rng(5)
  stats = run_steps(
    tmp_path, "one", [rng.integers(2, 30, 3000).tolist(), rng.integers(2, 30, 3000).tolist()], 200, shard_bytes=1 << 30
  )
  assert {len(s.shards["d0"]) for s in stats} == {1}
  losses = {s.step: {"d0": 4.0 - 0.01 * s.step + noise(s), "d1": 4.0 - 0.01 * s.step + noise(s, 1)} for s in stats}
  for checks in (diagnose(stats), diagnose(stats, losses)):
    assert statuses(checks)["sawtooth d0"] == "ok" and statuses(checks)["sawtooth d1"] == "ok"


def test_a_falling_loss_over_several_stored_shards_is_not_a_sawtooth(tmp_path):
  _, stats = run(
    tmp_path,
    "stored",
    shuffle_block_size=None,
    shuffle_shards=False,
    mixture={"weights": {"d0": 0.5, "d1": 0.5}, "interleave": "exact"},
  )
  falling = {s.step: {"d0": 4.0 - 0.02 * s.step + noise(s), "d1": 4.0 + noise(s, 1)} for s in stats}
  assert statuses(diagnose(stats, falling))["sawtooth d0"] == "ok"


def test_swings_from_documents_longer_than_a_step_name_the_data_not_the_order(tmp_path):
  """Documents of thousands of tokens in 128-token steps, with a global shuffle and the exact interleave already:
  the histogram swings, and the advice names the documents' length, not a shuffle."""
  rng = np.random.default_rng(6)
  stats = run_steps(
    tmp_path,
    "long",
    [rng.integers(2000, 5000, 40).tolist(), rng.integers(2, 30, 2000).tolist()],
    150,
    shard_bytes=1 << 14,
  )
  histogram = {c.name: c for c in diagnose(stats)}["histogram"]
  assert histogram.status == "warn", histogram.line()  # the data's swing: named, not a fault of the order
  assert "the data, not the order" in histogram.advice and "d0" in histogram.advice
  assert "shuffle" not in histogram.advice.split("For steadier")[0]
