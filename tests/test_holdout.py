"""Held-out documents: never in training batches over full passes, each served once by split="eval"."""

from __future__ import annotations

import numpy as np
import pytest

from jaxdata import ConfigError, Pipeline, PipelineConfig
from jaxdata.mixture.holdout import held_out_records
from jaxdata.mixture.stream import load_metadata
from jaxdata.tools.cache_plan import cache_needs
from pipeline_fixtures import coded_config, decode, digest, write_coded_dataset


@pytest.fixture()
def cfg(tmp_path) -> PipelineConfig:
  rng = np.random.default_rng(8)
  base = coded_config(
    tmp_path, [rng.integers(2, 14, 200).tolist(), rng.integers(2, 14, 90).tolist(), rng.integers(2, 14, 50).tolist()]
  )
  raw = base.to_dict()
  raw["datasets"][0]["holdout"] = 0.1
  raw["datasets"][1]["holdout"] = 7
  raw.update(
    shuffle_block_size="global",
    stop_after_passes=2,
    packing={"mode": "best_fit", "seq_len": 16},
    batch={"global_batch_size": 4},
  )
  return PipelineConfig.from_dict(raw)


def documents(pipe: Pipeline) -> list[tuple[int, int, int]]:
  """(source, dataset code, record) of every segment's first token, over the whole run."""
  out = []
  for batch in pipe:
    tokens, segments, sources = (np.asarray(batch[k]) for k in ("tokens", "segment_ids", "source_ids"))
    first = (segments > 0) & (np.pad(segments, ((0, 0), (1, 0)))[:, :-1] != segments)
    d, r, k = decode(tokens[first])
    out.extend(zip(sources[first].tolist(), d.tolist(), r.tolist()))
  return out


def test_held_out_documents_never_train_and_eval_serves_each_once(cfg):
  held = {
    0: set(held_out_records("d0", 200, 0.1, cfg.seed).tolist()),
    1: set(held_out_records("d1", 90, 7, cfg.seed).tolist()),
  }
  assert len(held[0]) == 20 and len(held[1]) == 7
  with Pipeline(cfg, prefetch=0) as train:
    trained = documents(train)  # two full passes of every dataset (stop_after_passes: 2)
  seen = {d: {r for _, code, r in trained if code == d} for d in range(3)}
  assert not seen[0] & held[0] and not seen[1] & held[1]  # never trained on
  assert seen[0] == set(range(200)) - held[0] and seen[1] == set(range(90)) - held[1] and seen[2] == set(range(50))
  with Pipeline(cfg, prefetch=0, split="eval") as evaluation:
    assert evaluation.cfg.names == ("d0", "d1")  # only datasets with a holdout
    served = documents(evaluation)
  pieces_start = [(code, r) for _, code, r in served]
  assert sorted(set(pieces_start)) == sorted([(0, r) for r in held[0]] + [(1, r) for r in held[1]])
  # Each held-out document exactly once (a long one may continue in a second piece, which starts at k > 0).
  assert len({(c, r) for c, r in pieces_start}) == 27
  assert {source for source, _, _ in served} == {0, 1}  # source_ids name the eval config's datasets


def test_the_eval_split_is_deterministic_and_training_metadata_excludes_the_holdout(cfg):
  with Pipeline(cfg, prefetch=0, split="eval") as a, Pipeline(cfg, prefetch=0, split="eval") as b:
    assert [digest(x) for x in a] == [digest(y) for y in b]
  metadata = load_metadata(cfg)
  assert int(metadata["d0"].shard_counts.sum()) == 180 and int(metadata["d1"].shard_counts.sum()) == 83
  with Pipeline(cfg, prefetch=0) as pipe:
    assert "holdout=0.1" in pipe.get_state()["fingerprint"]["shuffle"]["d0"]


def test_a_holdout_that_leaves_nothing_or_an_eval_without_holdout_is_refused(cfg, tmp_path):
  raw = cfg.to_dict()
  raw["datasets"][2]["holdout"] = 50
  with pytest.raises(ConfigError, match=r"datasets\.d2\.holdout: 50 of its 50 documents would leave none"):
    Pipeline(PipelineConfig.from_dict(raw), prefetch=0)
  for d in raw["datasets"]:
    d.pop("holdout", None)
  with pytest.raises(ConfigError, match="split eval: no dataset has a holdout"):
    Pipeline(PipelineConfig.from_dict(raw), prefetch=0, split="eval")
  with pytest.raises(ConfigError, match=r"datasets\.x\.holdout: expected a count"):
    PipelineConfig.from_dict({"datasets": [{"name": "x", "holdout": 1.5}], "mixture": {"weights": {"x": 1}}})


def test_the_cache_plan_reads_what_training_reads_not_the_held_out_documents(tmp_path):
  """One 8-token document per shard (shard_bytes 32 = 8 ids), so a held-out
  document is a held-out shard; one read span spans the whole single pass
  (32 x 8 tokens = 4 whole steps of 4 x 16 < read_ahead_tokens), so the shards
  it touches are exactly the training documents'."""
  write_coded_dataset(str(tmp_path / "d0"), 0, [8] * 40, shard_bytes=32)
  cfg = PipelineConfig.from_dict(
    {
      "datasets": [{"name": "d0", "path": str(tmp_path / "d0"), "holdout": 8}],
      "mixture": {"weights": {"d0": 1}},
      "stop_after_passes": 1,
      "packing": {"mode": "first_fit", "seq_len": 16},
      "batch": {"global_batch_size": 4},
    }
  )
  (need,) = cache_needs(cfg, hosts=1, spans=1, read_ahead_tokens=10_000).datasets
  assert need.shards == 40 and need.max_shards == 32
