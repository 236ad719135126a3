"""A run that asks for N passes sees N whole passes, or is told how many documents it misses."""

from __future__ import annotations

import warnings

import numpy as np

from jaxdata import Pipeline, PipelineConfig, from_iterable
from jaxdata.mixture.stream import DatasetMeta
from jaxdata.tools.exposure import simulate_end


def config(path: str | None, drop_remainder: bool = True) -> PipelineConfig:
  return PipelineConfig.from_dict(
    {
      "datasets": [{"name": "sft", **({"path": path} if path else {})}],
      "mixture": {"weights": {"sft": 1}, "unit": "documents"},
      "stop_after_passes": 2,
      "packing": {"mode": "none", "seq_len": 8},
      "batch": {"global_batch_size": 4, "drop_remainder": drop_remainder},
    }
  )


def test_plan_says_how_many_documents_the_dropped_last_step_leaves_unseen():
  metas = {"sft": DatasetMeta.from_lengths([5] * 10)}  # 2 passes: 20 documents, 5 steps of 4 rows
  end = simulate_end(config(None), metas, 100)
  assert end is not None and end.unseen_documents == {}  # 20 = 5 x 4: nothing dropped
  metas = {"sft": DatasetMeta.from_lengths([5] * 11)}  # 22 documents: the 6th step holds 2 and is dropped
  end = simulate_end(config(None), metas, 100)
  assert end is not None and end.steps == 5 and end.unseen_documents == {"sft": 2}
  assert "2 documents of the last pass are never seen (sft 2" in end.describe()
  assert simulate_end(config(None, drop_remainder=False), metas, 100).unseen_documents == {}


def test_the_pipeline_warns_at_the_end_with_the_count(tmp_path):
  path = str(tmp_path / "sft")
  from_iterable([[i + 3] * 5 for i in range(11)], out=path, tokenizer=None)
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    with Pipeline(config(path), prefetch=0) as pipe:
      batches = list(pipe)
  assert len(batches) == 5
  said = [str(w.message) for w in caught if "never seen" in str(w.message)]
  assert len(said) == 1 and "2 documents of the last pass are never seen (sft 2)" in said[0]
  with Pipeline(config(path, drop_remainder=False), prefetch=0) as pipe:  # padded instead: all 22 seen
    padded = list(pipe)
  assert len(padded) == 6 and int((np.asarray(padded[-1]["segment_ids"]).max(axis=1) > 0).sum()) == 2
