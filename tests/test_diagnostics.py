"""Planning and diagnostics: exposure, plan / audit / report commands, mixing helpers."""

from __future__ import annotations

import dataclasses
import json
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import yaml

from jaxdata import Pipeline, PipelineConfig, load_config
from jaxdata.cli import main
from jaxdata.config.schedule import Schedule
from jaxdata.mixture import DatasetMeta
from jaxdata.pipeline.planner import StepPlanner
from jaxdata.research.mixing import doremi_average, doremi_round, doremi_update, importance_weights, per_source_loss
from jaxdata.tools.audit import audit, audit_plans
from jaxdata.tools.exposure import exposure, parse_tokens, schedule_exposure, simulate_end
from pipeline_fixtures import coded_config, fresh_python, write_coded_dataset

# ------------------------------------------------------------------ exposure


def test_exposure_arithmetic_by_hand():
  supply = {"small": 50e6, "tiny": 30e6, "rest": 920e6}
  table = exposure(supply, {"small": 0.025, "tiny": 0.02, "rest": 0.955}, 1e9)
  assert table.datasets["small"].passes == pytest.approx(0.5)
  assert table.datasets["tiny"].passes == pytest.approx(2 / 3)
  assert table.datasets["small"].natural_share == pytest.approx(0.05)
  assert table.datasets["small"].upsampling == [pytest.approx(0.5)]
  assert table.datasets["small"].processed_tokens == [pytest.approx(25e6)]
  longer = exposure(supply, {"small": 0.025, "tiny": 0.02, "rest": 0.955}, parse_tokens("15B"))
  assert longer.datasets["small"].passes == pytest.approx(7.5)
  assert any(w.startswith("small: 7.50 passes") for w in longer.warnings)
  assert not any(w.startswith("rest") for w in exposure(supply, {"small": 1, "tiny": 1, "rest": 98}, 1e9).warnings)


def test_exposure_over_phases_and_pass_completion_steps():
  schedule = Schedule.from_phases(["a", "b"], [({"a": 1, "b": 1}, 10, 0), ({"a": 1, "b": 3}, None, 0)])
  table = schedule_exposure({"a": 100, "b": 1000}, schedule, total_tokens=300, tokens_per_step=10)
  a = table.datasets["a"]
  assert table.steps == 30 and table.phases == [(0, 10), (10, 30)]
  assert a.sampling_share == [0.5, 0.25] and table.datasets["b"].sampling_share == [0.5, 0.75]
  assert a.processed_tokens == [50.0, 50.0]  # 10 steps x 10 x 0.5, then 20 x 10 x 0.25
  assert a.passes == pytest.approx(1.0)
  # a gets 5 tokens per step for 10 steps (50), then 2.5 per step: 100 at step index 29.
  assert a.pass_completed_at_step == [29]
  for phase in range(2):
    assert sum(d.sampling_share[phase] for d in table.datasets.values()) == pytest.approx(1.0)


@pytest.mark.parametrize(
  "call, message",
  [
    (lambda: exposure({"a": 1, "z": 1}, {"a": 1}, 10), "'z' is not one of 'a'"),
    (lambda: exposure({"a": 1}, {"a": 1, "b": 1}, 10), "'b' has no supply"),
    (lambda: exposure({"a": 0}, {"a": 1}, 10), "dataset 'a' has supply 0"),
    (lambda: exposure({"a": float("nan")}, {"a": 1}, 10), "dataset 'a' has supply nan"),
    (lambda: exposure({"a": 1}, {"a": 1}, -5), "total_tokens: must be a positive finite number"),
    (lambda: exposure({"a": 1}, {"a": 1}, float("inf")), "total_tokens"),
    (lambda: exposure({"a": 1}, {"a": -1}, 10), "weight of 'a' must be >= 0"),
    (lambda: parse_tokens("many"), "cannot read 'many'"),
  ],
)
def test_exposure_rejects_bad_input(call, message):
  with pytest.raises(ValueError, match=message):
    call()


@pytest.fixture
def pipeline_yaml(tmp_path) -> str:
  rng = np.random.default_rng(6)
  cfg = coded_config(tmp_path, [rng.integers(1, 40, 80).tolist(), rng.integers(1, 90, 30).tolist()])
  path = tmp_path / "pipeline.yaml"
  path.write_text(
    yaml.safe_dump(
      {
        "datasets": [{"name": d.name, "path": d.path} for d in cfg.datasets],
        "mixture": {"schedule": [{"until_step": 3, "weights": {"d0": 3, "d1": 1}}, {"weights": {"d0": 1, "d1": 1}}]},
        "stop_after_passes": 2,
        "packing": {"mode": "best_fit", "seq_len": 32},
        "batch": {"global_batch_size": 8, "drop_remainder": False},
        "stats_path": "run/stats.jsonl",
      }
    )
  )
  (tmp_path / "run").mkdir()
  return str(path)


def test_a_plan_past_its_packed_sample_scales_steps_by_the_measured_fill(pipeline_yaml, monkeypatch):
  """Beyond the steps the real packer plans, a step holds the share of its slots the planned ones filled:
  the end lands within 2% of the pipeline's (a packer without padding would say ~5% early)."""
  cfg = load_config(pipeline_yaml)
  actual = sum(1 for _ in StepPlanner(cfg).plans())
  monkeypatch.setattr("jaxdata.tools.exposure.PACKED_SAMPLE_STEPS", 10)
  predicted = simulate_end(cfg, None, 10_000)
  assert predicted is not None and abs(predicted.steps - actual) <= 0.02 * actual + 1, (predicted.steps, actual)
  monkeypatch.setattr("jaxdata.tools.exposure.PACKED_SAMPLE_STEPS", 0)  # no sample: fill 1, the old estimate
  assert simulate_end(cfg, None, 10_000).steps < predicted.steps


@pytest.mark.slow
def test_plan_command_json_png_and_warnings(pipeline_yaml, tmp_path, capsys):
  png = tmp_path / "plan.png"
  assert main(["plan", pipeline_yaml, "--tokens", "20k", "--json", "--png", str(png), "--max-passes", "3"]) == 0
  table = json.loads(capsys.readouterr().out)
  # stop_after_passes: 2 ends the stream long before 20k tokens: exposure is up to the end, which
  # the real packer plans (within its first 2,000 steps: exactly the pipeline's end, padding included).
  actual = sum(1 for _ in StepPlanner(load_config(pipeline_yaml)).plans())
  end = table["stream_end"]
  assert end["steps"] == table["steps"] == actual and table["tokens_per_step"] == 256
  assert end["policy"] == "passes" and end["ended_by"] in ("d0", "d1")
  assert table["warnings"][0].startswith(f"the stream ends after about {end['steps']} steps")
  assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
  d0 = table["datasets"]["d0"]
  assert d0["sampling_share"] == [pytest.approx(0.75), pytest.approx(0.5)]
  assert main(["plan", pipeline_yaml, "--tokens", "20k", "--max-passes", "1.5"]) == 0
  out = " ".join(capsys.readouterr().out.split())
  assert "phase 0 (steps 0-3): sampling shares sum to 1.000000" in out
  assert f"warning: the stream ends after about {end['steps']} steps" in out
  assert "of the 20k tokens asked (the stream ends first)" in out  # the title: what was planned, of what asked
  assert "warning: d0:" in out  # about 2 passes of d0 before the end, above 1.5
  # Every column is explained in words under the table (unique seen only for window draws).
  assert "what the columns mean:" in out
  for column in (
    "unique U_d",
    "natural",
    "sampling w_d",
    "upsampling",
    "processed",
    "passes (run)",
    "pass completes at step",
  ):
    assert f" {column}: " in out, column
  assert "unique seen:" not in out


# ------------------------------------------------------------------ audit


def test_audit_passes_on_the_real_plan(pipeline_yaml, capsys):
  assert main(["audit", pipeline_yaml, "--hosts", "2", "--steps", "60", "--json"]) == 0
  result = json.loads(capsys.readouterr().out)
  assert result["ok"] and result["piece_overlaps"] == 0
  assert {"d0 pass 0", "d1 pass 0"} <= set(result["passes_checked"])
  assert abs(result["share_deviation"]["d0"]) <= result["share_bound"]
  assert set(result["residual_ratio"]) == {"d0", "d1"}


def test_an_audit_past_the_streams_end_counts_only_the_steps_handed_out(tmp_path):
  """The stream stops inside a step (drop_remainder drops it): the documents pulled for that step are
  counted neither as taken nor in the targets, so the exact interleave's bound holds to the end."""
  rng = np.random.default_rng(5)
  cfg = coded_config(
    tmp_path,
    [rng.integers(1, 60, 90).tolist(), rng.integers(1, 30, 200).tolist()],
    mixture={"weights": {"d0": 3, "d1": 1}, "unit": "tokens"},
    packing={"seq_len": 32},
  )
  handed_out = list(StepPlanner(cfg).plans(10_000))
  result = audit(cfg, 2, len(handed_out) + 50)
  assert result.steps == len(handed_out) and result.ok, result.failures
  for d, name in enumerate(cfg.names):
    tokens = sum(int(p.pieces.length[p.pieces.dataset == d].sum()) for p in handed_out)
    assert result.taken[name] == pytest.approx(tokens, abs=result.share_bound)  # pieces of one document split
    assert abs(result.share_deviation[name]) <= result.share_bound


def planned(config_path: str, steps: int):
  cfg = load_config(config_path)
  planner = StepPlanner(cfg)
  plans = list(planner.plans(steps))
  lengths = {c.settings.name: c.lengths for c in planner.stream.cursors}
  return cfg, plans, lengths, planner.stream.passes_completed(), planner.packer.carry


def test_audit_fails_on_a_broken_plan(pipeline_yaml):
  cfg, plans, lengths, completed, carry = planned(pipeline_yaml, 60)
  assert audit_plans(cfg, plans, 2, lengths, completed, carry).ok
  # A piece duplicated onto the other host's rows of the same step.
  plan = plans[1]
  first = plan.pieces.take(np.array([0]))
  moved_row = (plan.row[0] + plan.rows // 2) % plan.rows
  duplicated = dataclasses.replace(
    plan,
    pieces=type(plan.pieces).concatenate([plan.pieces, first]),
    row=np.r_[plan.row, moved_row],
    column=np.r_[plan.column, 0],
  )
  broken = audit_plans(cfg, [plans[0], duplicated, *plans[2:]], 2, lengths, completed, carry)
  assert not broken.ok and broken.piece_overlaps == 1
  assert any("on hosts [0, 1]" in f for f in broken.failures)
  # A document dropped from a complete pass.
  dropped = dataclasses.replace(
    plans[0],
    pieces=plans[0].pieces.take(np.arange(1, len(plans[0].pieces))),
    row=plans[0].row[1:],
    column=plans[0].column[1:],
  )
  missing = audit_plans(cfg, [dropped, *plans[1:]], 2, lengths, completed, carry)
  gone = f"record {plans[0].pieces.record[0]}"
  assert not missing.ok
  assert any(gone in f or "documents missing" in f for f in missing.failures), missing.failures


# ------------------------------------------------------------------ report


@pytest.mark.slow
def test_report_plots_and_data_match_the_pipeline_stats(pipeline_yaml, tmp_path, capsys):
  cfg = load_config(pipeline_yaml)
  with Pipeline(cfg, prefetch=2) as pipe:
    seen = []
    for _ in range(12):
      next(pipe)
      seen.append(pipe.stats())
  stats_path = tmp_path / "run" / "stats.jsonl"
  assert len(stats_path.read_text().splitlines()) == 12
  assert main(["report", str(stats_path), "--out", str(tmp_path / "report")]) == 0
  out = capsys.readouterr().out
  assert "largest deviations of the cumulative share of tokens from target" in out
  for name in ("shares", "sources", "padding"):
    png = tmp_path / "report" / f"{name}.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5_000
  series = json.loads((tmp_path / "report" / "report.json").read_text())
  for name in ("d0", "d1"):
    assert series["cumulative_share"][name] == pytest.approx([s["share_cumulative"][name] for s in seen])
    assert series["batch_share"][name] == pytest.approx([s["share_batch"][name] for s in seen])
  assert series["padding_fraction"] == pytest.approx([s["padding_fraction"] for s in seen])
  # What the plots mark: each source's pass boundaries and the schedule's phase changes, from the stats.
  for name in ("d0", "d1"):
    expected = [s["step"] for k, s in enumerate(seen) if k and s["passes"][name] > seen[k - 1]["passes"][name]]
    assert series["pass_boundaries"][name] == expected
  assert series["phase_changes"] == [
    s["step"] for k, s in enumerate(seen) if k and s["target_share"] != seen[k - 1]["target_share"]
  ]
  window = series["smoothing_steps"]
  middle = len(seen) // 2
  assert series["smoothed_share"]["d0"][middle] == pytest.approx(
    np.mean([s["share_batch"]["d0"] for s in seen[middle - window // 2 : middle - window // 2 + window]])
  )


def test_report_names_a_bad_stats_line(tmp_path, capsys):
  path = tmp_path / "stats.jsonl"
  path.write_text('{"step": 0}\n')
  assert main(["report", str(path)]) == 1
  assert f"{path}:1: stats record has no 'tokens_per_source'" in capsys.readouterr().err
  path.write_text('{"step": 0, oops\n')
  assert main(["report", str(path)]) == 1
  assert f"{path}:1: not a JSON stats record" in capsys.readouterr().err


# ------------------------------------------------------------------ mixing


def test_doremi_clips_per_token_then_averages():
  # Means are equal (2.0 vs 2.0): the difference of means would give 0 excess.
  # Clipped per token: mean(max(3-2, 0), max(1-2, 0)) = 0.5 for domain a.
  w = doremi_update(
    {"a": 0.5, "b": 0.5}, {"a": [3.0, 1.0], "b": [2.0, 2.0]}, {"a": [2.0, 2.0], "b": [2.0, 2.0]}, eta=1.0, smoothing=0.0
  )
  assert w["a"] == pytest.approx(np.exp(0.5) / (np.exp(0.5) + 1))
  assert w["a"] > 0.5


def test_doremi_smoothing_and_jnp_inputs():
  raw = doremi_update(
    {"a": 0.2, "b": 0.8},
    {"a": jnp.array([4.0]), "b": jnp.array([1.0])},
    {"a": jnp.array([1.0]), "b": jnp.array([1.0])},
    eta=0.5,
    smoothing=0.0,
  )
  smooth = doremi_update(
    {"a": 0.2, "b": 0.8},
    {"a": jnp.array([4.0]), "b": jnp.array([1.0])},
    {"a": jnp.array([1.0]), "b": jnp.array([1.0])},
    eta=0.5,
    smoothing=0.1,
  )
  assert raw["a"] == pytest.approx(0.2 * np.exp(1.5) / (0.2 * np.exp(1.5) + 0.8))
  for d in "ab":
    assert smooth[d] == pytest.approx(0.9 * raw[d] + 0.1 / 2)
  assert sum(smooth.values()) == pytest.approx(1.0)


@pytest.mark.parametrize(
  "weights, proxy, reference, kwargs, message",
  [
    ({"a": 1}, {"a": [float("nan")]}, {"a": [1.0]}, {}, "NaN"),
    ({"a": 1}, {"a": [-1.0]}, {"a": [1.0]}, {}, "must be >= 0"),
    ({"a": 1}, {"a": [1.0, 2.0]}, {"a": [1.0]}, {}, "shape"),
    ({"a": 1, "b": 1}, {"a": [1.0]}, {"a": [1.0], "b": [1.0]}, {}, "proxy_loss: 'b' has no losses"),
    ({"a": 1}, {"a": [1.0], "c": [1.0]}, {"a": [1.0]}, {}, "proxy_loss: 'c' is not one of 'a'"),
    (
      {"a": 0, "b": 1},
      {"a": [1.0], "b": [1.0]},
      {"a": [1.0], "b": [1.0]},
      {},
      r"weights\['a'\]: prior weights must be finite and > 0",
    ),
    ({"a": 1, "b": 1}, {"a": [1e308], "b": [1.0]}, {"a": [0.0], "b": [1.0]}, {"eta": 1e10}, "overflowed"),
  ],
)
def test_doremi_rejections(weights, proxy, reference, kwargs, message):
  with pytest.raises(ValueError, match=message):
    doremi_update(weights, proxy, reference, **kwargs)


def test_importance_weights():
  assert importance_weights({"a": 0.5, "b": 0.5, "c": 0.0}, {"a": 0.25, "b": 0.75, "c": 0.0}) == {
    "a": 2.0,
    "b": pytest.approx(2 / 3),
    "c": 0.0,
  }
  with pytest.raises(ValueError, match="'b' is never sampled"):
    importance_weights({"a": 0.5, "b": 0.5}, {"a": 1.0, "b": 0.0})


def test_per_source_loss_is_jittable_and_ignores_padding():
  loss = jnp.array([[1.0, 3.0, 5.0, 7.0], [2.0, 4.0, 6.0, 100.0]])
  source = jnp.array([[0, 0, 1, -1], [1, 1, 0, 2]])
  mask = jnp.array([[1, 1, 1, 0], [1, 0, 1, 0]])
  mean, count = jax.jit(per_source_loss, static_argnames="num_sources")(loss, source, mask, num_sources=3)
  assert count.tolist() == [3.0, 2.0, 0.0]
  assert mean.tolist() == pytest.approx([(1 + 3 + 6) / 3, (5 + 2) / 2, 0.0])


@pytest.mark.slow
@pytest.mark.parametrize(
  "making", [[], ["--reader-processes", "1"], ["--workers", "1"]], ids=["here", "readers", "0.3.0-flag"]
)
def test_bench_command_reports_throughput(pipeline_yaml, capsys, making):
  assert main(["bench", pipeline_yaml, "--steps", "5", *making]) == 0
  out = capsys.readouterr().out
  assert "5 steps of 8 x 32" in out and "non-padding tokens/s" in out and "time per step: plan" in out
  assert "C loops: in C: assembly, first-fit placement, exact interleave picks" in out  # both extensions built


@pytest.mark.slow
def test_bench_names_the_loops_that_run_in_python() -> None:
  # A fresh interpreter for each: JAXDATA_NATIVE is read at import.
  script = "from jaxdata.tools.bench import c_loops; print(c_loops())"
  assert fresh_python(script, "0").startswith("off (JAXDATA_NATIVE=0): every loop runs in Python / NumPy")
  assert fresh_python(script, "1", missing="jaxdata.mixture._exact_pick").startswith(
    "not built: exact interleave picks run in Python / NumPy"
  )


# ------------------------------------------------------------------ audit statistics


def _ratio_metas():
  rng = np.random.default_rng(0)
  return {
    n: DatasetMeta.from_lengths(np.clip(rng.lognormal(np.log(m), 0.8, 20000), 1, 2000).astype(int), [5000] * 4)
    for n, m in (("web", 40), ("code", 90), ("books", 200))
  }


@pytest.mark.slow
@pytest.mark.parametrize("unit", ["documents", "tokens"])
@pytest.mark.parametrize("scheduled", [False, True])
def test_residual_ratio_is_one_for_random_picks_and_far_below_for_exact(unit, scheduled):
  # 300 steps of ~100-200 documents. Under the random interleave R has mean 1
  # and sd about sqrt(2/300) = 0.08 (Wald's identity; normal residuals): bound
  # 5 sd. The exact interleave keeps each step's residual within about one
  # document: R ~ 0.01 in documents, ~0.1-0.3 in tokens (long documents). 0.1's
  # statistic gave 17.7 (exact) vs 18.4 (random), and 6.88 under a schedule.
  if scheduled:
    mixture = {
      "schedule": [
        {"until_step": 150, "weights": {"web": 0.7, "code": 0.2, "books": 0.1}},
        {"weights": {"web": 0.2, "code": 0.5, "books": 0.3}},
      ]
    }
  else:
    mixture = {"weights": {"web": 0.6, "code": 0.3, "books": 0.1}}
  ratios = {}
  for interleave in ("exact", "random"):
    cfg = PipelineConfig.from_dict(
      {
        "datasets": [{"name": n} for n in ("web", "code", "books")],
        "mixture": {**mixture, "unit": unit, "interleave": interleave},
        "exhausted_policy": "repeat",
        "shuffle_within_shard": True,
        "packing": {"seq_len": 512},
        "batch": {"global_batch_size": 16},
      }
    )
    ratios[interleave] = audit(cfg, 1, 300, _ratio_metas()).residual_ratio
  for name in ("web", "code", "books"):
    assert abs(ratios["random"][name] - 1) < 5 * np.sqrt(2 / 300)
    assert ratios["exact"][name] < (0.1 if unit == "documents" else 0.5)


def test_audit_warns_when_nothing_was_checked_or_a_dataset_keeps_stored_order(capsys, tmp_path):
  cfg = PipelineConfig.from_dict(
    {
      "datasets": [{"name": "one"}, {"name": "many"}],
      "mixture": {"weights": {"one": 1, "many": 1}},
      "exhausted_policy": "repeat",
      "shuffle_block_size": None,  # stored order, asked for by name
      "packing": {"seq_len": 16},
      "batch": {"global_batch_size": 2},
    }
  )
  metas = {"one": DatasetMeta.from_lengths([5] * 400), "many": DatasetMeta.from_lengths([5] * 400, [40] * 10)}
  result = audit(cfg, 1, 3, metas)
  assert result.ok and len(result.warnings) == 3
  assert "no pass of any dataset completed within the 3 audited steps" in result.warnings[0]
  assert result.warnings[1] == "mixture weights sum to 2, not 1; used normalised: one 0.5000, many 0.5000"
  assert result.warnings[2].startswith("one: read in stored order in runs of up to 400 documents (100% of it, 1 shard)")


@pytest.mark.slow
def test_plan_warns_about_a_dataset_read_in_stored_order(tmp_path, capsys):
  write_coded_dataset(str(tmp_path / "one"), 0, [7] * 50, shard_bytes=1 << 20)  # a single shard
  write_coded_dataset(str(tmp_path / "many"), 1, [7] * 200)  # 14 shards: short runs
  path = tmp_path / "pipeline.yaml"
  path.write_text(
    yaml.safe_dump(
      {
        "datasets": [{"name": "one", "path": "one"}, {"name": "many", "path": "many"}],
        "mixture": {"weights": {"one": 0.5, "many": 0.5}},
        "exhausted_policy": "repeat",
        "shuffle_block_size": None,  # stored order, asked for by name (the default, global, mixes)
        "packing": {"seq_len": 16},
        "batch": {"global_batch_size": 2},
      }
    )
  )
  assert main(["plan", str(path), "--tokens", "1k", "--json"]) == 0
  out = json.loads(capsys.readouterr().out)
  warnings = out["warnings"]
  assert out["order"]["one"] == "shards shuffled, stored order within each shard"
  assert [w.split(":")[0] for w in warnings] == ["one"]
  assert "read in stored order in runs of up to 50 documents (100% of it, 1 shard)" in warnings[0]


def test_doremi_rounds_return_excess_and_average_over_training():
  weights, history = {"a": 0.5, "b": 0.5}, []
  for _ in range(3):  # a is always 1 nat worse than its reference, b matches it
    result = doremi_round(weights, {"a": [3.0, 3.0], "b": [2.0]}, {"a": [2.0, 2.0], "b": [2.0]}, smoothing=0.0)
    assert result.excess == {"a": 1.0, "b": 0.0}
    weights = result.weights
    history.append(weights)
  # eta 0.1 by default: after round t, a's odds are exp(0.1 t) to 1.
  assert history[2]["a"] == pytest.approx(np.exp(0.3) / (np.exp(0.3) + 1))
  final = doremi_average(history)
  assert final["a"] == pytest.approx(np.mean([h["a"] for h in history])) and sum(final.values()) == pytest.approx(1)


def test_importance_weights_warn_when_a_small_q_ruins_the_variance():
  with pytest.warns(RuntimeWarning, match=r"weight 50\.0 for 'rare' \(q = 0\.01\)"):
    importance_weights({"rare": 0.5, "common": 0.5}, {"rare": 0.01, "common": 0.99})
  with warnings.catch_warnings():
    warnings.simplefilter("error")
    importance_weights({"a": 0.5, "b": 0.5}, {"a": 0.4, "b": 0.6})  # close mixes: no warning


@pytest.mark.parametrize(
  "argv",
  [
    ["plan", "CONFIG", "--tokens", "1M", "--png", "NOWHERE/plot.png"],
    ["ablate", "CONFIG", "--candidates", "CONFIG", "--png", "NOWHERE/plot.png"],
    ["demo", "--config", "CONFIG", "--json", "NOWHERE/summary.json"],
  ],
)
def test_an_output_path_that_cannot_be_written_fails_before_any_work(pipeline_yaml, tmp_path, argv, capsys):
  argv = [a.replace("CONFIG", pipeline_yaml).replace("NOWHERE", str(tmp_path / "missing")) for a in argv]
  assert main(argv) == 1
  err = capsys.readouterr().err
  assert "does not exist" in err and str(tmp_path / "missing") in err
  assert not (tmp_path / "run-pipeline").exists()  # the demo did not start
