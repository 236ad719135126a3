"""Window sampling (docs/formats.md): T + 1-token windows that fill a row, with or without replacement."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import yaml
from scipy import stats

from checkpoint_property import assert_restores_exactly
from flat_fixtures import random_documents, write_flat
from jaxdata import ConfigError, Pipeline, PipelineConfig
from jaxdata.mixture.stream import load_metadata
from jaxdata.pipeline.execution import StepMaking
from jaxdata.sources.boundaries import DocumentBoundaries
from jaxdata.sources.flat_index import build_flat_index
from jaxdata.sources.opening import open_dataset
from jaxdata.sources.sampling_windows import WindowOptions
from jaxdata.testing import wait_for_processes
from jaxdata.tools.audit import audit
from jaxdata.tools.exposure import expected_unique_fraction, plan_run
from jaxdata.tools.mixture_checks import stored_order_warnings
from pipeline_fixtures import digest, free_port, rebuilt_batch, run_workers, write_coded_dataset

T = 4
SEED_003_WEIGHTS = {"web": 0.70, "code": 0.15, "books": 0.08, "arxiv": 0.04, "wiki": 0.03}
SHARD_TOKENS = (5, 13)  # per domain: 5 - 4 = 1 and 13 - 4 = 9 eligible windows


def token_id(domain: int, shard: int, position: np.ndarray | int) -> np.ndarray | int:
  return 1 + domain * 100 + shard * 20 + position


def seed_003_config(tmp_path, **overrides) -> PipelineConfig:
  datasets = []
  for d, name in enumerate(SEED_003_WEIGHTS):
    paths = []
    for s, length in enumerate(SHARD_TOKENS):
      paths.append(str(tmp_path / name / f"shard{s}.bin"))
      write_flat(paths[-1], [token_id(d, s, np.arange(length)).tolist()])
    build_flat_index("flat", paths, dtype="uint16")  # no boundaries: each file is one token stream
    datasets.append({"name": name, "path": str(tmp_path / name), "format": "flat", "sampling": "windows"})
  raw = {
    "seed": 3,
    "datasets": datasets,
    "mixture": {"weights": SEED_003_WEIGHTS, "interleave": "random"},
    "exhausted_policy": "repeat",
    "packing": {"mode": "first_fit", "seq_len": T},
    "batch": {"global_batch_size": 100},
  }
  raw.update(overrides)
  return PipelineConfig.from_dict(raw)


def draws(cfg: PipelineConfig, steps: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
  """(domain, shard, start) of every row's window, and the rows' tokens."""
  with Pipeline(cfg, prefetch=0) as pipe:
    rows = np.concatenate([np.asarray(next(pipe)["tokens"]) for _ in range(steps)])
  first = rows[:, 0] - 1
  return first // 100, first % 100 // 20, first % 20, rows


def test_seed_003_fixture_domains_shards_and_starts(tmp_path):
  cfg = seed_003_config(tmp_path)
  domain, shard, start, rows = draws(cfg, 100)  # 10,000 windows
  n = domain.size
  assert n == 10_000
  # Every row is one whole window of T consecutive tokens of one shard (inputs; the target comes next).
  assert (rows == token_id(domain, shard, start)[:, None] + np.arange(T)).all()
  for d, (name, weight) in enumerate(SEED_003_WEIGHTS.items()):
    mine = domain == d
    # Domain share: binomial sd <= sqrt(.25 / 10^4) = .005, so .025 is 5 sd (the bound).
    assert abs(mine.mean() - weight) < 0.025, (name, mine.mean())
    # Shard A has 1 of the domain's 10 eligible windows: binomial, bound 5 sd of the domain's draws.
    share_a = (shard[mine] == 0).mean()
    assert abs(share_a - 0.1) < 5 * np.sqrt(0.09 / mine.sum()), (name, share_a)
    # A file of exactly T + 1 tokens yields exactly one window: start 0.
    assert set(start[mine & (shard == 0)].tolist()) == {0}
    # Every valid start of the 13-token shard is reached (wiki, the rarest: ~270 draws over 9 starts).
    assert set(start[mine & (shard == 1)].tolist()) == set(range(SHARD_TOKENS[1] - T))
  # Starts of the 13-token shards, pooled: uniform over the 9 valid starts (chi-square, 8 dof).
  counts = np.bincount(start[shard == 1], minlength=9)
  assert stats.chisquare(counts).pvalue > 1e-6, counts  # a fixed seed: fails only if the draws are biased
  with open_dataset(str(tmp_path / "web"), windows=WindowOptions(T)) as view:
    assert view.shard_num_records.tolist() == [1, 9]


def test_draws_resume_exactly_at_every_step_without_rng_state(tmp_path):
  cfg = seed_003_config(tmp_path, batch={"global_batch_size": 8})

  def advance(pipe: Pipeline, n: int) -> list[tuple]:
    return [digest(next(pipe)) for _ in range(n)]

  assert_restores_exactly(lambda: Pipeline(cfg, prefetch=0), advance, total=10, stops=range(10))
  with Pipeline(cfg, prefetch=0) as pipe:
    next(pipe)
    state = pipe.get_state()
  assert "draws=uniform windows=4 replacement=1" in state["fingerprint"]["shuffle"]["web"]


def corpus_with_documents(tmp_path, count: int = 120) -> tuple[str, np.ndarray]:
  documents = random_documents(np.random.default_rng(9), count, eos_id=0, max_length=25)
  write_flat(str(tmp_path / "c" / "all.bin"), documents)
  build_flat_index("flat", [str(tmp_path / "c" / "all.bin")], dtype="uint16", boundaries=DocumentBoundaries.eos(0))
  return str(tmp_path / "c"), np.concatenate([np.asarray(d) for d in documents])


def window_config(path: str, window: int, **dataset: object) -> PipelineConfig:
  return PipelineConfig.from_dict(
    {
      "seed": 11,
      "datasets": [{"name": "w", "path": path, "sampling": "windows", "window": window, **dataset}],
      "mixture": {"weights": {"w": 1}},
      "shuffle_block_size": "global",
      "packing": {"mode": "first_fit", "seq_len": window},
      "batch": {"global_batch_size": 8},
    }
  )


def test_without_replacement_a_pass_uses_every_non_overlapping_window_once(tmp_path):
  path, tokens = corpus_with_documents(tmp_path)
  window = 8
  cfg = window_config(path, window, with_replacement=False)  # one pass (stop_after_passes 1 by default)
  with Pipeline(cfg, prefetch=0) as pipe:
    batches = list(pipe)
  total = tokens.size // (window + 1)
  rows = np.concatenate([np.asarray(b["tokens"]) for b in batches])
  targets = np.concatenate([np.asarray(b["targets"]) for b in batches])
  windows = [tuple(tokens[w * (window + 1) : (w + 1) * (window + 1)].tolist()) for w in range(total)]
  index_of = {w[:window]: i for i, w in enumerate(windows)}  # random 16-bit ids: the windows are distinct
  assert len(rows) == total - total % 8  # drop_remainder: the last partial batch is dropped
  order = [index_of[tuple(r.tolist())] for r in rows]  # KeyError: a row that is not a whole window
  for r, t, i in zip(rows, targets, order):
    # The last target is the window's T + 1-th token (pad when the T-th input ends a document).
    assert t[-1] == (windows[i][window] if r[-1] != 0 else 0)
  assert len(set(order)) == len(order)  # each window at most once in the pass
  assert order != sorted(order)  # in a shuffled order


def test_segments_positions_and_loss_follow_documents_inside_windows(tmp_path):
  path, tokens = corpus_with_documents(tmp_path)
  window = 16
  cfg = window_config(path, window, with_replacement=False)
  with Pipeline(cfg, prefetch=0) as pipe:
    batch = {k: np.asarray(v) for k, v in next(pipe).items()}
  for row in range(batch["tokens"].shape[0]):
    inputs = batch["tokens"][row]
    is_eos = inputs == 0
    # A document starts after every EOS input; its tokens get a new segment and positions from 0.
    starts = np.concatenate([[True], is_eos[:-1]])
    assert batch["segment_ids"][row].tolist() == np.cumsum(starts).tolist()
    last_start = np.maximum.accumulate(np.where(starts, np.arange(window), 0))
    assert batch["positions"][row].tolist() == (np.arange(window) - last_start).tolist()
    # The EOS's target would be the next document's first token: masked; every other target is the next token.
    assert batch["loss_mask"][row].tolist() == (~is_eos).astype(int).tolist()
    assert (batch["targets"][row][:-1][~is_eos[:-1]] == inputs[1:][~is_eos[:-1]]).all()


def test_windows_inside_documents_never_cross_a_boundary(tmp_path):
  path, tokens = corpus_with_documents(tmp_path, count=200)
  window = 6
  for replacement in (True, False):
    cfg = window_config(path, window, with_replacement=replacement, cross_documents=False)
    with Pipeline(cfg, prefetch=0) as pipe:
      batches = [next(pipe) for _ in range(5)]
    for b in batches:
      inputs, targets = np.asarray(b["tokens"]), np.asarray(b["targets"])
      # Only the last token of a window (its final target) may be an EOS: one document per row.
      assert not (inputs == 0).any()
      assert (np.asarray(b["segment_ids"]) == 1).all() and (np.asarray(b["loss_mask"]) == 1).all()
      assert not (targets[:, :-1] == 0).any()


def test_a_window_dataset_mixes_with_document_datasets_by_tokens(tmp_path):

  path, _ = corpus_with_documents(tmp_path)
  write_coded_dataset(str(tmp_path / "docs"), 1, [7, 30, 12, 40, 3] * 40)
  cfg = PipelineConfig.from_dict(
    {
      "seed": 2,
      "datasets": [
        {"name": "w", "path": path, "sampling": "windows", "window": 16},
        {"name": "docs", "path": str(tmp_path / "docs")},
      ],
      "mixture": {"weights": {"w": 0.25, "docs": 0.75}},
      "exhausted_policy": "repeat",
      "allow_mixed_tokenizers": True,
      "packing": {"mode": "best_fit", "seq_len": 16},
      "batch": {"global_batch_size": 8},
    }
  )
  with Pipeline(cfg, prefetch=0) as pipe:
    batches = [next(pipe) for _ in range(40)]
  sources = np.concatenate([np.asarray(b["source_ids"]).ravel() for b in batches])
  # Exact interleave by tokens: window tokens are within a step's worth (128) of a quarter of all
  # non-pad tokens, and every window fills a whole row by itself.
  assert abs((sources == 0).sum() - 0.25 * (sources >= 0).sum()) <= 128
  for b in batches:
    src = np.asarray(b["source_ids"])
    window_rows = (src == 0).any(axis=1)
    assert (src[window_rows] == 0).all()


def test_bos_or_eos_with_windows_is_a_config_error(tmp_path):

  with pytest.raises(ConfigError, match=r"datasets\.w: sampling: windows takes token windows as they lie"):
    PipelineConfig.from_dict(
      {
        "datasets": [{"name": "w", "sampling": "windows"}],
        "mixture": {"weights": {"w": 1}},
        "packing": {"add_eos": True},
      }
    )
  with pytest.raises(ConfigError, match=r"datasets\.w\.window: applies only with sampling: windows"):
    PipelineConfig.from_dict({"datasets": [{"name": "w", "window": 8}], "mixture": {"weights": {"w": 1}}})


@pytest.mark.slow
@pytest.mark.multiprocess
def test_one_two_and_four_processes_build_identical_global_batches(tmp_path):

  path, _ = corpus_with_documents(tmp_path)
  write_coded_dataset(str(tmp_path / "docs"), 1, [9, 30, 14, 41, 2] * 30)
  config = tmp_path / "pipeline.yaml"
  config.write_text(
    yaml.safe_dump(
      {
        "seed": 4,
        "allow_mixed_tokenizers": True,
        "exhausted_policy": "repeat",
        "datasets": [
          {"name": "draws", "path": path, "sampling": "windows", "window": 32},
          {"name": "perm", "path": path, "sampling": "windows", "window": 16, "with_replacement": False},
          {"name": "docs", "path": str(tmp_path / "docs")},
        ],
        "mixture": {"weights": {"draws": 0.4, "perm": 0.2, "docs": 0.4}},
        "shuffle_block_size": "global",
        "packing": {"mode": "best_fit", "seq_len": 32},
        "batch": {"global_batch_size": 16},
      }
    )
  )
  steps = 4
  with Pipeline(PipelineConfig.from_dict(yaml.safe_load(config.read_text())), prefetch=0) as reference:
    expected = [{k: np.asarray(v) for k, v in next(reference).items()} for _ in range(steps)]
    expected_state = json.loads(json.dumps(reference.get_state()))
  worker = os.path.join(os.path.dirname(__file__), "support", "multihost_worker.py")
  for count in (2, 4):
    out_dir = tmp_path / f"out{count}"
    out_dir.mkdir()
    port = free_port()
    run_workers(worker, [[str(port), str(count), str(i), str(config), str(out_dir), str(steps)] for i in range(count)])
    for step in range(steps):
      rebuilt = rebuilt_batch(out_dir, count, step, expected[step])
      for name in expected[step]:
        assert np.array_equal(rebuilt[name], expected[step][name]), (count, step, name)
    for process in range(count):  # the state is the same on every host, for any host count: it restores anywhere
      assert json.loads((out_dir / f"p{process}_state.json").read_text()) == expected_state


def test_expected_unique_fraction_matches_simulated_draws():

  segments, window, draws, reps = np.array([13, 5, 40, 4]), 4, 30, 4000
  starts = segments - window
  rng = np.random.default_rng(0)
  offsets = np.concatenate([[0], np.cumsum(segments)])
  eligible = np.concatenate([offsets[i] + np.arange(n) for i, n in enumerate(starts) if n > 0])
  fractions = []
  for _ in range(reps):
    seen = np.zeros(segments.sum(), bool)
    for start in rng.choice(eligible, draws):
      seen[start : start + window + 1] = True
    fractions.append(seen.mean())
  # The mean of 4,000 independent runs: within 5 standard errors of the exact expectation.
  bound = 5 * np.std(fractions) / np.sqrt(reps)
  assert abs(np.mean(fractions) - expected_unique_fraction(segments, window, draws)) < bound


def test_the_plan_reports_passes_and_unique_tokens_seen_of_window_datasets(tmp_path):

  cfg = seed_003_config(tmp_path)
  tokens = 40_000
  table, end, _ = plan_run(cfg, tokens, max_passes=1e9)
  assert end is None  # every dataset repeats
  for name, weight in SEED_003_WEIGHTS.items():
    row = table.datasets[name]
    assert row.unique_tokens == sum(SHARD_TOKENS)
    assert row.passes == pytest.approx(weight * tokens / sum(SHARD_TOKENS))  # w D / U
    draws = weight * tokens / T
    assert row.unique_seen == pytest.approx(expected_unique_fraction(np.array(SHARD_TOKENS), T, draws))
    assert row.unique_seen == pytest.approx(1.0)  # thousands of draws over 10 starts


def test_audit_checks_window_passes_and_lets_draws_repeat(tmp_path):

  path, _ = corpus_with_documents(tmp_path, count=60)
  cfg = PipelineConfig.from_dict(
    {
      "seed": 1,
      "exhausted_policy": "repeat",
      "datasets": [
        {"name": "draws", "path": path, "sampling": "windows", "window": 8},
        {
          "name": "perm",
          "path": path,
          "sampling": "windows",
          "window": 8,
          "with_replacement": False,
          "shuffle_block_size": None,  # stored order, asked for by name
        },
      ],
      "mixture": {"weights": {"draws": 0.5, "perm": 0.5}},
      "packing": {"mode": "first_fit", "seq_len": 8},
      "batch": {"global_batch_size": 8},
    }
  )
  result = audit(cfg, hosts=2, steps=60)  # 240 draws of ~800 starts: some repeat, legitimately
  assert result.ok, result.failures
  assert "perm pass 0" in result.passes_checked and not any(p.startswith("draws") for p in result.passes_checked)
  warned = " ".join(stored_order_warnings(cfg, load_metadata(cfg)))
  assert "perm:" in warned and "draws:" not in warned  # draws have no stored order to warn about


@pytest.mark.slow
@pytest.mark.multiprocess
def test_worker_processes_assemble_the_same_window_batches(tmp_path):
  path, _ = corpus_with_documents(tmp_path)
  cfg = window_config(path, 16)
  with Pipeline(cfg, prefetch=0) as pipe:
    want = [digest(b) for b in pipe]  # one pass of draws: U // T of them, then the stream ends
  with Pipeline(cfg, prefetch=0, making=StepMaking("process", reader_processes=1)) as pipe:
    wait_for_processes(pipe)  # the steps compared are the workers', not the in-process start's
    got = [digest(b) for b in pipe]
    assert pipe.execution().steps_from_processes == len(got)
  assert len(want) >= 8 and got == want
