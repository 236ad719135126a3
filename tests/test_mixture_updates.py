"""Online mixture updates: the loop sets weights from a step on; exact, resumable, the same on every host.

The equivalence matrix runs updates in every execution mode and on two
jax.distributed hosts (feature "mixture-updates"); here: the stream's rules,
resume at every step, the deviation bound after a change, refusals, stats,
and hosts that disagree.
"""

from __future__ import annotations

import json
import math
import textwrap

import numpy as np
import pytest
import yaml

import jaxdata.testing
from jaxdata import ConfigError, InputFormatError, Pipeline, PipelineConfig
from jaxdata.cli import main
from jaxdata.mixture import DocumentStream
from jaxdata.mixture import updates as updates_module
from jaxdata.pipeline.execution import StepMaking
from jaxdata.pipeline.steering import UPDATE_CHECK_EVERY
from jaxdata.tools.doctor import diagnose
from jaxdata.tools.report import load_stats
from jaxdata.tools.trajectory import load_trajectory
from pipeline_fixtures import coded_config, digest, free_port, run_workers

NAMES = ("d0", "d1", "d2")


@pytest.fixture()
def cfg(tmp_path):
  rng = np.random.default_rng(3)
  lengths = [rng.integers(1, 40, 300).tolist(), rng.integers(1, 25, 400).tolist(), rng.integers(5, 60, 200).tolist()]
  return coded_config(tmp_path, lengths, exhausted_policy="repeat")


def loop(pipe: Pipeline, start: int, count: int, updates: dict[int, dict]) -> list:
  """What a training loop does: before batch c, the updates it decided at c; then the batch."""
  out = []
  for position in range(start, start + count):
    if position in updates:
      pipe.update_mixture(updates[position])
    out.append(digest(next(pipe)))
  return out


@pytest.mark.slow
def test_a_state_at_every_step_restores_to_the_same_remaining_batches_with_updates(cfg):
  rng = np.random.default_rng(0)
  positions = sorted(rng.choice(np.arange(1, 30), 6, replace=False).tolist())
  updates = {p: dict(zip(NAMES, rng.integers(0, 5, 3).tolist())) for p in positions}
  for weights in updates.values():
    weights["d1"] += 1  # never all zero
  with Pipeline(cfg, prefetch=0) as reference:
    expected = loop(reference, 0, 30, updates)
  with Pipeline(cfg, prefetch=2) as ahead:  # steps made ahead are planned again on each update
    assert loop(ahead, 0, 30, updates) == expected
  for k in range(0, 30, 3):
    with Pipeline(cfg, prefetch=2) as first:
      prefix = loop(first, 0, k, updates)
      state = json.loads(json.dumps(first.get_state()))
    with Pipeline(cfg, prefetch=1) as restored:
      restored.set_state(state)
      assert prefix + loop(restored, k, 30 - k, updates) == expected, f"restored at step {k}"


def test_an_update_for_a_later_step_is_pending_in_the_state(cfg):
  with Pipeline(cfg, prefetch=0) as pipe:
    next(pipe)
    assert pipe.update_mixture({"d0": 1, "d1": 0, "d2": 0}, at_step=5) == 5
    state = pipe.get_state()
    assert state["stream"]["updates"][-1]["step"] == 5
    shares = []
    for _ in range(8):
      next(pipe)
      shares.append(pipe.stats()["target_share"]["d0"])
      if pipe.stats()["step"] == 5:
        assert pipe.stats()["mixture_update"] == {"d0": 1.0, "d1": 0.0, "d2": 0.0}  # the history, in the stats
  assert shares[:4] == [pytest.approx(1 / 3)] * 4 and shares[4:] == [1.0] * 4  # steps 1-4 old, 5-8 new


def test_the_lag_is_counted_in_steps_handed_out(cfg, tmp_path):
  lagged = coded_config(tmp_path / "lag", [[5, 9, 3] * 50, [7, 2] * 60], exhausted_policy="repeat")
  raw = lagged.to_dict()
  raw["mixture"]["update_lag_steps"] = 3
  with Pipeline(PipelineConfig.from_dict(raw), prefetch=2) as pipe:
    for _ in range(4):
      next(pipe)
    assert pipe.update_mixture({"d0": 1, "d1": 3}) == 4 + 3  # whatever was made ahead by then


@pytest.mark.parametrize(
  "weights, message",
  [
    ({"d0": float("nan"), "d1": 1, "d2": 1}, r"weight of 'd0'"),
    ({"d0": -1, "d1": 1, "d2": 1}, r"weight of 'd0'"),
    ({"d0": 0, "d1": 0, "d2": 0}, r"all are 0"),
    ({"d0": 1, "d1": 1, "d2": 1, "web": 1}, r"web"),
    ({"d0": 1, "d1": 1}, r"d2"),
  ],
)
def test_invalid_weights_are_refused_and_nothing_changes(cfg, weights, message):
  with Pipeline(cfg, prefetch=0) as pipe, Pipeline(cfg, prefetch=0) as untouched:
    next(pipe)
    next(untouched)
    before = pipe.get_state()
    with pytest.raises(ConfigError, match=message):
      pipe.update_mixture(weights)
    assert pipe.get_state() == before
    assert [digest(next(pipe)) for _ in range(3)] == [digest(next(untouched)) for _ in range(3)]
    with pytest.raises(ValueError, match=r"at_step: 0 is already planned; the earliest step an update can start at"):
      pipe.update_mixture({"d0": 1, "d1": 1, "d2": 1}, at_step=0)


def test_after_a_change_every_prefix_stays_within_one_document_of_the_moving_target(cfg):
  """The exact interleave's bound holds across changes: the target integrates the weights in force
  (the deficits carry over, no jump), and every prefix stays within one document's tokens of it."""
  stream = DocumentStream.open(cfg)
  rng = np.random.default_rng(1)
  changes = {step: dict(zip(NAMES, (rng.integers(0, 6, 3) + [0, 1, 0]).tolist())) for step in (3, 7, 8, 20, 31)}
  largest = max(int(c.lengths.max()) for c in stream.cursors)
  target, taken, worst = np.zeros(3), np.zeros(3), 0.0
  for _ in range(6000):
    step = stream.tokens // stream.tokens_per_step
    if step in changes and stream.next_step <= step:
      stream.update(changes.pop(step), at_step=step)
    ref = next(stream)
    weights = np.array([float(w) for w in stream.exact_weights_at(step)])
    target += weights * ref.length
    taken[NAMES.index(ref.dataset)] += ref.length
    worst = max(worst, float(np.abs(target - taken).max()))
  assert not changes  # every change was reached
  assert worst <= largest, (worst, largest)


def test_a_stream_update_for_a_step_already_drawn_is_refused_and_the_state_keeps_only_what_is_needed(cfg):
  stream = DocumentStream.open(cfg)
  stream.take(step=4, max_docs=10)
  with pytest.raises(ValueError, match=r"at_step: 4 already has documents taken; the next step is 5"):
    stream.update({"d0": 1, "d1": 1, "d2": 1}, at_step=4)
  for step, weights in ((5, {"d0": 1, "d1": 0, "d2": 1}), (9, {"d0": 0, "d1": 1, "d2": 1})):
    stream.update(weights, at_step=step)
  stream.take(step=6, max_docs=3)
  state = stream.get_state()
  assert [u["step"] for u in state["updates"]] == [5, 9]  # in force, and still to come
  stream.take(step=10, max_docs=3)
  assert [u["step"] for u in stream.get_state()["updates"]] == [9]  # 5 can no longer be seen
  restored = DocumentStream.open(cfg)
  restored.set_state(json.loads(json.dumps(state)))
  assert restored.exact_weights_at(9) == stream.exact_weights_at(9)
  assert math.isclose(float(restored.exact_weights_at(6)[0]), 0.5)


@pytest.mark.slow
@pytest.mark.multiprocess
def test_hosts_that_make_different_updates_are_named_at_the_next_check_on_every_host(cfg, tmp_path):
  """The hosts compare their updates every UPDATE_CHECK_EVERY updates and at a checkpoint save
  (`check_hosts_agree`), one collective each; the first update that differed is named."""
  config = tmp_path / "cfg.json"
  config.write_text(json.dumps(cfg.to_dict()))
  script = tmp_path / "host.py"
  script.write_text(
    textwrap.dedent(
      """
      import json, os, sys
      os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
      os.environ["JAX_PLATFORMS"] = "cpu"
      import jax
      jax.config.update("jax_cpu_collectives_implementation", "gloo")
      port, index, config, out = sys.argv[1:5]
      jax.distributed.initialize(f"localhost:{port}", 2, int(index))
      import jaxdata.checkpoint
      from jaxdata import Pipeline, PipelineConfig
      from jaxdata.pipeline.steering import UPDATE_CHECK_EVERY
      outcomes = []
      with Pipeline(PipelineConfig.from_dict(json.load(open(config))), prefetch=0) as pipe:
        next(pipe)
        pipe.update_mixture({"d0": 1, "d1": 1, "d2": 1})  # the same on both hosts
        pipe.check_hosts_agree()
        next(pipe)
        pipe.update_mixture({"d0": 1 + int(index), "d1": 1, "d2": 1})  # differs: not checked yet
        pipe.update_mixture({"d0": 1, "d1": 2, "d2": 1})  # the same again
        try:
          jaxdata.checkpoint.Save(pipe)  # the args of a checkpoint save, built on every host: they check
          outcomes.append("agreed")
        except ValueError as e:
          outcomes.append(str(e))
        try:  # without an explicit check: the UPDATE_CHECK_EVERY-th update checks
          for i in range(UPDATE_CHECK_EVERY):
            pipe.update_mixture({"d0": 1, "d1": 1, "d2": 1 + (i == 7) * int(index)})
          outcomes.append("agreed")
        except ValueError as e:
          outcomes.append(f"{i}: {e}")
      open(out, "w").write(json.dumps(outcomes))
      jax.distributed.shutdown()
      """
    )
  )
  port = free_port()
  outs = [str(tmp_path / f"out{i}") for i in range(2)]
  run_workers(str(script), [[str(port), str(i), str(config), outs[i]] for i in range(2)])
  for out in outs:
    at_save, periodic = json.loads(open(out).read())
    # the second update (made after 2 steps were handed out, for step 2 + the lag 32) is named
    assert "the update made after 2 steps (at_step=34) differs between hosts (process 1 disagrees" in at_save
    assert periodic.startswith(f"{UPDATE_CHECK_EVERY - 1}: ") and "(at_step=34)" in periodic


def run_with_updates(cfg, stats_path, updates: dict[int, dict], steps: int) -> None:
  with Pipeline(cfg, prefetch=0, stats_path=str(stats_path)) as pipe:
    loop(pipe, 0, steps, updates)


def test_the_trajectory_of_a_run_is_read_back_and_planned(cfg, tmp_path, capsys):
  updates = {5: {"d0": 1, "d1": 2, "d2": 1}, 12: {"d0": 0, "d1": 1, "d2": 1}}
  run_with_updates(cfg, tmp_path / "stats.jsonl", updates, 50)
  trajectory = load_trajectory(str(tmp_path / "stats.jsonl"))
  lag = cfg.mixture.update_lag_steps  # each takes effect that many steps after the next one handed out
  assert lag == 32 and [s for s, _ in trajectory] == [0, 5 + lag, 12 + lag]
  assert trajectory[2][1] == {"d0": 0.0, "d1": 0.5, "d2": 0.5}
  (tmp_path / "cfg.yaml").write_text(yaml.safe_dump(cfg.to_dict()))
  argv = ["plan", str(tmp_path / "cfg.yaml"), "--tokens", "20000", "--read-spans", "0", "--json"]
  assert main([*argv, "--weights-trajectory", str(tmp_path / "stats.jsonl")]) == 0
  planned = json.loads(capsys.readouterr().out)
  assert main(argv) == 0
  fixed = json.loads(capsys.readouterr().out)
  assert planned != fixed and planned["datasets"]["d0"] != fixed["datasets"]["d0"]  # d0 is not read after step 12
  (tmp_path / "bad.json").write_text('[{"step": 3, "weights": {"d0": 1}}]')
  with pytest.raises(InputFormatError, match=r"bad.json: a trajectory's steps must rise from 0"):
    load_trajectory(str(tmp_path / "bad.json"))


def test_doctor_flags_an_oscillating_controller_and_a_starved_source(cfg, tmp_path):
  swinging = {step: {"d0": 1 + 4 * (step % 2), "d1": 1, "d2": 1} for step in range(1, 15)}
  run_with_updates(cfg, tmp_path / "swing.jsonl", swinging, 16 + cfg.mixture.update_lag_steps)
  checks = {c.name: c for c in diagnose(load_stats(str(tmp_path / "swing.jsonl")))}
  assert checks["controller d0"].status == "warn" and checks["controller d1"].status == "warn"
  assert checks["histogram"].status == "ok"  # new weights every step: no steady step to judge, not a failure
  steady = {step: {"d0": 1 + step, "d1": 10, "d2": 0.001} for step in range(1, 15)}  # d0 rises; d2 starved
  run_with_updates(cfg, tmp_path / "steady.jsonl", steady, 16 + cfg.mixture.update_lag_steps)
  checks = {c.name: c for c in diagnose(load_stats(str(tmp_path / "steady.jsonl")), share_floor=0.05)}
  assert checks["controller d0"].status == "ok" and checks["starved d2"].status == "warn"
  assert checks["starved d0"].status == "ok"


def test_pass_policies_and_schedules_keep_working_when_weights_move(tmp_path):
  cfg = coded_config(tmp_path, [[5, 9, 3] * 30, [7, 2] * 40], stop_after_passes=1, mixture={"update_lag_steps": 0})
  with Pipeline(cfg, prefetch=0) as pipe:
    next(pipe)
    pipe.update_mixture({"d0": 1, "d1": 0})  # d1 still owes its pass and can no longer be read
    with pytest.raises(ConfigError, match=r"datasets.d1: weight 0 from step 1 on, but only 0 of its 1 passes"):
      next(pipe)
  scheduled = coded_config(
    tmp_path / "s",
    [[5, 9, 3] * 30, [7, 2] * 40],
    exhausted_policy="repeat",
    mixture={
      "weights": None,
      "schedule": [{"until_step": 4, "weights": {"d0": 1, "d1": 1}}, {"weights": {"d0": 0, "d1": 1}}],
    },
  )
  with Pipeline(scheduled, prefetch=0) as pipe:
    next(pipe)
    pipe.update_mixture({"d0": 3, "d1": 1}, at_step=6)  # the schedule until step 6, the update from there on
    shares = []
    for _ in range(8):
      next(pipe)
      shares.append(pipe.stats()["target_share"]["d0"])
  assert shares == [0.5, 0.5, 0.5, 0.0, 0.0, 0.75, 0.75, 0.75]  # steps 1..8


def test_the_state_stays_small_however_many_updates_a_run_makes(cfg):
  """Update weights are held to 1e-9: the interleave's exact scale stays bounded (float weights every step
  made it grow by hundreds of digits until the state could no longer be written)."""
  stream = DocumentStream.open(cfg)
  rng = np.random.default_rng(7)
  sizes = []
  for step in range(3000):
    stream.update(dict(zip(NAMES, (rng.random(3) + 1e-3).tolist())), at_step=step)
    stream.take(step, max_tokens=64)
    if step % 500 == 499:
      sizes.append(len(json.dumps(stream.get_state())))
  assert max(sizes) < 3000 and sizes[-1] <= sizes[0] + 200, sizes
  assert len(str(stream.get_state()["segment"]["scale"])) < 40


def test_a_group_drawn_at_once_cannot_be_updated_inside(tmp_path):
  grouped = coded_config(
    tmp_path,
    [[5, 9, 3] * 40, [7, 2] * 60],
    exhausted_policy="repeat",
    packing={"mode": "none", "group_by_length": 3},
    mixture={"update_lag_steps": 0},
  )
  with Pipeline(grouped, prefetch=0) as pipe:
    next(pipe)  # step 0 drew the documents of steps 0, 1 and 2
    assert pipe.update_mixture({"d0": 1, "d1": 0}) == 3
    with pytest.raises(
      ValueError, match=r"at_step: 2 is already planned; the earliest step an update can start at is 3"
    ):
      pipe.update_mixture({"d0": 1, "d1": 0}, at_step=2)
    assert pipe.update_mixture({"d0": 1, "d1": 1}, at_step=np.int64(9)) == 9  # a NumPy step is a step


def test_a_trajectory_from_stats_follows_schedules_and_resumed_runs(tmp_path):
  scheduled = coded_config(
    tmp_path,
    [[5, 9, 3] * 30, [7, 2] * 40],
    exhausted_policy="repeat",
    mixture={
      "weights": None,
      "schedule": [{"until_step": 4, "weights": {"d0": 1, "d1": 0}}, {"weights": {"d0": 1, "d1": 1}}],
    },
    stats_path=str(tmp_path / "stats.jsonl"),
  )
  with Pipeline(scheduled, prefetch=0) as pipe:
    pipe.update_mixture({"d0": 1, "d1": 3}, at_step=7)  # before the first batch
    for _ in range(6):
      next(pipe)
    state = pipe.get_state()
    for _ in range(4):
      next(pipe)
  with Pipeline(scheduled, prefetch=0) as resumed:  # appends steps 6.. again
    resumed.set_state(state)
    for _ in range(4):
      next(resumed)
  assert [(s, w["d1"]) for s, w in load_trajectory(str(tmp_path / "stats.jsonl"))] == [(0, 0.0), (4, 0.5), (7, 0.75)]


@pytest.mark.slow  # several seconds: the everyday tier stays short
def test_an_update_call_does_no_per_update_work_however_many_are_pending(cfg, monkeypatch):
  """10,000 updates at future steps: each call encodes or parses no update but its own (the calls were
  quadratic: every call re-read every pending update). Counted, not timed."""
  entries = []
  real_entry = updates_module._entry
  monkeypatch.setattr(updates_module, "_entry", lambda *a: entries.append(1) or real_entry(*a))
  parsed = []
  real_from_json = updates_module.MixtureUpdates.from_json.__func__
  monkeypatch.setattr(
    updates_module.MixtureUpdates,
    "from_json",
    classmethod(lambda cls, raw, names: parsed.append(len(raw)) or real_from_json(cls, raw, names)),
  )
  with Pipeline(cfg, prefetch=0) as reference, Pipeline(cfg, prefetch=2) as pipe:
    for p in (reference, pipe):
      next(p)
    for i in range(10_000):
      for p in (reference, pipe):
        p.update_mixture({"d0": 1 + i % 5, "d1": 1, "d2": 2}, at_step=50 + i)
    assert len(entries) == 2 * 10_000 and sum(parsed) == 0  # one encoding per call, nothing parsed again
    assert [digest(next(pipe)) for _ in range(60)] == [digest(next(reference)) for _ in range(60)]
    state = pipe.get_state()
  # the state keeps the update in force and those still to come (steps 50 .. 10,049)
  assert len(state["stream"]["updates"]) == 10_049 - (state["stream"]["next_step"] - 1) + 1


def every_step_updates(count: int) -> dict[int, dict]:
  rng = np.random.default_rng(7)
  return {c: dict(zip(NAMES, (rng.integers(0, 5, 3) + [0, 1, 0]).tolist())) for c in range(count)}


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.parametrize(
  "mode",
  [
    {"prefetch": 2},
    {"prefetch": 2, "making": "process"},
    {"prefetch": 1, "making": StepMaking("process", reader_processes=2)},
  ],
  ids=["in-process", "planner-process", "readers2"],
)
def test_updates_before_every_step_at_the_default_lag_keep_everything_made_ahead(cfg, mode):
  """With the default lag, no update touches a step already planned, in any mode: every update is
  adopted where the planning runs (none plans again) and the batches are prefetch=0's."""
  updates = every_step_updates(40)
  with Pipeline(cfg, prefetch=0) as reference:
    expected = loop(reference, 0, 40, updates)
    assert reference.execution().updates_replanned == 0
  with Pipeline(cfg, **mode) as pipe:
    jaxdata.testing.wait_for_processes(pipe)
    assert loop(pipe, 0, 40, updates) == expected
    execution = pipe.execution()
  assert (execution.updates_adopted, execution.updates_replanned) == (40, 0)
  assert execution.steps_from_processes >= (35 if "making" in mode else 0)


@pytest.mark.slow
def test_at_lag_0_an_update_plans_the_steps_made_ahead_again_and_the_batches_stay_the_same(tmp_path):
  rng = np.random.default_rng(3)
  lengths = [rng.integers(1, 40, 300).tolist(), rng.integers(1, 25, 400).tolist(), rng.integers(5, 60, 200).tolist()]
  lag0 = coded_config(tmp_path, lengths, exhausted_policy="repeat", mixture={"update_lag_steps": 0})
  updates = every_step_updates(30)
  with Pipeline(lag0, prefetch=0) as reference:
    expected = loop(reference, 0, 30, updates)
  with Pipeline(lag0, prefetch=2) as ahead:
    assert loop(ahead, 0, 30, updates) == expected
    assert ahead.execution().updates_replanned > 0  # the prefetch thread had made the next step already


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.parametrize("mode", [{"prefetch": 2}, {"prefetch": 2, "making": "process"}], ids=["in-process", "planner"])
@pytest.mark.parametrize("every", [1, 5])
def test_groups_drawn_ahead_and_a_loop_cadence_keep_updates_free(tmp_path, mode, every):
  """group_by_length draws M steps at once (the horizon keeps their reach behind the next update's
  step), and a loop that updates every k steps lets the planning run k steps further: neither plans
  a step again, and the batches are prefetch=0's."""
  rng = np.random.default_rng(5)
  lengths = [rng.integers(1, 16, 600).tolist(), rng.integers(1, 16, 600).tolist(), rng.integers(1, 16, 400).tolist()]
  grouped = coded_config(
    tmp_path, lengths, exhausted_policy="repeat", packing={"mode": "none", "group_by_length": 3, "seq_len": 16}
  )
  updates = {c: w for c, w in every_step_updates(60).items() if c % every == 0}
  with Pipeline(grouped, prefetch=0) as reference:
    expected = loop(reference, 0, 60, updates)
  with Pipeline(grouped, **mode) as pipe:
    jaxdata.testing.wait_for_processes(pipe)
    assert loop(pipe, 0, 60, updates) == expected
    assert (pipe.execution().updates_adopted, pipe.execution().updates_replanned) == (len(updates), 0)


def test_a_trajectory_of_many_phases_prints_a_table_a_person_can_read(cfg, tmp_path, capsys, monkeypatch):
  """48 phases printed one row per dataset and phase made 562 lines: consecutive phases share a row."""
  monkeypatch.setenv("COLUMNS", "200")
  trajectory = [{"step": 2 * k, "weights": {"d0": 1 + k % 3, "d1": 1, "d2": 1 + k % 2}} for k in range(48)]
  (tmp_path / "trajectory.json").write_text(json.dumps(trajectory))
  (tmp_path / "cfg.yaml").write_text(yaml.safe_dump(cfg.to_dict()))
  argv = ["plan", str(tmp_path / "cfg.yaml"), "--tokens", "200000", "--read-spans", "0"]
  assert main([*argv, "--weights-trajectory", str(tmp_path / "trajectory.json")]) == 0
  out = capsys.readouterr().out
  rows = [line for line in out.splitlines() if "phases)" in line]
  assert 3 <= len(rows) <= 3 * 8  # at most 8 rows a dataset
  table = [line for line in out.splitlines() if "│" in line]  # the table's rows (the legend and warnings follow)
  assert len(table) <= 3 * 8 + 2
