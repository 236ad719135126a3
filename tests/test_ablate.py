"""`jaxdata ablate` on the demo's datasets: three candidates, equal processed tokens, held-out losses."""

from __future__ import annotations

import math

import pytest
import yaml

from jaxdata.cli import main
from jaxdata.demo.ablate import ablation_config, evaluate, run_ablation
from jaxdata.demo.corpus import build_demo_corpus
from jaxdata.demo.run import demo_config

pytestmark = [pytest.mark.slow]


def test_three_candidates_train_equal_tokens_and_report_held_out_losses(tmp_path, capsys, monkeypatch):
  monkeypatch.setenv("COLUMNS", "80")
  cache = str(tmp_path / "cache")
  build_demo_corpus(cache, lambda m: None)
  base = demo_config(cache)
  candidates = {
    "web-heavy": {"synthetic": 0.8, "code": 0.1, "docs": 0.1},
    "code-heavy": {"synthetic": 0.1, "code": 0.8, "docs": 0.1},
    "balanced": {"synthetic": 1 / 3, "code": 1 / 3, "docs": 1 / 3},
  }
  paths = []
  for name, weights in candidates.items():
    paths.append(str(tmp_path / f"{name}.yaml"))
    (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump({"name": name, "weights": weights}))
  assert (
    main(
      [
        "ablate",
        "--cache-dir",
        cache,
        "--candidates",
        *paths,
        "--tokens",
        "8k",
        "--eval-tokens",
        "48k",  # the same first 48k held-out trained tokens for every candidate
        "--png",
        str(tmp_path / "ablation.png"),
      ]
    )
    == 0
  )
  printed = capsys.readouterr().out
  assert not [line for line in printed.splitlines() if len(line) > 80]  # fits an 80-column terminal
  assert printed.count("8,000") >= 3  # processed tokens: equal for every candidate
  assert (tmp_path / "ablation.png").read_bytes()[:4] == b"\x89PNG"
  rows = run_ablation(
    base,
    [("web", candidates["web-heavy"]), ("code", candidates["code-heavy"])],
    6_000,
    log=lambda m: None,
    eval_tokens=48_000,
  )
  assert [r.processed_tokens for r in rows] == [6_000, 6_000]
  assert rows[0].tokens_by_domain["synthetic"] > rows[1].tokens_by_domain["synthetic"]
  assert all(math.isfinite(v) for r in rows for v in r.domain_loss.values())
  # a noise estimate per domain: small against the loss, positive (48k held-out tokens)
  assert all(0 < r.domain_stderr[n] < 0.1 * r.domain_loss[n] for r in rows for n in r.domain_loss)
  # Training on more code lowers the held-out code loss relative to the other candidate.
  assert rows[1].domain_loss["code"] < rows[0].domain_loss["code"]
  # Every candidate holds out the same documents: the eval split depends on the seed and counts only.
  assert (
    ablation_config(base, candidates["web-heavy"]).datasets == ablation_config(base, candidates["code-heavy"]).datasets
  )


def test_an_evaluation_budget_under_one_token_is_refused_before_anything_runs(tmp_path):
  cache = str(tmp_path / "cache")
  build_demo_corpus(cache, lambda m: None)
  with pytest.raises(ValueError, match=r"eval_tokens: must be >= 1 \(or None: every held-out token\), got 0"):
    evaluate(None, ablation_config(demo_config(cache)), eval_tokens=0)
