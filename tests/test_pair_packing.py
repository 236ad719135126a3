"""Preference pairs packed whole (`packing.pairs`): every pair intact in every layout, each side as
the fine-tuning path would lay it out alone, restores exact, hostile inputs named.

The oracle is the coded records themselves (tests/support/pipeline_fixtures.py `coded_pairs`):
every batch is decoded back into sides and compared with what was written.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jaxdata import ConfigError, DatasetError, Pipeline, PipelineConfig, pair_attention_mask, sequence_logprobs
from jaxdata.config.packing_config import PackingConfig, PairPacking
from jaxdata.transforms.assemble import DocumentTokens, RowPlacement, assemble_rows, padded_buffer
from jaxdata.transforms.pieces import Pieces
from pipeline_fixtures import code, coded_pairs, decode, write_pair_dataset

LAYOUTS = [("one_row", False), ("one_row", True), ("parallel", False), ("parallel", True)]
SEQ_LEN = 24


@pytest.fixture(scope="module")
def pair_data(tmp_path_factory) -> dict:
  root = tmp_path_factory.mktemp("pairs")
  # p1's answers run long: some of its pairs fit no row (dropped and counted)
  records = {0: coded_pairs(0, 60, seed=1), 1: coded_pairs(1, 40, seed=2, answer=(2, 25))}
  for d, pairs in records.items():
    write_pair_dataset(str(root / f"p{d}"), d, pairs)
  return {"root": root, "records": records}


def pair_config(data: dict, layout: str, shared: bool, **packing) -> PipelineConfig:
  root = data["root"]
  return PipelineConfig.from_dict(
    {
      "seed": 5,
      "datasets": [{"name": f"p{d}", "path": str(root / f"p{d}")} for d in (0, 1)],
      "mixture": {"weights": {"p0": 2, "p1": 1}},
      "packing": {
        "mode": "best_fit",
        "seq_len": SEQ_LEN,
        "pairs": {"layout": layout, "shared_prompt": shared},
        **packing,
      },
      "batch": {"global_batch_size": 4, "drop_remainder": False},
    }
  )


def _side_of(tokens: np.ndarray) -> tuple[int, int]:
  d, r, _ = decode(tokens[-1:])
  return int(d[0]), int(r[0])


def sides_in_row(batch: dict, row: int, layout: str) -> list[dict]:
  """Every pair of one row, decoded from the batch alone: per side its tokens, targets, loss mask, positions."""
  out = []
  if layout == "one_row":
    pair_ids, side = batch["pair_ids"][row], batch["pair_side"][row]
    for k in range(1, int(pair_ids.max(initial=0)) + 1):
      here = pair_ids == k
      pair = {}
      for s, name in ((0, "chosen"), (1, "rejected")):
        slots = np.flatnonzero(here & ((side == s) | (side == 2)))  # the shared prompt, then the side
        pair[name] = {f: batch[f][row][slots] for f in ("tokens", "targets", "loss_mask", "positions")}
        pair[name]["answer_slots"] = np.flatnonzero(here & (side == s))
      out.append(pair)
    return out
  segments = batch["chosen_segment_ids"][row]
  for k in range(1, int(segments.max(initial=0)) + 1):
    pair = {}
    for name in ("chosen", "rejected"):
      slots = np.flatnonzero(batch[f"{name}_segment_ids"][row] == k)
      pair[name] = {f: batch[f"{name}_{f}"][row][slots] for f in ("tokens", "targets", "loss_mask", "positions")}
    out.append(pair)
  return out


def check_pair(pair: dict, records: dict, layout: str, shared: bool) -> tuple[int, int]:
  """One decoded pair against its record: both sides whole, the prompt identical, targets the side's next
  tokens, the loss mask the targets' trained flags, positions as the layout says."""
  d, r = _side_of(pair["chosen"]["tokens"])
  chosen, chosen_marks, rejected, rejected_marks = records[d][r]
  assert _side_of(pair["rejected"]["tokens"]) == (d, r), "the two sides of a segment pair are one record's"
  prompt = int(np.argmax(chosen_marks & 1))
  keep = max(prompt - 1, 0) if shared else 0
  for name, ids, marks in (("chosen", chosen, chosen_marks), ("rejected", rejected, rejected_marks)):
    got = pair[name]
    if layout == "parallel" and shared and name == "rejected":
      ids, marks = ids[keep:], marks[keep:]  # the rejected row holds the answer from the prompt's last token
      assert got["positions"].tolist() == list(range(keep, keep + ids.size))
    else:
      assert got["positions"].tolist() == list(range(ids.size))
    assert got["tokens"].tolist() == ids.tolist(), f"{name} side of record {r} of p{d}"
    assert got["targets"][:-1].tolist() == ids[1:].tolist()
    assert got["loss_mask"].tolist() == np.r_[marks[1:] & 1, 0].tolist()
  return d, r


def planned_columns(pair: tuple, layout: str, shared: bool) -> int:
  """What a pair takes in a row, from its record (the oracle's own count)."""
  chosen, chosen_marks, rejected, _ = pair
  once = max(int(np.argmax(chosen_marks & 1)) - 1, 0) if shared else 0
  return chosen.size + rejected.size - once if layout == "one_row" else max(chosen.size, rejected.size - once)


def decoded_pass(cfg: PipelineConfig, data: dict, layout: str, shared: bool) -> tuple[list, int]:
  seen, dropped = [], 0
  with Pipeline(cfg, prefetch=0) as pipe:
    for batch in pipe:
      batch = {k: np.asarray(v) for k, v in batch.items()}
      for row in range(next(iter(batch.values())).shape[0]):
        seen += [check_pair(pair, data["records"], layout, shared) for pair in sides_in_row(batch, row, layout)]
      dropped += pipe.stats()["dropped_documents"]
  return seen, dropped


@pytest.mark.parametrize(("layout", "shared"), LAYOUTS)
def test_every_pair_is_whole_in_one_row_of_one_step_and_dropped_ones_are_counted(pair_data, layout, shared):
  columns = {
    (d, r): planned_columns(p, layout, shared) for d, ps in pair_data["records"].items() for r, p in enumerate(ps)
  }
  too_long = {key for key, n in columns.items() if n > SEQ_LEN}
  assert too_long
  # a mixture (p0 repeats while p1 finishes its pass): every pair that fits a row comes, whole
  seen, dropped = decoded_pass(pair_config(pair_data, layout, shared), pair_data, layout, shared)
  assert set(seen) == set(columns) - too_long and dropped >= len({k for k in too_long if k[0] == 1})
  # one pass of p1 alone: each pair once, and each that fits no row counted once
  raw = pair_config(pair_data, layout, shared).to_dict()
  raw["datasets"], raw["mixture"]["weights"] = raw["datasets"][1:], {"p1": 1}
  seen, dropped = decoded_pass(PipelineConfig.from_dict(raw), pair_data, layout, shared)
  assert len(seen) == len(set(seen)) and set(seen) == {k for k in columns if k[0] == 1} - too_long
  assert dropped == len({k for k in too_long if k[0] == 1})


def test_each_side_is_laid_out_as_the_fine_tuning_path_lays_out_its_conversation(pair_data):
  """The one_row chosen segment equals the side assembled alone by the fine-tuning path (`assemble_rows`
  with the side's mask): tokens, targets, loss mask and positions."""
  cfg = pair_config(pair_data, "one_row", False)
  with Pipeline(cfg, prefetch=0) as pipe:
    batch = {k: np.asarray(v) for k, v in next(pipe).items()}
  checked = 0
  for row in range(4):
    for pair in sides_in_row(batch, row, "one_row"):
      d, r = _side_of(pair["chosen"]["tokens"])
      for name, (ids, marks) in zip(("chosen", "rejected"), [pair_data["records"][d][r][i : i + 2] for i in (0, 2)]):
        n = ids.size
        buffer = padded_buffer([ids.astype(np.uint32)], SEQ_LEN, 0)
        trained = padded_buffer([(marks & 1).astype(np.uint8)], SEQ_LEN, 0)
        alone = assemble_rows(
          RowPlacement(Pieces(*(np.array([v]) for v in (0, 0, 0, 0, n, n))), np.array([0]), np.array([0]), 1, SEQ_LEN),
          DocumentTokens(buffer, np.array([0]), trained),
          PackingConfig(seq_len=SEQ_LEN),
        )
        for feature in ("tokens", "targets", "loss_mask", "positions"):
          assert pair[name][feature].tolist() == alone[feature][0, :n].tolist(), (name, feature)
        checked += 1
  assert checked >= 4


@pytest.mark.parametrize(("layout", "shared"), LAYOUTS)
def test_state_at_every_step_restores_to_the_same_remaining_output(pair_data, layout, shared):
  cfg = pair_config(pair_data, layout, shared)
  cfg = PipelineConfig.from_dict({**cfg.to_dict(), "exhausted_policy": "repeat"})
  steps = 8
  with Pipeline(cfg, prefetch=0) as pipe:
    states, batches = [], []
    for _ in range(steps):
      states.append(json.loads(json.dumps(pipe.get_state())))
      batches.append({k: np.asarray(v).tolist() for k, v in next(pipe).items()})
  for at in range(0, steps, 3):
    with Pipeline(cfg, prefetch=2) as fresh:
      fresh.set_state(states[at])
      rest = [{k: np.asarray(v).tolist() for k, v in next(fresh).items()} for _ in range(steps - at)]
    assert rest == batches[at:], f"restored at step {at}"


def test_segment_k_of_a_chosen_row_and_of_its_rejected_row_are_one_pair_and_rows_end_in_padding(pair_data):
  cfg = pair_config(pair_data, "parallel", False)
  with Pipeline(cfg, prefetch=0) as pipe:
    for batch in pipe:
      batch = {k: np.asarray(v) for k, v in batch.items()}
      for name in ("chosen", "rejected"):
        segments = batch[f"{name}_segment_ids"]
        filled = segments > 0
        # compact: each row's pairs from column 0, padding only after the last
        assert (np.diff(filled.astype(int), axis=1) <= 0).all()
        assert (batch[f"{name}_source_ids"][~filled] == -1).all() and (batch[f"{name}_loss_mask"][~filled] == 0).all()
      assert (batch["chosen_segment_ids"].max(1) == batch["rejected_segment_ids"].max(1)).all()


def test_the_attention_mask_and_sequence_logprobs_match_a_per_pair_loop(pair_data):
  cfg = pair_config(pair_data, "one_row", True)
  with Pipeline(cfg, prefetch=0) as pipe:
    batch = {k: np.asarray(v) for k, v in next(pipe).items()}
  mask = pair_attention_mask(batch)
  rng = np.random.default_rng(0)
  logp = rng.normal(size=batch["tokens"].shape)
  chosen, rejected, present = (np.asarray(a) for a in sequence_logprobs(batch, logp, max_pairs=SEQ_LEN // 2))
  for row in range(batch["tokens"].shape[0]):
    side, pair, position = batch["pair_side"][row], batch["pair_ids"][row], batch["positions"][row]
    for k in range(1, int(pair.max()) + 1):
      for s, got in ((0, chosen), (1, rejected)):
        slots = np.flatnonzero((pair == k) & ((side == s) | (side == 2)))
        # a side attends exactly its own earlier tokens: its prompt and its answer, nothing of the other answer
        for i, q in enumerate(slots):
          assert set(np.flatnonzero(mask[row, q])) == set(slots[: i + 1])
        # positions run on through the side as if it were alone
        assert position[slots].tolist() == list(range(slots.size))
        trained = slots[batch["loss_mask"][row, slots] == 1]
        answer = trained[side[trained] == s]
        assert np.isclose(got[row, k - 1], logp[row, answer].sum())
      assert present[row, k - 1]
    assert not present[row, int(pair.max()) :].any()
  parallel = pair_config(pair_data, "parallel", False)
  with Pipeline(parallel, prefetch=0) as pipe:
    batch = {k: np.asarray(v) for k, v in next(pipe).items()}
  logps = {name: rng.normal(size=batch["chosen_tokens"].shape) for name in ("chosen", "rejected")}
  chosen, rejected, present = (np.asarray(a) for a in sequence_logprobs(batch, logps, max_pairs=SEQ_LEN))
  for row in range(batch["chosen_tokens"].shape[0]):
    for k in range(1, int(batch["chosen_segment_ids"][row].max()) + 1):
      for name, got in (("chosen", chosen), ("rejected", rejected)):
        slots = (batch[f"{name}_segment_ids"][row] == k) & (batch[f"{name}_loss_mask"][row] == 1)
        assert np.isclose(got[row, k - 1], logps[name][row, slots].sum())


@pytest.mark.parametrize(
  ("packing", "message"),
  [
    ({"mode": "concat"}, "packing.mode: concat cuts documents"),
    ({"long_docs": "truncate"}, "packing.long_docs: truncate"),
    ({"add_eos": True}, "packing.add_eos: a pair's sides carry"),
    ({"warmup": [{"until_step": 2, "seq_len": 12}]}, "packing.warmup: pairs pack at one seq_len"),
    ({"pairs": {"layout": "sideways"}}, "packing.pairs.layout"),
    ({"pairs": {"too_long": "maybe"}}, "packing.pairs.too_long"),
    ({"pairs": {"shared_prompt": "yes"}}, "packing.pairs.shared_prompt"),
  ],
)
def test_bad_pair_packing_is_named(pair_data, packing, message):
  raw = pair_config(pair_data, "one_row", False).to_dict()
  raw["packing"] = {**raw["packing"], **packing}
  if "pairs" in packing:
    raw["packing"]["pairs"] = {
      **pair_config(pair_data, "one_row", False).to_dict()["packing"]["pairs"],
      **packing["pairs"],
    }
  with pytest.raises(ConfigError, match=message):
    PipelineConfig.from_dict(raw)


def test_pairs_and_documents_are_not_mixed_and_too_long_pairs_can_be_refused(pair_data, tmp_path):
  from pipeline_fixtures import write_coded_dataset  # noqa: PLC0415

  write_coded_dataset(str(tmp_path / "docs"), 3, [5, 6, 7])
  raw = pair_config(pair_data, "one_row", False).to_dict()
  raw["datasets"].append({"name": "docs", "path": str(tmp_path / "docs")})
  raw["mixture"]["weights"]["docs"] = 1
  with pytest.raises(ConfigError, match="dataset docs: holds documents, not preference pairs"):
    Pipeline(PipelineConfig.from_dict(raw))
  raw = pair_config(pair_data, "one_row", False).to_dict()
  raw["packing"]["pairs"]["too_long"] = "error"
  with pytest.raises(ConfigError, match=r"dataset p1: \d+ pairs take more than packing.seq_len 24 columns"):
    Pipeline(PipelineConfig.from_dict(raw))
  raw = pair_config(pair_data, "one_row", False).to_dict()
  raw["batch"]["features"] = ["tokens"]
  with pytest.raises(ConfigError, match="batch.features: with packing.pairs a step holds tokens"):
    PipelineConfig.from_dict(raw)


def test_a_stale_column_file_or_a_damaged_mark_is_named(pair_data, tmp_path):
  import shutil  # noqa: PLC0415

  copy = tmp_path / "p0"
  shutil.copytree(pair_data["root"] / "p0", copy)
  manifest = json.loads((copy / "manifest.json").read_text())
  column = copy / manifest["shards"][0]["columns"]["chosen_length"]
  values = np.load(column)
  values[:] = values + 1  # every chosen side one longer than its record says
  np.save(column, values)
  raw = pair_config(pair_data, "parallel", False).to_dict()  # planned by the longer side: the column counts
  raw["datasets"] = [{"name": "p0", "path": str(copy)}]
  raw["mixture"]["weights"] = {"p0": 1}
  with Pipeline(PipelineConfig.from_dict(raw), prefetch=0) as pipe:
    with pytest.raises(DatasetError, match="does not give the .* columns it was planned at"):
      next(pipe)
  os.remove(column)
  with pytest.raises(DatasetError, match="column file is missing"):
    Pipeline(PipelineConfig.from_dict(raw))


def test_pair_packing_defaults():
  assert PairPacking() == PairPacking(layout="one_row", shared_prompt=False, too_long="drop")
  # a pair is never split: long_docs' default (split) means drop for pairs
  assert PackingConfig(pairs={"layout": "parallel"}).long_docs == "drop"


def test_maxtexts_use_dpo_gives_its_dpo_batch_one_pair_a_row(pair_data):
  """MaxText's `use_dpo` keys: each row the pair as MaxText's DPO input pads it (each side's ids from column 0,
  `*_segmentation` 1 on them and 0 after, `*_position` 0, 1, ... then 0), the keys its dpo_loss_fn reads."""
  from jaxdata.integrations.maxtext import MAXTEXT_DPO_FEATURES, MaxTextPipeline  # noqa: PLC0415

  root = pair_data["root"]
  values = {
    "grain_train_files": f"{root}/p0/*.array_record,0.6;{root}/p1/*.array_record,0.4",
    "max_target_length": SEQ_LEN,
    "global_batch_size_to_load": 4,
    "use_dpo": True,
    "train_data_columns": ["chosen", "rejected"],
  }
  with MaxTextPipeline(values, prefetch=0) as pipe:
    batches = [{k: np.asarray(v) for k, v in next(pipe).items()} for _ in range(5)]
    state = pipe.get_state()
    after = {k: np.asarray(v) for k, v in next(pipe).items()}
  for batch in batches:
    assert tuple(batch) == MAXTEXT_DPO_FEATURES
    for row in range(4):
      d, r = _side_of(batch["chosen"][row][batch["chosen_segmentation"][row] == 1])
      chosen, _, rejected, _ = pair_data["records"][d][r]
      for side, ids in (("chosen", chosen), ("rejected", rejected)):
        expected = np.zeros(SEQ_LEN, np.int64)
        expected[: ids.size] = ids
        assert batch[side][row].tolist() == expected.tolist()
        assert batch[f"{side}_segmentation"][row].tolist() == [1] * ids.size + [0] * (SEQ_LEN - ids.size)
        assert batch[f"{side}_position"][row].tolist() == list(range(ids.size)) + [0] * (SEQ_LEN - ids.size)
  with MaxTextPipeline(values, prefetch=0) as pipe:
    pipe.set_state(state)
    again = {k: np.asarray(v) for k, v in next(pipe).items()}
  assert all(np.array_equal(after[k], again[k]) for k in after)
  with pytest.raises(ConfigError, match="use_dpo: False, and dataset 'p0' holds preference pairs"):
    MaxTextPipeline({**values, "use_dpo": False, "train_data_columns": ["text"]})


def test_grains_ds_i_gives_the_pair(pair_data):
  """A dataset of pairs as Grain's random-access source: `ds[i]` is record i's two sides and their trained masks."""
  import grain  # noqa: PLC0415

  from jaxdata import open_dataset  # noqa: PLC0415

  with open_dataset(str(pair_data["root"] / "p1")) as dataset:
    source = grain.MapDataset.source(dataset)
    for i in (0, 7, len(pair_data["records"][1]) - 1):
      chosen, chosen_marks, rejected, rejected_marks = pair_data["records"][1][i]
      got = source[i]
      assert got["chosen"].tolist() == chosen.tolist() and got["rejected"].tolist() == rejected.tolist()
      assert got["chosen_mask"].tolist() == (chosen_marks & 1).tolist()
      assert got["rejected_mask"].tolist() == (rejected_marks & 1).tolist()
    shuffled = [pair["chosen"][0] for pair in source.shuffle(seed=3)]
    assert sorted(shuffled) == sorted(c[0] for c, _, _, _ in pair_data["records"][1])


def toy_logprobs(batch):
  """A stand-in reference model: log p(target) = -(target mod 7) / 10, whatever the context."""
  return -(np.asarray(batch["targets"]) % 7) / 10.0


def side_sum(ids: np.ndarray, marks: np.ndarray) -> float:
  """The oracle: a side's summed log p over its trained targets (token j + 1 is the target of token j)."""
  trained = (marks[1:] & 1) == 1
  return float((-(ids[1:] % 7) / 10.0)[trained].sum())


@pytest.fixture(scope="module")
def referenced(tmp_path_factory, pair_data) -> str:
  import shutil  # noqa: PLC0415

  from jaxdata import reference_logprobs  # noqa: PLC0415

  path = str(tmp_path_factory.mktemp("referenced") / "p0")
  shutil.copytree(pair_data["root"] / "p0", path)
  manifest = reference_logprobs(path, toy_logprobs, "toy-ref-1", seq_len=64, rows=3)
  assert manifest.stats["reference_logprobs"]["model_id"] == "toy-ref-1"
  return path


def test_stored_reference_logprobs_are_each_sides_sum_over_its_trained_targets(pair_data, referenced):
  from jaxdata import open_dataset  # noqa: PLC0415

  with open_dataset(referenced) as dataset:
    for name, index in (("ref_chosen_logp", (0, 1)), ("ref_rejected_logp", (2, 3))):
      want = [side_sum(pair[index[0]], pair[index[1]]) for pair in pair_data["records"][0]]
      assert np.allclose(dataset.columns[name], want, atol=1e-5)


@pytest.mark.parametrize(("layout", "shared"), LAYOUTS)
def test_reference_logprobs_come_with_each_side_of_every_pair(pair_data, referenced, layout, shared):
  from jaxdata.pipeline import pair_references  # noqa: PLC0415

  raw = pair_config(pair_data, layout, shared).to_dict()
  raw["datasets"], raw["mixture"]["weights"] = [{"name": "p0", "path": referenced}], {"p0": 1}
  raw["packing"]["pairs"]["reference"] = "toy-ref-1"
  cfg = PipelineConfig.from_dict(raw)
  checked = 0
  with Pipeline(cfg, prefetch=2) as pipe:
    for _ in range(4):
      batch = {k: np.asarray(v) for k, v in next(pipe).items()}
      chosen, rejected = (np.asarray(a) for a in pair_references(batch, SEQ_LEN))
      for row in range(4):
        for k, pair in enumerate(sides_in_row(batch, row, layout)):
          d, r = _side_of(pair["chosen"]["tokens"])
          c, cm, b, bm = pair_data["records"][d][r]
          assert np.isclose(chosen[row, k], side_sum(c, cm), atol=1e-5)
          assert np.isclose(rejected[row, k], side_sum(b, bm), atol=1e-5)
          checked += 1
  assert checked > 10
  raw["packing"]["pairs"]["reference"] = "another-model"
  with pytest.raises(ConfigError, match="dataset p0: holds reference log-probabilities of model 'toy-ref-1'"):
    Pipeline(PipelineConfig.from_dict(raw))
  raw["datasets"] = [{"name": "p0", "path": str(pair_data["root"] / "p0")}]
  with pytest.raises(ConfigError, match="dataset p0: holds reference log-probabilities of no model"):
    Pipeline(PipelineConfig.from_dict(raw))


def test_jaxdata_reference_runs_a_users_function_named_on_the_command_line(pair_data, tmp_path, monkeypatch):
  import shutil  # noqa: PLC0415

  from jaxdata.cli import main  # noqa: PLC0415

  shutil.copytree(pair_data["root"] / "p1", tmp_path / "p1")
  (tmp_path / "toyref.py").write_text("def logp(batch):\n  return -(batch['targets'] % 7) / 10.0\n")
  monkeypatch.chdir(tmp_path)
  args = ["reference", str(tmp_path / "p1"), "--fn", "toyref:logp", "--model-id", "toy", "--seq-len", "64", "-q"]
  assert main(args) == 0
  manifest = json.loads((tmp_path / "p1" / "manifest.json").read_text())
  assert manifest["stats"]["reference_logprobs"]["model_id"] == "toy"
  assert set(manifest["shards"][0]["columns"]) == {
    "chosen_length",
    "prompt_length",
    "ref_chosen_logp",
    "ref_rejected_logp",
  }
  assert main(["reference", str(tmp_path / "p1"), "--fn", "toyref", "--model-id", "toy"]) != 0  # named, one line
  # a pair longer than the rows given is refused: every pair gets its values
  assert main(["reference", str(tmp_path / "p1"), "--fn", "toyref:logp", "--model-id", "toy", "--seq-len", "8"]) != 0


def test_a_target_of_probability_zero_stays_in_its_own_pair():
  """-inf on one trained target is that side's sum, never nan in another pair (a select, not x 0)."""
  batch = {
    "pair_ids": np.array([[1, 1, 1, 1, 2, 2, 2, 2]]),
    "pair_side": np.array([[0, 0, 1, 1, 0, 0, 1, 1]]),
    "loss_mask": np.array([[1, 0, 1, 0, 1, 0, 1, 0]]),
  }
  logp = np.array([[-1.0, -9, -2.0, -9, -3.0, -9, -np.inf, -9]])
  chosen, rejected, present = (np.asarray(a).tolist() for a in sequence_logprobs(batch, logp, 2))
  assert chosen == [[-1.0, -3.0]] and rejected == [[-2.0, -np.inf]] and present == [[True, True]]


@pytest.mark.parametrize(
  ("call", "message"),
  [
    (lambda b: pair_attention_mask({"chosen_segment_ids": b}), "pair_attention_mask is the one_row layout's mask"),
    (lambda b: sequence_logprobs({"chosen_segment_ids": b}, b, 2), "a parallel batch takes"),
    (lambda b: sequence_logprobs({"pair_ids": b}, b[:, :1], 2), r"token_logprobs: shape \(1, 1\)"),
    (lambda b: sequence_logprobs({"tokens": b}, b, 2), "not a batch of preference pairs"),
  ],
)
def test_the_helpers_name_a_batch_of_the_wrong_layout(call, message):
  with pytest.raises(ValueError, match=message):
    call(np.ones((1, 4), np.int32))


@pytest.mark.parametrize(
  ("ids", "marks", "message"),
  [
    ([20, 21, 24, 25, 20, 21, 22, 23], [2, 2, 3, 3, 0, 0, 1, 1], "not set on the record's last ids only"),
    ([20, 21, 24, 25], [0, 2, 1, 3], "not set on the record's last ids only"),
    ([10, 11, 12, 13, 14, 10, 11], [0, 0, 0, 0, 1, 2, 3], "rejected side is shorter than the prompt"),
    ([10, 11, 12, 10, 9, 13], [0, 0, 1, 2, 2, 3], "do not open with the same untrained prompt"),
    ([10, 11, 12, 10, 11, 13], [0, 0, 1, 2, 3, 3], "do not open with the same untrained prompt"),
  ],
)
def test_the_writer_refuses_a_record_that_is_not_a_pair(tmp_path, ids, marks, message):
  from jaxdata.sources import DatasetWriter  # noqa: PLC0415

  writer = DatasetWriter(str(tmp_path / "bad"), "bad", np.dtype("<u4"), {"kind": "coded"}, pairs=True)
  with pytest.raises(ValueError, match=message):
    writer.write_documents(np.array(ids), np.array([len(ids)]), np.array(marks, np.uint8))


@pytest.mark.parametrize(
  ("column", "values", "message"),
  [
    ("prompt_length", lambda v: v + 100, "which its sides cannot hold"),  # planned negative: it once hung the stream
    ("chosen_length", lambda v: v * 0 + 1000, "which its sides cannot hold"),
    ("chosen_length", lambda v: v.astype(np.float32), r"holds float\d+ values; lengths are integers"),
  ],
)
def test_damaged_pair_columns_are_named_when_the_dataset_opens(pair_data, tmp_path, column, values, message):
  import shutil  # noqa: PLC0415

  copy = tmp_path / "p0"
  shutil.copytree(pair_data["root"] / "p0", copy)
  manifest = json.loads((copy / "manifest.json").read_text())
  path = copy / manifest["shards"][0]["columns"][column]
  np.save(path, values(np.load(path)))
  raw = pair_config(pair_data, "one_row", True).to_dict()
  raw["datasets"], raw["mixture"]["weights"] = [{"name": "p0", "path": str(copy)}], {"p0": 1}
  with pytest.raises(DatasetError, match=f"{path.name}.*: .*{message}"):
    Pipeline(PipelineConfig.from_dict(raw))


def test_pairs_that_fit_no_row_say_what_to_change(pair_data):
  raw = pair_config(pair_data, "one_row", False).to_dict()
  raw["packing"]["seq_len"] = 3
  with pytest.raises(ConfigError, match="A pair is never cut: raise packing.seq_len"):
    next(Pipeline(PipelineConfig.from_dict(raw), prefetch=0))


def test_reference_logprobs_checks_its_arguments_and_the_values_it_stores(pair_data, referenced, tmp_path):
  import shutil  # noqa: PLC0415

  from jaxdata import reference_logprobs  # noqa: PLC0415

  copy = str(tmp_path / "p1")
  shutil.copytree(pair_data["root"] / "p1", copy)
  for kwargs, message in (
    ({"rows": 0}, "rows: an int >= 1"),
    ({"fn": lambda b: np.zeros(b["tokens"].shape[1])}, r"returned shape \(64,\)"),
    ({"fn": lambda b: np.full(b["tokens"].shape, np.nan)}, "returned nan or a positive value"),
    ({"fn": lambda b: None}, r"returned shape \(\)"),
  ):
    arguments = {"fn": toy_logprobs, "rows": 2, **kwargs}
    with pytest.raises(ConfigError, match=message):
      reference_logprobs(copy, arguments["fn"], "m", seq_len=64, rows=arguments["rows"])
  # values changed after they were written are refused: the manifest's sha256 guards them
  damaged = str(tmp_path / "referenced")
  shutil.copytree(referenced, damaged)
  manifest = json.loads(open(os.path.join(damaged, "manifest.json")).read())
  path = os.path.join(damaged, manifest["shards"][0]["columns"]["ref_chosen_logp"])
  np.save(path, np.load(path) + 1)
  raw = pair_config(pair_data, "one_row", False).to_dict()
  raw["datasets"], raw["mixture"]["weights"] = [{"name": "p0", "path": damaged}], {"p0": 1}
  raw["packing"]["pairs"]["reference"] = "toy-ref-1"
  with pytest.raises(DatasetError, match="reference log-probability columns differ from the ones written"):
    Pipeline(PipelineConfig.from_dict(raw))


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_random_pairs_are_whole_or_counted_in_every_layout(tmp_path_factory, data):
  """Property: pairs of random lengths (some longer than any row) in a random layout, seq_len and mode come
  out whole, each once in a pass, or are dropped and counted; nothing else."""
  sizes = data.draw(
    st.lists(st.tuples(st.integers(1, 6), st.integers(1, 14), st.integers(1, 14)), min_size=3, max_size=25)
  )
  layout, shared = data.draw(st.sampled_from(LAYOUTS))
  seq_len, mode = data.draw(st.integers(6, 30)), data.draw(st.sampled_from(["first_fit", "best_fit", "none"]))
  pairs = []
  for r, (p, a, b) in enumerate(sizes):
    prompt = code(0, r, np.arange(p))
    chosen, rejected = np.r_[prompt, code(0, r, p + np.arange(a))], np.r_[prompt, code(0, r, 256 + np.arange(b))]
    marks = [np.r_[np.zeros(p, np.uint8), np.ones(n, np.uint8)] for n in (a, b)]
    pairs.append((chosen, marks[0], rejected, marks[1] | 2))
  root = tmp_path_factory.mktemp("random-pairs")
  write_pair_dataset(str(root / "p0"), 0, pairs, shard_bytes=200)
  cfg = PipelineConfig.from_dict(
    {
      "datasets": [{"name": "p0", "path": str(root / "p0")}],
      "mixture": {"weights": {"p0": 1}},
      "packing": {"mode": mode, "seq_len": seq_len, "pairs": {"layout": layout, "shared_prompt": shared}},
      "batch": {"global_batch_size": 2, "drop_remainder": False},
    }
  )
  fits = {r for r, pair in enumerate(pairs) if planned_columns(pair, layout, shared) <= seq_len}
  if not fits:
    with pytest.raises(ConfigError, match="A pair is never cut"):
      decoded_pass(cfg, {"records": {0: pairs}}, layout, shared)
    return
  seen, dropped = decoded_pass(cfg, {"records": {0: pairs}}, layout, shared)
  assert sorted(r for _, r in seen) == sorted(fits) and dropped == len(pairs) - len(fits)


@pytest.mark.parametrize(("layout", "shared"), LAYOUTS)
def test_padding_fraction_counts_every_slot_of_the_batch(pair_data, layout, shared):
  """With `parallel`, a step's padding counts both rows of each row (a pair is planned by its longer side,
  so the other side's row holds padding the plan does not see); `report` and `doctor` read this figure."""
  cfg = pair_config(pair_data, layout, shared)
  names = ("chosen", "rejected") if layout == "parallel" else ("",)
  with Pipeline(cfg, prefetch=0) as pipe:
    for _ in range(6):
      batch = {k: np.asarray(v) for k, v in next(pipe).items()}
      segments = [batch[f"{n}_segment_ids" if n else "segment_ids"] for n in names]
      empty = sum(int((s == 0).sum()) for s in segments) / sum(s.size for s in segments)
      assert pipe.stats()["padding_fraction"] == pytest.approx(empty, abs=1e-12)
