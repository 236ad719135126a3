"""Packing and global batches: exact placement, efficiency, mesh layouts, end of stream."""

from __future__ import annotations

import json

import jax
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jax.sharding import Mesh

from checkpoint_property import assert_restores_exactly
from jaxdata import ConfigError, DatasetError, Pipeline, PipelineConfig
from jaxdata.mixture import DatasetMeta, DocumentStream
from jaxdata.pipeline import pieces_for_hosts
from jaxdata.pipeline import sharding as sharding_module
from jaxdata.pipeline.execution import StepMaking
from jaxdata.pipeline.planner import StepPlanner, host_row_blocks
from jaxdata.pipeline.sharding import batch_sharding, global_arrays, host_rows
from jaxdata.testing import prefetched_steps, recorded_reads, wait_for_processes
from jaxdata.transforms import kernels
from jaxdata.transforms.balance import balanced_rows
from jaxdata.transforms.fit import first_fit
from jaxdata.transforms.pieces import Pieces
from pipeline_fixtures import FEATURES, FIRST_CODE, code, coded_config, decode, digest


def all_batches(pipe: Pipeline) -> list[dict[str, np.ndarray]]:
  return [{k: np.asarray(v) for k, v in b.items()} for b in pipe]


def check_batch_invariants(batch: dict[str, np.ndarray], cfg: PipelineConfig) -> None:
  """The feature meanings of docs/order.md, checked position by position from the token codes."""
  packing = cfg.packing
  tokens, targets, seg, pos, mask, src = (batch[k] for k in FEATURES)
  pad = seg == 0
  assert (src[pad] == -1).all() and (mask[pad] == 0).all() and (pos[pad] == 0).all()
  for row in range(tokens.shape[0]):
    ids = seg[row][seg[row] > 0]
    # Segments are 1..k, each one contiguous, in column order; padding only at the end.
    if ids.size:
      assert ids.tolist() == sorted(ids.tolist()) and ids[0] == 1
      assert set(np.diff(ids).tolist()) <= {0, 1}
      assert (seg[row][: ids.size] > 0).all()
    for s in np.unique(ids):
      cols = np.flatnonzero(seg[row] == s)
      assert pos[row, cols].tolist() == list(range(cols.size))  # positions restart per segment
      assert np.unique(src[row, cols]).size == 1
  real = (~pad) & (tokens >= FIRST_CODE)  # document tokens (BOS / EOS ids are small)
  d, r, k = decode(tokens[real])
  assert (d == src[real]).all()
  # Targets: the next token of the same document; loss 1 exactly where it exists.
  has_next = mask[real] == 1
  expected = code(d, r, k + 1)
  ok = targets[real] == expected
  if packing.add_eos:
    ok |= targets[real] == packing.eos
  assert ok[has_next].all()
  assert (targets[~pad][mask[~pad] == 0] == packing.fill_id).all()


def covered(batches: list[dict[str, np.ndarray]]) -> dict[tuple[int, int], list[int]]:
  """(dataset, record) -> sorted token offsets seen (pass 0 only: one pass configured)."""
  seen: dict[tuple[int, int], list[int]] = {}
  for b in batches:
    keep = (b["segment_ids"] > 0) & (b["tokens"] >= FIRST_CODE)
    for d, r, k in zip(*decode(b["tokens"][keep])):
      seen.setdefault((int(d), int(r)), []).append(int(k))
  return {key: sorted(v) for key, v in seen.items()}


def _packed_once(tmp_path, lengths: list[list[int]], **packing):
  """(config, every batch, the stream's documents) of coded datasets read once each (exhausted_policy
  stop, equal document weights), packed 4 x 16 with `packing`; the last batch padded, not dropped."""
  cfg = coded_config(
    tmp_path,
    lengths,
    packing=packing,
    batch={"global_batch_size": 4, "drop_remainder": False},
    exhausted_policy="stop",
    mixture={"weights": {f"d{i}": 1 for i in range(len(lengths))}, "unit": "documents"},
  )
  with Pipeline(cfg, prefetch=0) as pipe:
    batches = all_batches(pipe)
  return cfg, batches, DocumentStream.open(cfg).take(0, max_docs=10_000)


doc_lengths = st.lists(st.integers(1, 40), min_size=1, max_size=25)


@settings(max_examples=25)
@given(
  lengths=st.lists(doc_lengths, min_size=1, max_size=3),
  mode=st.sampled_from(["first_fit", "best_fit", "concat"]),
  bos=st.booleans(),
  eos=st.booleans(),
)
def test_every_token_of_every_document_appears_exactly_once(tmp_path_factory, lengths, mode, bos, eos):
  cfg, batches, stream_docs = _packed_once(
    tmp_path_factory.mktemp("coded"), lengths, mode=mode, add_bos=bos, add_eos=eos
  )
  for b in batches:
    check_batch_invariants(b, cfg)
    assert b["tokens"].shape == (4, 16)
  seen = covered(batches)
  expected = {
    (int(d), int(r)): list(range(n))
    for d, r, n in zip(stream_docs.dataset, stream_docs.record, stream_docs.length)
    if n
  }
  assert seen == expected  # with "stop", the stream's documents are exactly those packed


def test_long_documents_split_or_truncate_never_raise(tmp_path):
  cfg = coded_config(
    tmp_path,
    [[50, 3, 70, 16, 17]],
    packing={"long_docs": "truncate"},
    batch={"global_batch_size": 4, "drop_remainder": False},
  )
  stats_path = tmp_path / "stats.jsonl"
  with Pipeline(cfg, prefetch=0, stats_path=str(stats_path)) as pipe:
    batches = all_batches(pipe)
  seen = covered(batches)
  assert seen[(0, 0)] == list(range(16)) and seen[(0, 2)] == list(range(16))  # cut to seq_len
  assert seen[(0, 4)] == list(range(16)) and seen[(0, 1)] == [0, 1, 2]
  lines = [json.loads(line) for line in stats_path.read_text().splitlines()]
  assert sum(line["truncated_tokens"] for line in lines) == (50 - 16) + (70 - 16) + (17 - 16)
  split_cfg = coded_config(
    tmp_path / "s", [[50, 3, 70, 16, 17]], batch={"global_batch_size": 4, "drop_remainder": False}
  )
  with Pipeline(split_cfg, prefetch=0) as pipe:
    seen = covered(all_batches(pipe))
  assert seen[(0, 2)] == list(range(70)) and seen[(0, 0)] == list(range(50))


def test_none_mode_is_one_document_per_row(tmp_path):
  cfg = coded_config(
    tmp_path, [[5, 20, 7, 9, 1]], packing={"mode": "none"}, batch={"global_batch_size": 4, "drop_remainder": False}
  )
  with Pipeline(cfg, prefetch=0) as pipe:
    batches = all_batches(pipe)
  for b in batches:
    assert (b["segment_ids"].max(axis=1) <= 1).all()
  lengths_seen = sorted(
    int((b["segment_ids"][r] > 0).sum()) for b in batches for r in range(4) if b["segment_ids"][r].any()
  )
  assert lengths_seen == [1, 5, 7, 9, 16]


# ---------------------------------------------------------------- efficiency


def lognormal_stream_cfg(mode: str, rows: int) -> tuple[PipelineConfig, dict[str, DatasetMeta]]:
  rng = np.random.default_rng(0)
  means = {"web": 600, "code": 1500, "books": 8400, "curated": 400}
  metas = {
    n: DatasetMeta.from_lengths(np.clip(rng.lognormal(np.log(m) - 0.5, 1.0, 4000), 1, 65536).astype(int))
    for n, m in means.items()
  }
  cfg = PipelineConfig.from_dict(
    {
      "datasets": [{"name": n} for n in means],
      "mixture": {"weights": {"web": 0.62, "code": 0.18, "books": 0.12, "curated": 0.08}},
      "exhausted_policy": "repeat",
      "packing": {"mode": mode, "seq_len": 2048},
      "batch": {"global_batch_size": rows},
    }
  )
  return cfg, metas


@pytest.mark.parametrize("mode", ["first_fit", "best_fit"])
@pytest.mark.parametrize("rows", [32, 128])
def test_fit_modes_reach_the_efficiency_goal_and_bound_the_carry(mode, rows):
  cfg, metas = lognormal_stream_cfg(mode, rows)
  planner = StepPlanner(cfg, metas)
  capacity = rows * 2048
  fractions = []
  for _ in range(60):
    plan = planner.plan()
    fractions.append(1 - plan.padding_fraction)
    # The carry is bounded: under one step's capacity plus one row.
    assert int(planner.packer.carry.length.sum()) < capacity + 2048
    # Rows are never over-full.
    fill = np.bincount(plan.row, weights=plan.pieces.length, minlength=rows)
    assert fill.max() <= 2048
    # Stream + packer state stay small whatever the carry (the pipeline adds ~1 KB of fingerprint).
    assert len(json.dumps(planner.get_state())) < 3000
  assert np.mean(fractions) >= 0.985


def test_concat_mode_has_no_padding():
  cfg, metas = lognormal_stream_cfg("concat", 32)
  for plan in StepPlanner(cfg, metas).plans(20):
    assert plan.padding_fraction == 0.0


def test_sequence_length_warmup_keeps_tokens_per_step(tmp_path):
  cfg = coded_config(
    tmp_path,
    [[30] * 40, [12] * 60],
    exhausted_policy="repeat",
    packing={"seq_len": 16, "warmup": [{"until_step": 2, "seq_len": 4}, {"until_step": 3, "seq_len": 8}]},
    batch={"global_batch_size": 2},
  )
  with Pipeline(cfg, prefetch=0) as pipe:
    shapes = [next(pipe)["tokens"].shape for _ in range(5)]
  assert shapes == [(8, 4), (8, 4), (4, 8), (2, 16), (2, 16)]


# ------------------------------------------------------- determinism, state


@pytest.fixture(scope="module")
def mixed_cfg(tmp_path_factory) -> PipelineConfig:
  rng = np.random.default_rng(3)
  tmp = tmp_path_factory.mktemp("mixed")
  lengths = [rng.integers(1, 60, 120).tolist(), rng.integers(1, 200, 50).tolist(), rng.integers(1, 9, 300).tolist()]
  return coded_config(
    tmp,
    lengths,
    exhausted_policy="repeat",
    shuffle_block_size="global",
    mixture={"weights": {"d0": 5, "d1": 3, "d2": 1}},
    packing={"seq_len": 32, "add_eos": True, "eos_id": 3},
    batch={"global_batch_size": 8},
  )


@pytest.mark.parametrize(
  "options",
  [
    dict(prefetch=0, read_threads=1, read_ahead_tokens=1),
    dict(prefetch=1, read_threads=4, read_ahead_tokens=600),
    dict(prefetch=8, read_threads=1, read_ahead_tokens=10_000),
  ],
)
def test_same_batches_for_any_threads_prefetch_and_read_ahead(mixed_cfg, options):
  with Pipeline(mixed_cfg, prefetch=0, read_ahead_tokens=1) as reference:
    expected = [digest(next(reference)) for _ in range(12)]
  with Pipeline(mixed_cfg, **options) as pipe:
    assert [digest(next(pipe)) for _ in range(12)] == expected
    batch = next(pipe)
  check_batch_invariants({k: np.asarray(v) for k, v in batch.items()}, mixed_cfg)


@pytest.mark.slow
def test_pipeline_state_restores_the_remaining_batches_and_statistics(mixed_cfg):
  # Statistics are part of the property: after a restore, every step's stats
  # (cumulative shares included) equal the uninterrupted run's. (0.1: the
  # state's tokens_per_source missed the last step handed out.)
  def make():
    return Pipeline(mixed_cfg, prefetch=2, read_ahead_tokens=700)

  def advance(pipe, n):
    out = []
    for _ in range(n):
      batch = digest(next(pipe))
      stats = {k: v for k, v in pipe.stats().items() if k not in ("time_s", "time_total_s")}
      out.append((batch, json.dumps(stats, sort_keys=True)))
    return out

  assert_restores_exactly(make, advance, total=10, stops=[0, 1, 4, 9])


def test_stats_describe_the_last_batch(mixed_cfg, tmp_path):
  path = tmp_path / "stats.jsonl"
  with Pipeline(mixed_cfg, prefetch=1, stats_path=str(path)) as pipe:
    batch = next(pipe)
    batch = next(pipe)
    stats = pipe.stats()
  real = np.asarray(batch["segment_ids"]) > 0
  assert sum(stats["tokens_per_source"].values()) == real.sum()
  assert stats["padding_fraction"] == pytest.approx(1 - real.mean())
  assert stats["step"] == 1 and set(stats["target_share"]) == {"d0", "d1", "d2"}
  assert sum(stats["share_cumulative"].values()) == pytest.approx(1.0)
  assert set(stats["time_s"]) == {"plan", "read", "assemble", "wait"}
  assert len(path.read_text().splitlines()) == 2


def test_end_of_stream_drops_or_pads_the_final_partial_batch(tmp_path):
  lengths = [[16] * 9]  # 9 full rows: two full steps of 4 rows, then 1 row left
  dropped = coded_config(tmp_path / "a", lengths, batch={"global_batch_size": 4, "drop_remainder": True})
  with Pipeline(dropped, prefetch=0) as pipe:
    assert len(all_batches(pipe)) == 2
  padded = coded_config(tmp_path / "b", lengths, batch={"global_batch_size": 4, "drop_remainder": False})
  with Pipeline(padded, prefetch=2) as pipe:
    batches = all_batches(pipe)
    assert pipe.stats()["final"]
  assert len(batches) == 3
  last = batches[-1]
  assert (last["segment_ids"][1:] == 0).all() and (last["loss_mask"][1:] == 0).all()
  assert last["segment_ids"][0].all()


# ---------------------------------------------------------------- meshes


@pytest.mark.parametrize(
  "layout",
  [
    ((8,), ("data",), ("data",)),
    ((4, 2), ("data", "model"), ("data",)),
    ((2, 2, 2), ("data", "fsdp", "model"), ("data", "fsdp")),
  ],
)
def test_global_array_on_an_emulated_mesh_equals_the_numpy_batch(mixed_cfg, layout):
  shape, names, data_axes = layout
  mesh = Mesh(np.array(jax.devices()[:8]).reshape(shape), names)
  with Pipeline(mixed_cfg, prefetch=0) as reference, Pipeline(mixed_cfg, mesh=mesh, data_axes=data_axes) as pipe:
    for _ in range(3):
      expected, got = next(reference), next(pipe)
      for key in FEATURES:
        assert got[key].shape == expected[key].shape
        assert np.array_equal(np.asarray(got[key]), expected[key])
      # Replicas along the model axis hold identical rows.
      by_rows: dict = {}
      for shard in got["tokens"].addressable_shards:
        by_rows.setdefault(shard.index[0].indices(8), []).append(np.asarray(shard.data))
      for copies in by_rows.values():
        assert all(np.array_equal(c, copies[0]) for c in copies)
      assert len(by_rows) == int(np.prod([mesh.shape[a] for a in data_axes]))


@pytest.mark.slow
@pytest.mark.parametrize(
  "arguments",
  [
    {"prefetch": 0, "making": "here"},
    {"prefetch": 2},
    {"prefetch": 1, "making": StepMaking("process", reader_processes=1)},
  ],
)
def test_on_cpu_devices_the_global_arrays_use_the_assembled_rows_in_place(mixed_cfg, arguments):
  # Rows are assembled into one 64-byte-aligned block per step, which XLA's CPU
  # client uses in place: no copy per step. Each feature's first shard starts
  # one feature's size after the previous one's (separate copies would not).
  mesh = Mesh(np.array(jax.devices()[:8]).reshape(4, 2), ("data", "model"))
  with Pipeline(mixed_cfg, prefetch=0) as reference, Pipeline(mixed_cfg, mesh=mesh, **arguments) as pipe:
    if isinstance(arguments.get("making"), StepMaking):
      wait_for_processes(pipe)  # steps copied out of a reader's slot, into aligned memory
    for _ in range(3):
      batch, expected = next(pipe), next(reference)
      pointers = [batch[key].addressable_shards[0].data.unsafe_buffer_pointer() for key in FEATURES]
      assert pointers[0] % 64 == 0
      assert np.diff(pointers).tolist() == [expected["tokens"].nbytes] * (len(FEATURES) - 1)
      assert all(np.array_equal(np.asarray(batch[key]), expected[key]) for key in FEATURES)


@pytest.mark.parametrize(
  "layout",
  [
    ((8,), ("data",), ("data",)),
    ((4, 2), ("data", "model"), ("data",)),
    ((2, 2, 2), ("data", "fsdp", "model"), ("data", "fsdp")),
  ],
)
def test_the_batched_transfer_and_the_public_callback_make_the_same_arrays(monkeypatch, layout):
  # global_arrays hands each device's block to jax's batched transfer; where that
  # private function is missing it falls back to make_array_from_callback.
  shape, names, data_axes = layout
  sharding = batch_sharding(Mesh(np.array(jax.devices()[:8]).reshape(shape), names), data_axes)
  rows = host_rows(sharding, (16, 24))
  arrays = {"tokens": np.arange(16 * 24, dtype=np.int32).reshape(16, 24)[rows], "other": np.ones((16, 24), np.int32)}
  assert sharding_module._batched_put() is not None  # this jax has it: the first call took the batched path
  batched = global_arrays(arrays, sharding, (16, 24), rows)
  monkeypatch.setattr(sharding_module, "_batched_put", lambda: None)
  public = global_arrays(arrays, sharding, (16, 24), rows)
  for name in arrays:
    assert batched[name].sharding == public[name].sharding == sharding
    assert np.array_equal(np.asarray(batched[name]), np.asarray(public[name]))
    assert [(s.device, s.index) for s in batched[name].addressable_shards] == [
      (s.device, s.index) for s in public[name].addressable_shards
    ]
    for shard in batched[name].addressable_shards:
      assert np.array_equal(np.asarray(shard.data), np.asarray(public[name])[shard.index])


def test_rows_that_are_not_this_process_s_are_named(monkeypatch):
  sharding = batch_sharding(Mesh(np.array(jax.devices()[:8]), ("data",)), ("data",))
  half = np.arange(8)  # rows 8..15 belong to devices of this process too
  with pytest.raises(ValueError, match=r"sharding: device .* holds rows 8:10 of \(16, 4\), not a \(2, 4\) block"):
    global_arrays({"tokens": np.zeros((8, 4), np.int32)}, sharding, (16, 4), half)


def test_prefetched_steps_are_already_global_arrays(mixed_cfg):
  # Made on the prefetch thread: in the caller's thread the two threads trade
  # the GIL for every transfer (mesh output was 25-40% slower in the benchmark).
  mesh = Mesh(np.array(jax.devices()[:8]), ("data",))
  with Pipeline(mixed_cfg, mesh=mesh, prefetch=2) as pipe:
    next(pipe)
    ahead = prefetched_steps(pipe, 2)
    assert len(ahead) == 2
    for batch, stats in ahead:
      assert all(isinstance(batch[key], jax.Array) for key in FEATURES)
      assert "output" in stats["time_s"]


def test_batch_must_divide_over_the_data_shards(mixed_cfg):
  mesh = Mesh(np.array(jax.devices()[:6]), ("data",))
  with pytest.raises(
    ValueError, match=r"batch.global_batch_size: 8 rows .* do not divide over the 6 data-parallel shards"
  ):
    Pipeline(mixed_cfg, mesh=mesh)


def test_pieces_for_hosts_partition_each_step(mixed_cfg):
  with Pipeline(mixed_cfg, prefetch=0) as pipe:
    batches = [next(pipe) for _ in range(3)]
  for hosts in (1, 2, 4):
    parts = pieces_for_hosts(mixed_cfg, 2, hosts)
    assert len(parts) == hosts
    assert sum(int(p.length.sum()) for p in parts) == int((batches[2]["segment_ids"] > 0).sum())
  two = pieces_for_hosts(mixed_cfg, 2, 2)
  rows0 = set(zip(two[0].dataset.tolist(), two[0].record.tolist(), two[0].offset.tolist()))
  rows1 = set(zip(two[1].dataset.tolist(), two[1].record.tolist(), two[1].offset.tolist()))
  assert not rows0 & rows1


def test_a_shard_corrupted_mid_run_raises_a_named_error_from_the_prefetcher(tmp_path):
  cfg = coded_config(tmp_path, [[20] * 200], exhausted_policy="repeat", shuffle_block_size="global")
  with Pipeline(cfg, prefetch=2, read_ahead_tokens=64) as pipe:
    next(pipe)
    for shard in sorted((tmp_path / "d0").glob("*.array_record")):
      size = shard.stat().st_size
      with open(shard, "r+b") as f:  # same file, same size, garbage inside
        f.write(np.random.default_rng(0).bytes(size))
    with pytest.raises(DatasetError, match=r"d0-\d+\.array_record: read failed"):
      for _ in range(50):
        next(pipe)


def test_bad_pipeline_arguments_and_packer_states_are_named(mixed_cfg):
  mesh = Mesh(np.array(jax.devices()[:8]), ("data",))
  with pytest.raises(ValueError, match="tpu: give a slice name or a mesh, not both"):
    Pipeline(mixed_cfg, mesh=mesh, tpu="cpu-8")
  with pytest.raises(ValueError, match="prefetch: must be an int >= 0, got -1"):
    Pipeline(mixed_cfg, prefetch=-1)
  with pytest.raises(ValueError, match="read_ahead_tokens: must be an int >= 1, got 0"):
    Pipeline(mixed_cfg, read_ahead_tokens=0)
  with pytest.raises(ValueError, match="data_axes: 'rows' is not an axis of the mesh"):
    Pipeline(mixed_cfg, mesh=mesh, data_axes=("rows",))
  stream = DocumentStream.open(mixed_cfg)
  with pytest.raises(ValueError, match="take: give max_docs or max_tokens"):
    stream.take(0)
  with pytest.raises(ValueError, match="take: max_tokens must be an int >= 1, got 0"):
    stream.take(0, max_tokens=0)
  planner = StepPlanner(mixed_cfg)
  good = planner.get_state()
  far = Pieces(*(np.array([v]) for v in (0, 0, 10_000, 0, 5, 5))).to_json()
  with pytest.raises(ValueError, match="packer state: the carry names record 10000 of d0, which has 120"):
    planner.packer.set_state({**good["packer"], "carry": far})
  past_end = Pieces(*(np.array([v]) for v in (0, 0, 3, 500, 5, 5))).to_json()
  with pytest.raises(ValueError, match="packer state: a carried piece lies past the end of its document"):
    planner.packer.set_state({**good["packer"], "carry": past_end})
  with pytest.raises(ValueError, match="step must be an int >= 0"):
    planner.set_state({**good, "step": -2})
  assert planner.get_state() == good  # a refused state changes nothing


def _plan_all(lengths: list[int], mode: str, rows: int, seq_len: int, bos: bool, eos: bool):
  cfg = PipelineConfig.from_dict(
    {
      "datasets": [{"name": "d"}],
      "mixture": {"weights": {"d": 1}},
      "shuffle_shards": False,
      "packing": {"mode": mode, "seq_len": seq_len, "add_bos": bos, "add_eos": eos},
      "batch": {"global_batch_size": rows, "drop_remainder": False},
    }
  )
  planner = StepPlanner(cfg, {"d": DatasetMeta.from_lengths(lengths)})
  longest = max(lengths) + int(bos) + int(eos)
  capacity = rows * seq_len
  placed = []
  for plan in planner.plans():
    # The documented carry bound: below one step's capacity plus the longest document.
    assert int(planner.packer.carry.length.sum()) < capacity + longest
    placed.append(np.stack([np.full(len(plan.pieces), plan.step), plan.pieces.record, plan.pieces.offset], 1))
  return np.concatenate(placed)


def _assert_pieces_in_order(placed: np.ndarray) -> None:
  """Per document, offsets never decrease from one step to the next."""
  by_document = placed[np.lexsort((placed[:, 2], placed[:, 0], placed[:, 1]))]
  same = by_document[1:, 1] == by_document[:-1, 1]
  assert (by_document[1:, 2][same] > by_document[:-1, 2][same]).all()


def test_the_audits_carry_reproducer_stays_in_bound_and_in_order():
  # 0.1: the carry reached 92 tokens against a stated 48, and pieces came out of order.
  lengths = [12, 12, 100, 5, 5] + [7, 3, 40, 16, 1] * 6
  for mode in ("first_fit", "best_fit", "concat"):
    _assert_pieces_in_order(_plan_all(lengths, mode, rows=2, seq_len=16, bos=False, eos=True))


@settings(max_examples=60)
@given(
  lengths=st.lists(st.one_of(st.integers(1, 40), st.integers(40, 600)), min_size=1, max_size=80),
  mode=st.sampled_from(["first_fit", "best_fit", "concat"]),
  rows=st.integers(1, 5),
  seq_len=st.integers(2, 48),
  bos=st.booleans(),
  eos=st.booleans(),
)
def test_carry_bound_and_piece_order_hold_on_adversarial_lengths(lengths, mode, rows, seq_len, bos, eos):
  _assert_pieces_in_order(_plan_all(lengths, mode, rows, seq_len, bos, eos))


def test_the_first_read_covers_one_step_then_the_read_span_grows(mixed_cfg):
  # A fast first batch (and restore): step 0's documents are read alone; later
  # reads cover more steps, up to read_ahead_tokens. Output never depends on it.
  with recorded_reads() as log, Pipeline(mixed_cfg, prefetch=0, read_ahead_tokens=4096) as pipe:
    for _ in range(12):
      next(pipe)
    state = pipe.get_state()
  spans = sorted({steps for steps, _, _ in log}, key=lambda r: r.start)
  assert spans[0] == range(0, 1)
  assert [len(s) for s in spans[:4]] == sorted(len(s) for s in spans[:4]) and len(spans[3]) > 1
  with recorded_reads() as log, Pipeline(mixed_cfg, prefetch=0, read_ahead_tokens=4096) as pipe:
    pipe.set_state(state)
    next(pipe)
  assert log[0][0] == range(12, 13)


@pytest.mark.parametrize("mode", ["first_fit", "best_fit"])
def test_hosts_read_similar_numbers_of_documents(mode):
  # 0.1: first_fit put the largest pieces in the lowest rows and hosts take
  # contiguous row blocks: host 15 of 16 read 45x host 1. Rows are now placed
  # so every host's block mixes full and many-document rows.
  rng = np.random.default_rng(2)
  metas = {
    n: DatasetMeta.from_lengths(np.clip(rng.lognormal(np.log(m), 1.2, 30000), 1, 20000).astype(int))
    for n, m in (("web", 300), ("code", 900), ("books", 6000))
  }
  cfg = PipelineConfig.from_dict(
    {
      "datasets": [{"name": n} for n in metas],
      "mixture": {"weights": {"web": 0.6, "code": 0.25, "books": 0.15}},
      "exhausted_policy": "repeat",
      "packing": {"mode": mode, "seq_len": 1024},
      "batch": {"global_batch_size": 1024},
    }
  )
  for hosts in (4, 16):  # 256 and 64 rows per host, as on a v5p-128 with a global batch of 1024
    documents = np.zeros(hosts)
    for plan in StepPlanner(cfg, metas).plans(3):
      for host, rows in enumerate(host_row_blocks(plan.rows, hosts)):
        mine = plan.pieces.take(plan.in_rows(rows))
        documents[host] += len(set(zip(mine.dataset.tolist(), mine.record.tolist())))
    assert documents.max() / documents.mean() <= 1.25, (hosts, documents.max() / documents.mean())


def _balanced_reference(counts: list[int]) -> list[int]:
  """balanced_rows from its docstring, recursively: rows by count (most first,
  stable), halves by the pattern A B B A A B B A ..., first half first."""

  def place(rows: list[int], start: int, out: dict[int, int]) -> None:
    if len(rows) == 1:
      out[rows[0]] = start
      return
    first = [r for i, r in enumerate(rows) if i % 4 in (0, 3)]
    second = [r for i, r in enumerate(rows) if i % 4 in (1, 2)]
    place(first, start, out)
    place(second, start + len(first), out)

  ranked = sorted(range(len(counts)), key=lambda r: (-counts[r], r))
  out: dict[int, int] = {}
  place(ranked, 0, out)
  return [out[r] for r in range(len(counts))]


@given(st.lists(st.integers(0, 60), min_size=1, max_size=300))
def test_balanced_rows_follows_its_recursive_definition(counts):
  assert balanced_rows(np.array(counts)).tolist() == _balanced_reference(counts)


@settings(max_examples=30)
@given(
  lengths=st.lists(st.lists(st.integers(1, 24), min_size=1, max_size=30), min_size=1, max_size=3),
  mode=st.sampled_from(["first_fit", "best_fit", "concat", "none"]),
  cap=st.integers(1, 4),
  eos=st.booleans(),
)
def test_a_segment_cap_holds_in_every_packer_and_loses_no_token(tmp_path_factory, lengths, mode, cap, eos):
  """packing.max_segments_per_row: no row holds more than `cap` segments; every token still comes out once."""
  cfg, batches, stream_docs = _packed_once(
    tmp_path_factory.mktemp("capped"), lengths, mode=mode, add_eos=eos, max_segments_per_row=cap
  )
  for b in batches:
    check_batch_invariants(b, cfg)
    assert int(b["segment_ids"].max(initial=0)) <= cap
  if mode == "none":  # one truncated document a row
    want = {(int(d), int(r)): list(range(min(n, 16))) for d, r, n in zip(*_columns(stream_docs))}
  else:
    want = {(int(d), int(r)): list(range(n)) for d, r, n in zip(*_columns(stream_docs))}
  assert covered(batches) == want


def _columns(docs):
  return docs.dataset, docs.record, docs.length


def test_the_segment_cap_is_part_of_the_order_and_c_equals_python():
  rng = np.random.default_rng(3)
  for _ in range(200):
    rows, seq_len, cap = int(rng.integers(1, 20)), int(rng.integers(2, 100)), int(rng.integers(0, 5))
    lengths = rng.integers(0, seq_len + 3, int(rng.integers(0, 120)))
    documents = np.where(rng.random(lengths.size) < 0.3, rng.integers(0, 10, lengths.size), -1)
    want = first_fit(lengths.tolist(), rows, seq_len, documents.tolist(), cap)
    assert kernels.first_fit_rows(lengths, documents, rows, seq_len, cap, native=True).tolist() == want
    placed = np.asarray(want, dtype=np.int64)
    if cap:
      assert np.bincount(placed[placed >= 0], minlength=rows).max(initial=0) <= cap
  base = {"datasets": [{"name": "a", "path": "/x"}], "mixture": {"weights": {"a": 1}}}
  capped = PipelineConfig.from_dict({**base, "packing": {"max_segments_per_row": 2}})
  assert capped.packing.max_segments_per_row == 2
  for bad in (0, -1, 1.5, "2", True):
    with pytest.raises(ConfigError, match="packing.max_segments_per_row"):
      PipelineConfig.from_dict({**base, "packing": {"max_segments_per_row": bad}})
