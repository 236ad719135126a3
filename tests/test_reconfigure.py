"""A change of course at a restore: `set_state(state, reconfigure=True)` continues a state of one config
under another, exactly: kept datasets go on where they were (no repeat, no gap), added ones start at
pass 0, removed ones stop; the change is part of the state, so later states restore as usual."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from checkpoint_property import assert_restores_exactly
from jaxdata import CheckpointError, ConfigError, Pipeline, PipelineConfig
from jaxdata.transforms.pieces import Pieces
from pipeline_fixtures import decode, write_coded_dataset

LENGTHS = {"d0": (70, 30), "d1": (60, 20), "d2": (80, 25), "d3": (50, 12)}  # documents, longest (coded ids)
DOCUMENTS: dict[str, list[int]] = {}  # each dataset's document lengths, as written


@pytest.fixture(scope="module")
def root(tmp_path_factory):
  path = tmp_path_factory.mktemp("reconfigure")
  rng = np.random.default_rng(5)
  for d, (name, (count, longest)) in enumerate(LENGTHS.items()):
    DOCUMENTS[name] = rng.integers(1, longest, count).tolist()
    write_coded_dataset(str(path / name), d, DOCUMENTS[name], shard_bytes=300)
  return path


def config(root, weights: dict, seq_len: int = 16, rows: int = 4, **top) -> PipelineConfig:
  raw = {
    "seed": 11,
    "datasets": [{"name": n, "path": str(root / n)} for n in weights],
    "mixture": {"weights": weights},
    "exhausted_policy": "repeat",
    "packing": {"mode": "best_fit", "seq_len": seq_len},
    "batch": {"global_batch_size": rows},
    **top,
  }
  return PipelineConfig.from_dict(raw)


def tokens(batches) -> list[bytes]:
  return [np.asarray(b["tokens"]).tobytes() + np.asarray(b["segment_ids"]).tobytes() for b in batches]


def run(pipe: Pipeline, count: int) -> list[dict]:
  out = []
  for _ in range(count):
    try:
      out.append({k: np.asarray(v) for k, v in next(pipe).items()})
    except StopIteration:
      break
  return out


def changed_run(before: PipelineConfig, after: PipelineConfig, change_at: int, total: int, **kwargs):
  """`change_at` batches of `before`, its state restored into `after` with reconfigure=True, then the rest;
  (batches, the state at the change, the changed pipeline's state at the end)."""
  with Pipeline(before, prefetch=0, **kwargs) as pipe:
    first = run(pipe, change_at)
    state = json.loads(json.dumps(pipe.get_state()))
  with Pipeline(after, prefetch=0, **kwargs) as pipe:
    pipe.set_state(state, reconfigure=True)
    rest = run(pipe, total - change_at)
    end = pipe.get_state()
  return first + rest, state, end


def test_a_kept_dataset_is_read_exactly_once_across_the_change_and_an_added_one_starts_at_pass_0(root):
  """d0 (stop: one pass) continues across the change with rows of another length and a new neighbour; every
  token of every d0 document arrives exactly once; d2, added, starts at its pass 0 (its first documents
  are those a fresh run of the new config takes first)."""
  before = config(root, {"d0": 1, "d1": 1}, exhausted_policy={"d0": "stop", "d1": "repeat"})
  after = config(root, {"d0": 1, "d2": 2}, seq_len=24, rows=3, exhausted_policy={"d0": "stop", "d2": "repeat"})
  batches, _, end = changed_run(before, after, 6, 10_000)
  seen = np.concatenate([np.asarray(b["tokens"])[np.asarray(b["segment_ids"]) > 0] for b in batches])
  d, r, k = decode(seen)
  d0 = np.sort(r[d == 0] * 512 + k[d == 0])
  assert len(np.unique(d0)) == len(d0)  # no token of d0 twice
  assert len(d0) == sum(DOCUMENTS["d0"])  # every token of every document of d0 (its one pass, across the change)
  assert end["stream"]["datasets"]["d2"]["pass"] >= 0 and "d1" not in end["stream"]["datasets"]
  # d2's first documents are those of pass 0 of its order: as a fresh run of `after` takes them
  with Pipeline(after, prefetch=0) as fresh:
    fresh_tokens = np.concatenate([b["tokens"][b["segment_ids"] > 0] for b in run(fresh, 4)])
  fd, fr, _ = decode(fresh_tokens)
  first_d2 = list(dict.fromkeys(r[(d == 2)].tolist()))[:5]
  assert first_d2 == list(dict.fromkeys(fr[fd == 2].tolist()))[:5]
  change = end["stream"]["changes"][0]
  assert change["step"] == 6 and change["added"] == ["d2"] and change["removed"] == ["d1"]
  assert change["rows"] == ["packing: seq_len=16 -> seq_len=24", "global_batch_size: 4 -> 3"]


def test_the_checkpoint_property_with_a_change_in_the_middle(root):
  """Every state after the change restores to the same remaining output (they hold the change); every state
  before it, continued to the change and reconfigured there, gives the same run."""
  before = config(root, {"d0": 1, "d1": 2, "d3": 1})
  after = config(root, {"d0": 3, "d2": 1, "d3": 1}, seq_len=12)
  change_at, total = 5, 14
  reference, at_change, _ = changed_run(before, after, change_at, total)

  def make() -> Pipeline:
    pipe = Pipeline(after, prefetch=0)
    pipe.set_state(at_change, reconfigure=True)
    return pipe

  assert_restores_exactly(make, lambda p, n: tokens(run(p, n)), total - change_at, range(0, total - change_at, 2))
  assert tokens(reference[change_at:]) == tokens(run(make(), total - change_at))
  for k in range(change_at):  # a state before the change: the old config to the change, then the new one
    with Pipeline(before, prefetch=0) as pipe:
      run(pipe, k)
      state = pipe.get_state()
    with Pipeline(before, prefetch=0) as pipe:
      pipe.set_state(state)
      middle = run(pipe, change_at - k)
      at = pipe.get_state()
    with Pipeline(after, prefetch=0) as pipe:
      pipe.set_state(at, reconfigure=True)
      assert tokens(reference[k:]) == tokens(middle + run(pipe, total - change_at)), k


def _carry_tokens(state) -> int:
  return int(Pieces.from_json(state["packer"]["carry"], lambda d, r: np.zeros_like(d), 1 << 20).length.sum())


def test_after_an_added_dataset_starts_the_shares_hold_the_new_weights_within_the_exact_bound_from_the_change(root):
  """Tokens from the change on, per source, against the new weights: the exact interleave keeps every prefix of
  what it takes within one document (the longest, L) of w_i x total; the batches differ from what was taken by
  the carry at the change and at the end, so |tokens_i - w_i total| <= L + 2 (carry_S + carry_T). A drift
  (shares counted from step 0, or the old weights lingering) is far outside it."""
  before = config(root, {"d0": 1, "d1": 1})
  weights = {"d0": 1, "d1": 1, "d2": 2}
  after = config(root, weights)
  change_at, total = 4, 120
  batches, at_change, end = changed_run(before, after, change_at, total)
  later = batches[change_at:]
  counts = {n: 0 for n in weights}
  names = list(weights)
  for b in later:
    ids, lengths = np.asarray(b["source_ids"]), np.asarray(b["segment_ids"]) > 0
    for i, n in enumerate(names):
      counts[n] += int(((ids == i) & lengths).sum())
  total_tokens = sum(counts.values())
  bound = max(longest for _, longest in LENGTHS.values()) + 2 * (_carry_tokens(at_change) + _carry_tokens(end))
  for n, w in weights.items():
    expected = w / sum(weights.values()) * total_tokens
    assert abs(counts[n] - expected) <= bound, (n, counts[n], expected, bound)
  assert counts["d2"] > 0.45 * total_tokens  # (a check the bound is tight enough to mean something)


def test_hostile_changes_are_refused_and_leave_the_pipeline_as_it_was(root, tmp_path):
  """A change that continues no dataset, a state of another run (its seed), a changed dataset not marked
  replaced, and a changed seq_len without reconfigure=True: each a CheckpointError naming it; after one, the
  pipeline goes on as if it had not been asked."""
  base = config(root, {"d0": 1, "d1": 1})
  with Pipeline(base, prefetch=0) as pipe:
    run(pipe, 3)
    state = pipe.get_state()
  with Pipeline(config(root, {"d2": 1, "d3": 1}), prefetch=0) as pipe:
    expected = tokens(run(pipe, 2))
  with Pipeline(config(root, {"d2": 1, "d3": 1}), prefetch=0) as pipe:
    with pytest.raises(CheckpointError, match=r"none of the state's datasets \['d0', 'd1'\] continues"):
      pipe.set_state(state, reconfigure=True)
    assert tokens(run(pipe, 2)) == expected  # as it was
  with Pipeline(config(root, {"d0": 1, "d1": 1}, seed=12), prefetch=0) as pipe:
    with pytest.raises(CheckpointError, match="seed 11 -> 12: every dataset's order would change"):
      pipe.set_state(state, reconfigure=True)
  # d1's content changed under its name (another dataset's files): refused unless replaced: true
  moved = config(root, {"d0": 1, "d1": 1}).to_dict()
  moved["datasets"][1]["path"] = str(root / "d3")
  with Pipeline(PipelineConfig.from_dict(moved), prefetch=0) as pipe:
    with pytest.raises(CheckpointError, match=r"datasets\.d1: its content changed .*replaced: true"):
      pipe.set_state(state, reconfigure=True)
  moved["datasets"][1]["replaced"] = True
  with Pipeline(PipelineConfig.from_dict(moved), prefetch=0) as pipe:
    pipe.set_state(state, reconfigure=True)
    after = pipe.get_state()
    assert after["stream"]["datasets"]["d1"] == {"pass": 0, "position": 0, "taken": 0}
    assert after["stream"]["datasets"]["d0"] == state["stream"]["datasets"]["d0"]
    assert after["stream"]["changes"][0]["replaced"] == ["d1"]
  with Pipeline(config(root, {"d0": 1, "d1": 1}, seq_len=32), prefetch=0) as pipe:
    with pytest.raises(CheckpointError, match="packing: .*seq_len=16.*seq_len=32.*restore with reconfigure=True"):
      pipe.set_state(state)
    with pytest.raises(ConfigError, match="reconfigure: expected true or false"):
      pipe.set_state(state, reconfigure="yes")


@pytest.mark.slow  # several seconds: the everyday tier stays short
def test_changes_stack_and_a_hundred_of_them_keep_the_state_small(root):
  """100 changes (a dataset in and out, weights, rows): every one in the history, in order; the state's size
  measured (docs/state.md quotes it)."""
  state = None
  sizes = []
  for k in range(100):
    weights = {"d0": 1 + k % 3, "d1": 1} if k % 2 == 0 else {"d0": 1, "d2": 1 + k % 4}
    with Pipeline(config(root, weights, seq_len=16 + 4 * (k % 3)), prefetch=0) as pipe:
      if state is not None:
        pipe.set_state(state, reconfigure=True)
      run(pipe, 1)
      state = pipe.get_state()
    sizes.append(len(json.dumps(state)))
  changes = state["stream"]["changes"]
  assert [c["step"] for c in changes] == list(range(1, 100))  # each change at the step it was made
  growth = (sizes[-1] - sizes[0]) / 99
  print(f"state: {sizes[0]:,} bytes before any change, {sizes[-1]:,} after 99; {growth:.0f} bytes a change")
  assert growth < 200 and sizes[-1] < 24_000


@pytest.mark.slow  # several seconds: the everyday tier stays short
def test_the_stats_the_report_and_plan_show_the_change_points(root, tmp_path):
  before = config(root, {"d0": 1, "d1": 1}, stats_path=str(tmp_path / "stats.jsonl"))
  after = config(root, {"d0": 1, "d2": 1}, seq_len=20, stats_path=str(tmp_path / "stats.jsonl"))
  _, _, end = changed_run(before, after, 3, 8)
  records = [json.loads(line) for line in open(tmp_path / "stats.jsonl")]
  marked = [r for r in records if "config_change" in r]
  assert [r["step"] for r in marked] == [3] and marked[0]["config_change"]["added"] == ["d2"]
  (tmp_path / "state.json").write_text(json.dumps(end))
  cli = [sys.executable, "-m", "jaxdata"]
  wide = {**os.environ, "COLUMNS": "400"}  # one line per change, unwrapped
  report = subprocess.run([*cli, "report", str(tmp_path / "stats.jsonl")], capture_output=True, text=True, env=wide)
  line = "config changed at a restore: step 3: added d2; removed d1; packing: seq_len=16 -> seq_len=20"
  assert line in report.stdout, report.stdout + report.stderr
  (tmp_path / "after.json").write_text(json.dumps(after.to_dict()))

  def plan_with_state(state: str) -> subprocess.CompletedProcess:
    command = [*cli, "plan", str(tmp_path / "after.json"), "--tokens", "2000", "--read-spans", "0", "--state", state]
    return subprocess.run(command, capture_output=True, text=True, env=wide)

  plan = plan_with_state(str(tmp_path / "state.json"))
  assert line in plan.stdout, plan.stdout + plan.stderr
  (tmp_path / "bad.json").write_text("[1, 2]")
  bad = plan_with_state(str(tmp_path / "bad.json"))
  assert bad.returncode != 0 and "bad.json: not a pipeline state (no stream)" in bad.stdout + bad.stderr


def test_orbax_and_the_grain_adapter_restore_with_reconfigure(root, tmp_path):
  """Restore(pipe, reconfigure=True) through a CheckpointManager, and Grain's iterator with
  reconfigure_on_restore: the batches of the Pipeline API's change."""
  import orbax.checkpoint as ocp  # noqa: PLC0415 -- the checkpoint extra

  from jaxdata.checkpoint import Restore, Save  # noqa: PLC0415
  from jaxdata.integrations.grain import PipelineDataset  # noqa: PLC0415

  before, after = config(root, {"d0": 1, "d1": 1}), config(root, {"d0": 2, "d3": 1}, seq_len=20)
  expected, _, _ = changed_run(before, after, 3, 7)
  manager = ocp.CheckpointManager(str(tmp_path / "ckpt"), item_names=("data",))
  with Pipeline(before, prefetch=0) as pipe:
    run(pipe, 3)
    manager.save(3, args=ocp.args.Composite(data=Save(pipe)))
    manager.wait_until_finished()
  with Pipeline(after, prefetch=0) as pipe:
    with pytest.raises(CheckpointError, match="restore with reconfigure=True"):
      manager.restore(3, args=ocp.args.Composite(data=Restore(pipe)))
    manager.restore(3, args=ocp.args.Composite(data=Restore(pipe, reconfigure=True)))
    assert tokens(run(pipe, 4)) == tokens(expected[3:])
  with Pipeline(before, prefetch=0) as pipe:
    run(pipe, 3)
    state = pipe.get_state()
  iterator = iter(PipelineDataset(after, reconfigure_on_restore=True, prefetch=0))
  iterator.set_state(state)
  assert tokens([{k: np.asarray(v) for k, v in next(iterator).items()} for _ in range(4)]) == tokens(expected[3:])
  iterator.close()


def test_review_cases_special_tokens_pairs_hand_made_states_and_renames(root, tmp_path, caplog):
  """From the outside review: a BOS / EOS change is refused by name whatever the carry (carried pieces count the
  old ones); a carried preference pair is never split (one longer than the new rows is dropped and counted);
  a hand-made (re-sealed) state of the wrong shape is a CheckpointError; a rename warns that it reads again."""
  from jaxdata.checkpoint.state import seal  # noqa: PLC0415
  from pipeline_fixtures import coded_pairs, write_pair_dataset  # noqa: PLC0415

  base = config(root, {"d0": 1, "d1": 1})
  with Pipeline(base, prefetch=0) as pipe:
    run(pipe, 3)
    state = pipe.get_state()
  bos = config(root, {"d0": 1, "d1": 1}, packing={"mode": "best_fit", "seq_len": 16, "add_bos": True, "bos_id": 1})
  with Pipeline(bos, prefetch=0) as pipe:
    with pytest.raises(CheckpointError, match=r"packing bos \['-'\] -> \['1'\]: add_bos / add_eos .* cannot change"):
      pipe.set_state(state, reconfigure=True)
  for edit in (
    lambda s: s["fingerprint"].pop("content"),
    lambda s: s["fingerprint"].__setitem__("datasets", "d0"),
    lambda s: s.__setitem__("tokens_per_source", [1, 2]),
    lambda s: s["stream"]["datasets"].__setitem__("d0", [0, 0, 0]),
  ):
    bad = json.loads(json.dumps(state))
    bad.pop("digest")
    edit(bad)
    with Pipeline(config(root, {"d0": 1, "d2": 1}), prefetch=0) as pipe:
      with pytest.raises(CheckpointError, match="pipeline state: "):
        pipe.set_state(seal(bad), reconfigure=True)
  for d, name in ((0, "p0"), (1, "p1")):
    write_pair_dataset(str(tmp_path / name), d, coded_pairs(d, 60, seed=d + 3))

  def pairs(seq_len: int) -> PipelineConfig:
    return PipelineConfig.from_dict(
      {
        "seed": 11,
        "datasets": [{"name": n, "path": str(tmp_path / n)} for n in ("p0", "p1")],
        "mixture": {"unit": "documents", "weights": {"p0": 1, "p1": 1}},
        "exhausted_policy": "repeat",
        "packing": {"mode": "first_fit", "seq_len": seq_len, "pairs": {"layout": "one_row"}},
        "batch": {"global_batch_size": 3},
      }
    )

  with Pipeline(pairs(40), prefetch=0) as pipe:
    run(pipe, 1)
    carried = _carry_tokens(pipe.get_state())
    paired = pipe.get_state()
  assert carried > 6  # a pair longer than the new rows waits in the carry
  with Pipeline(pairs(6), prefetch=0) as pipe:
    pipe.set_state(paired, reconfigure=True)
    after = pipe.get_state()
    assert _carry_tokens(after) == 0 and after["stream"]["changes"][0]["dropped_tokens"] == carried
    assert len(run(pipe, 3)) == 3  # whole pairs only
  renamed = config(root, {"d0": 1, "d1": 1}).to_dict()
  renamed["datasets"][1]["name"] = "d1b"
  renamed["mixture"]["weights"] = {"d0": 1, "d1b": 1}
  with Pipeline(PipelineConfig.from_dict(renamed), prefetch=0) as pipe:
    pipe.set_state(state, reconfigure=True)
  assert "datasets.d1b: the same content as the removed dataset d1: it starts at pass 0" in caplog.text
