"""Under `mixture.unit: documents` the shares `stats()` reports are document shares, as the targets are."""

from __future__ import annotations

import numpy as np

from jaxdata import Pipeline
from pipeline_fixtures import coded_config


def test_shares_under_a_document_mixture_count_documents_and_survive_a_restore(tmp_path):
  # d0's documents are ~10x d1's: equal document weights give d0 ~90% of the tokens. share_cumulative
  # was that token share, beside a target of 0.5.
  rng = np.random.default_rng(3)
  cfg = coded_config(
    tmp_path,
    [rng.integers(40, 60, 400).tolist(), rng.integers(3, 7, 4000).tolist()],
    exhausted_policy="repeat",
    mixture={"weights": {"d0": 1, "d1": 1}, "unit": "documents"},
    packing={"mode": "first_fit", "seq_len": 64, "bos_id": 1, "eos_id": 0, "long_docs": "split"},
    batch={"global_batch_size": 8},
  )
  with Pipeline(cfg, prefetch=0) as pipe:
    seen = []
    for step in range(40):
      next(pipe)
      seen.append(pipe.stats())
      if step == 19:
        middle = pipe.get_state()
    final = pipe.get_state()
  last = seen[-1]
  assert last["unit"] == "documents" and last["target_share"] == {"d0": 0.5, "d1": 0.5}
  taken = {n: final["stream"]["datasets"][n]["taken"] for n in ("d0", "d1")}  # the documents the mixture drew
  assert last["share_cumulative"] == {n: taken[n] / sum(taken.values()) for n in taken}
  # The exact interleave draws within one document of the target: |share - 0.5| <= 1 / documents drawn.
  assert abs(last["share_cumulative"]["d0"] - 0.5) <= 1 / sum(taken.values())
  tokens = last["tokens_per_source"]
  assert tokens["d0"] / sum(tokens.values()) > 0.8  # the token share is far from it
  for stats in seen:
    begun = stats["documents_per_source"]
    assert stats["share_batch"] == {n: begun[n] / sum(begun.values()) for n in begun}
  with Pipeline(cfg, prefetch=0) as again:
    again.set_state(middle)
    for expected in seen[20:]:
      next(again)
      assert again.stats()["share_cumulative"] == expected["share_cumulative"]
