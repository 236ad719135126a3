"""Trained-token masks as data: stored with the ids, read in the same read, kept by every packer.

The property, checked position by position from the coded ids (pipeline_fixtures): in a batch,
loss_mask[r, j] = 1 exactly where targets[r, j] is the next token of the same document and that
token is trained (`coded_mask`); an appended EOS trains as its document's last token does; a
dataset without masks trains on every token, as before.
"""

from __future__ import annotations

import dataclasses
import json
import re
import warnings

import numpy as np
import pytest
from array_record.python.array_record_module import ArrayRecordReader, ArrayRecordWriter
from hypothesis import given, settings
from hypothesis import strategies as st

from checkpoint_property import assert_restores_exactly
from jaxdata import DatasetError, InputFormatError, Pipeline, from_iterable, open_dataset
from jaxdata.sources import DatasetWriter, Manifest
from jaxdata.sources import masked as masked_records
from jaxdata.sources.fileutil import file_sha256, sample_sha256
from pipeline_fixtures import FIRST_CODE, code, coded_config, coded_mask, decode, digest


def expected_loss_mask(batch: dict[str, np.ndarray], masked: tuple[int, ...], eos: bool) -> np.ndarray:
  """The loss mask the property defines, from the tokens alone."""
  tokens, targets, segments = batch["tokens"], batch["targets"], batch["segment_ids"]
  want = np.zeros(tokens.shape, np.int32)
  real = (segments > 0) & (tokens >= FIRST_CODE)
  d, r, k = decode(tokens[real])
  follows = targets[real] == code(d, r, k + 1)  # the next token of the same document is the target
  trained_next = np.where(np.isin(d, masked), coded_mask(d, r, k + 1), 1)
  value = follows & (trained_next == 1)
  if eos:  # the target is the appended EOS: it trains as the document's last token does
    to_eos = (targets[real] == 0) & ~follows
    value |= to_eos & (np.where(np.isin(d, masked), coded_mask(d, r, k), 1) == 1)
  want[real] = value
  return want


@settings(max_examples=30, deadline=None)
@given(
  lengths=st.lists(st.lists(st.integers(1, 30), min_size=1, max_size=25), min_size=1, max_size=3),
  mode=st.sampled_from(["first_fit", "best_fit", "concat", "none"]),
  eos=st.booleans(),
  cap=st.sampled_from([None, 2]),
  masked_first=st.booleans(),
)
def test_every_packer_keeps_the_trained_tokens_of_the_examples_in_each_row(
  tmp_path_factory, lengths, mode, eos, cap, masked_first
):
  tmp_path = tmp_path_factory.mktemp("masked")
  masked = tuple(i for i in range(len(lengths)) if i % 2 == 0 or not masked_first)
  cfg = coded_config(
    tmp_path,
    lengths,
    masked=masked,
    packing={"mode": mode, "add_eos": eos, "eos_id": 0, "max_segments_per_row": cap},
    batch={"global_batch_size": 4, "drop_remainder": False},
    exhausted_policy="stop",
    mixture={"weights": {f"d{i}": 1 for i in range(len(lengths))}, "unit": "documents"},
  )
  with Pipeline(cfg, prefetch=0) as pipe:
    batches = [{k: np.asarray(v) for k, v in b.items()} for b in pipe]
  assert batches
  for batch in batches:
    assert np.array_equal(batch["loss_mask"], expected_loss_mask(batch, masked, eos))


def test_masks_are_stored_read_and_hashed_with_the_ids(tmp_path):
  from_iterable([([5, 6, 7], [0, 1, 1]), ([8, 9], [1, 0]), [10, 11]], out=str(tmp_path / "a"), tokenizer=None)
  with open_dataset(str(tmp_path / "a")) as dataset:
    assert dataset.manifest.features == ("tokens", "mask") and dataset.manifest.format_version == 4
    assert dataset[0]["tokens"].tolist() == [5, 6, 7] and dataset[0]["mask"].tolist() == [0, 1, 1]
    assert [d["mask"].tolist() for d in dataset.__getitems__([2, 1])] == [[1, 1], [1, 0]]  # no mask: all trained
  manifest = json.load(open(tmp_path / "a" / "manifest.json"))
  assert manifest["features"] == ["tokens", "mask"]
  # the flag is part of the content fingerprint: a manifest edited to drop it is refused
  manifest["features"] = ["tokens"]
  (tmp_path / "a" / "manifest.json").write_text(json.dumps(manifest))
  with pytest.raises(DatasetError, match="fingerprint"):
    open_dataset(str(tmp_path / "a"))
  # a dataset without masks keeps format 3, which older jaxdata reads
  from_iterable([[1, 2, 3]], out=str(tmp_path / "b"), tokenizer=None)
  assert json.load(open(tmp_path / "b" / "manifest.json"))["format_version"] == 3


def test_bad_masks_are_named_and_write_nothing(tmp_path):
  writer = DatasetWriter(str(tmp_path / "w"), "w", np.dtype("<u2"), {"kind": "x"}, masks=True)
  for mask, message in (
    ([0, 1], r"mask: \(2,\) values for 3 tokens"),
    ([0, 2, 1], "every value is 0 or 1"),
    (None, "give one"),
  ):
    with pytest.raises(ValueError, match=message):
      writer.write_documents(np.array([1, 2, 3]), np.array([3]), None if mask is None else np.array(mask))
  with pytest.raises(ValueError, match="open it with masks=True"):
    DatasetWriter(str(tmp_path / "v"), "v", np.dtype("<u2"), {"kind": "x"}).write_documents(
      np.array([1]), np.array([1]), np.array([1])
    )
  for bad, message in ((([1, 2], [1]), "mask"), (([1, 2], [0, 3]), "0 or 1")):
    with pytest.raises(ValueError, match=message):
      from_iterable([bad], out=str(tmp_path / f"x{len(message)}"), tokenizer=None)


def test_a_masked_mixture_restores_exactly_at_every_step(tmp_path):
  cfg = coded_config(
    tmp_path,
    [[5, 9, 3, 7, 30] * 8, [11, 4, 6] * 10],
    masked=(0,),
    packing={"mode": "best_fit", "seq_len": 16, "max_segments_per_row": 3, "add_eos": True, "eos_id": 0},
    mixture={"weights": {"d0": 3, "d1": 1}, "unit": "documents"},
    exhausted_policy="repeat",
  )
  assert_restores_exactly(
    lambda: Pipeline(cfg, prefetch=0), lambda p, n: [digest(next(p)) for _ in range(n)], total=12, stops=range(12)
  )


def test_a_mask_byte_that_is_not_0_or_1_is_a_named_error(tmp_path):
  from_iterable([([5, 6], [1, 0])], out=str(tmp_path / "a"), tokenizer=None)
  shard = next((tmp_path / "a").glob("*.array_record"))
  reader = ArrayRecordReader(str(shard))
  record = bytearray(reader.read([0])[0])
  reader.close()
  record[-1] = 7  # the last mask byte
  writer = ArrayRecordWriter(str(shard), "group_size:1")
  writer.write(bytes(record))
  writer.close()
  manifest = Manifest.load(str(tmp_path / "a"))
  entry = dataclasses.replace(
    manifest.shards[0],
    num_bytes=shard.stat().st_size,
    sha256=file_sha256(str(shard)),
    sample_sha256=sample_sha256(str(shard)),
  )
  dataclasses.replace(manifest, shards=(entry,)).save(str(tmp_path / "a"))  # as if written so
  with open_dataset(str(tmp_path / "a")) as dataset, pytest.raises(DatasetError, match=r"record 0 holds a mask byte"):
    dataset[0]


def test_masks_reach_the_batch_the_same_in_every_mode(tmp_path):
  cfg = coded_config(tmp_path, [[5, 9, 3, 7] * 10, [11, 4, 6] * 10], masked=(0,), exhausted_policy="repeat")
  reference = [digest(next(p)) for p in [Pipeline(cfg, prefetch=0)] for _ in range(8)]
  with Pipeline(cfg, prefetch=2) as pipe:
    assert [digest(next(pipe)) for _ in range(8)] == reference


@pytest.mark.parametrize("mode", ["first_fit", "best_fit", "concat", "none"])
def test_long_docs_drop_leaves_out_examples_longer_than_a_row_and_counts_them(tmp_path, mode):
  lengths = [5, 40, 9, 17, 3, 16, 60, 7] * 4  # 17, 40 and 60 do not fit a row of 16 (with EOS: 16 neither)
  cfg = coded_config(
    tmp_path,
    [lengths],
    masked=(0,),
    packing={"mode": mode, "long_docs": "drop", "add_eos": True, "eos_id": 0},
    batch={"global_batch_size": 4, "drop_remainder": False},
    exhausted_policy="stop",
    stats_path=str(tmp_path / "stats.jsonl"),
  )
  with Pipeline(cfg, prefetch=0) as pipe, warnings.catch_warnings(record=True) as said:
    warnings.simplefilter("always")
    batches = [{k: np.asarray(v) for k, v in b.items()} for b in pipe]
  after_last = sum(
    int(re.search(r"left out (\d+) documents", str(w.message)).group(1)) for w in said if "left out" in str(w.message)
  )
  seen = set()
  for batch in batches:
    keep = (batch["segment_ids"] > 0) & (batch["tokens"] >= FIRST_CODE)
    d, r, _ = decode(batch["tokens"][keep])
    seen |= set(r.tolist())
    assert np.array_equal(batch["loss_mask"], expected_loss_mask(batch, (0,), True))
  kept = {i for i, n in enumerate(lengths) if n + 1 <= 16}
  assert seen == kept  # every example that fits, whole; none that does not
  stats = [json.loads(line) for line in open(tmp_path / "stats.jsonl")]
  # counted in the stats of the step that drew them, or said once the stream ends after its last step
  assert sum(s["dropped_documents"] for s in stats) + after_last == len(lengths) - len(kept)


def test_masked_records_split_the_same_in_c_and_numpy():
  assert masked_records._masked is not None, "jaxdata.sources._masked was not built (pip install -e . compiles it)"
  rng = np.random.default_rng(2)
  for dtype in (np.dtype("<u2"), np.dtype("<u4")):
    for _ in range(50):
      lengths = rng.integers(0, 40, int(rng.integers(0, 30)))
      ids = rng.integers(0, np.iinfo(dtype).max, int(lengths.sum()), dtype=np.int64).astype(dtype)
      mask = rng.integers(0, 2, ids.size).astype(np.uint8)
      joined = np.frombuffer(masked_records.records_with_masks(ids, lengths, mask), np.uint8)
      # one bytes object per record, as a read gives them (the C version copies without a join)
      ends = np.cumsum(lengths) * (dtype.itemsize + 1)
      records = tuple(joined[a:b].tobytes() for a, b in zip(np.r_[0, ends[:-1]], ends))
      for native in (True, False):
        for source in (joined, records, list(records)):
          got_ids, got_mask, bad = masked_records.split_masked(source, lengths, dtype, native=native)
          assert got_ids.tolist() == ids.tolist() and got_mask.tolist() == mask.tolist() and bad == -1
      if records:
        with pytest.raises(ValueError, match="record 0 is not bytes of lengths"):
          masked_records.split_masked((records[0] + b"x",) + records[1:], lengths, dtype, native=True)
        with pytest.raises(ValueError, match="one record per length"):
          masked_records.split_masked(records[1:], lengths, dtype, native=True)
      if ids.size:
        broken = joined.copy()
        k = int(rng.integers(0, ids.size))
        record = int(np.searchsorted(np.cumsum(lengths), k, side="right"))
        position = int(np.sum(lengths[:record]) * (dtype.itemsize + 1) + lengths[record] * dtype.itemsize)
        position += k - int(np.sum(lengths[:record]))
        broken[position] = 3
        assert [masked_records.split_masked(broken, lengths, dtype, native=n)[2] for n in (True, False)] == [k, k]


@pytest.mark.parametrize("mesh", [False, True])
def test_the_stats_count_trained_tokens_per_source(tmp_path, mesh):
  import jax  # noqa: PLC0415 -- the 8 emulated devices of conftest

  cfg = coded_config(
    tmp_path,
    [[5, 9, 3, 7] * 10, [11, 4, 6] * 10],
    masked=(0,),
    exhausted_policy="repeat",
    stats_path=str(tmp_path / "stats.jsonl"),
    batch={"global_batch_size": 8},
  )
  device_mesh = jax.make_mesh((8,), ("data",)) if mesh else None
  with Pipeline(cfg, mesh=device_mesh, prefetch=2) as pipe:
    batches = [{k: np.asarray(v) for k, v in next(pipe).items()} for _ in range(5)]
  stats = [json.loads(line) for line in open(tmp_path / "stats.jsonl")]
  for batch, record in zip(batches, stats):
    trained = batch["loss_mask"] == 1
    want = {name: int((trained & (batch["source_ids"] == d)).sum()) for d, name in enumerate(cfg.names)}
    assert record["trained_tokens_per_source"] == want and sum(want.values()) > 0


def test_the_report_speaks_of_trained_tokens(tmp_path, capsys):
  from jaxdata.cli import main  # noqa: PLC0415

  cfg = coded_config(
    tmp_path,
    [[5, 9, 3, 7] * 10, [11, 4, 6] * 10],
    masked=(0,),
    exhausted_policy="repeat",
    stats_path=str(tmp_path / "stats.jsonl"),
  )
  with Pipeline(cfg, prefetch=0) as pipe:
    batches = [{k: np.asarray(v) for k, v in next(pipe).items()} for _ in range(6)]
  capsys.readouterr()
  assert main(["report", str(tmp_path / "stats.jsonl"), "--out", str(tmp_path / "report")]) == 0
  said = " ".join(capsys.readouterr().out.split())
  want = [int(sum(((b["loss_mask"] == 1) & (b["source_ids"] == d)).sum() for b in batches)) for d in range(2)]
  assert f"trained tokens (loss_mask 1, this host's rows): d0 {want[0]:,}, d1 {want[1]:,}" in said


def test_doctor_speaks_of_trained_tokens_and_flags_a_set_that_trains_nothing(tmp_path):
  from jaxdata.tools.doctor import diagnose  # noqa: PLC0415
  from jaxdata.tools.report import load_stats  # noqa: PLC0415

  cfg = coded_config(
    tmp_path,
    [[5, 9, 3, 7] * 10, [11, 4, 6] * 10],
    masked=(0,),
    exhausted_policy="repeat",
    stats_path=str(tmp_path / "stats.jsonl"),
  )
  with Pipeline(cfg, prefetch=0) as pipe:
    for _ in range(6):
      next(pipe)
  stats = load_stats(str(tmp_path / "stats.jsonl"))
  checks = {c.name: c for c in diagnose(stats)}
  trained = sum(s.trained_tokens_per_source["d0"] for s in stats)
  assert f"{trained:,} trained tokens" in checks["passes d0"].figure and "trained d0" not in checks
  for s in stats:  # as if d1's masks trained nothing
    s.trained_tokens_per_source["d1"] = 0
  checks = {c.name: c for c in diagnose(stats)}
  assert checks["trained d1"].status == "warn" and "trains nothing" in checks["trained d1"].meaning


def test_a_mask_given_with_a_text_is_refused_by_name(tmp_path):
  with pytest.raises(InputFormatError, match=r"item 1: a mask goes with token ids, not with a text"):
    from_iterable([([5, 6], [1, 0]), ("hello", [1, 1, 1, 1, 1])], out=str(tmp_path / "a"), tokenizer="byte")
  with pytest.raises(InputFormatError, match=r"item 0: token ids must be a flat sequence of ints, got dtype object"):
    from_iterable([[1, [2, 3]]], out=str(tmp_path / "b"), tokenizer="byte")  # ragged: not a numpy error
