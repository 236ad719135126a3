"""The README's main command, `jaxdata demo`, end to end, as a user runs it."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from jaxdata.cli import main
from jaxdata.demo.corpus import build_demo_corpus

pytestmark = [pytest.mark.slow]


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory) -> tuple[dict, str]:
  tmp = tmp_path_factory.mktemp("demo")
  summary = tmp / "summary.json"
  out = subprocess.run(
    ["jaxdata", "demo", "--cache-dir", str(tmp / "cache"), "--json", str(summary)],
    capture_output=True,
    text=True,
    timeout=600,
    env={**os.environ, "COLUMNS": "80"},
  )
  assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
  return json.loads(summary.read_text()), out.stdout


def test_demo_trains_checkpoints_and_resumes_exactly(demo_run):
  result, stdout = demo_run
  assert result["resume_ok"], result["resume_detail"]
  assert "resume check: OK" in stdout
  losses = result["losses"]
  assert len(losses) == 40
  assert sum(losses[-5:]) / 5 < losses[0] - 1.0  # the loss falls (from ~ln 259 = 5.56)
  assert result["efficiency"] > 0.95


def test_demo_shares_follow_the_targets_within_the_interleave_bound(demo_run):
  # The summary compares the stream's tokens with the weights it used; the
  # exact interleave keeps them within one document (0.1 compared placed
  # tokens with the placing step's weights: code 0.348 against 0.390).
  result, stdout = demo_run
  for name, target in result["target_share"].items():
    assert abs(result["realised_share"][name] - target) <= result["share_bound"], (name, target)
  assert "within one document" in " ".join(stdout.split())
  # Every demo document fits in one step.
  assert result["max_document_tokens"] < result["capacity"]


def test_demo_output_fits_80_columns(demo_run):
  _, stdout = demo_run
  wide = [line for line in stdout.splitlines() if len(line) > 80]
  assert not wide, wide[:3]


def test_demo_writes_a_mixture_plot(demo_run):
  result, stdout = demo_run
  with open(result["plot_path"], "rb") as f:
    header = f.read(8)
  assert header == b"\x89PNG\r\n\x1a\n"
  assert result["plot_path"] in stdout


def test_demo_corpus_is_reused(tmp_path):
  logs: list[str] = []
  build_demo_corpus(str(tmp_path), logs.append)
  assert [line.split()[0] for line in logs] == ["converted"] * 3
  logs.clear()
  build_demo_corpus(str(tmp_path), logs.append)
  assert [line.split()[0] for line in logs] == ["reusing"] * 3


def test_a_directory_with_a_file_named_like_the_demos_stamp_is_refused_and_kept(tmp_path):
  """A user's file called corpus_version proves nothing: the directory is refused, every file kept."""
  (tmp_path / "corpus_version").write_text("my notes")
  (tmp_path / "thesis.txt").write_text("years of work")
  with pytest.raises(FileExistsError, match="was not created by jaxdata demo"):
    build_demo_corpus(str(tmp_path), print)
  assert sorted(os.listdir(tmp_path)) == ["corpus_version", "thesis.txt"]
  assert (tmp_path / "thesis.txt").read_text() == "years of work"
  (tmp_path / "c.yaml").write_text("name: even\nweights: {synthetic: 1, code: 1, docs: 1}\n")
  for command in (
    ["demo", "--cache-dir", str(tmp_path)],
    ["ablate", "--candidates", str(tmp_path / "c.yaml"), "--cache-dir", str(tmp_path)],
  ):
    assert main(command) != 0
    assert sorted(os.listdir(tmp_path)) == ["c.yaml", "corpus_version", "thesis.txt"]


def test_the_online_doremi_demo_steers_the_pipeline_and_resumes_across_updates(tmp_path):
  summary = tmp_path / "online.json"
  out = subprocess.run(
    ["jaxdata", "demo", "--online", "doremi", "--steps", "4", "--eval-tokens", "16k"]
    + ["--cache-dir", str(tmp_path / "cache")]
    + ["--json", str(summary)],
    capture_output=True,
    text=True,
    timeout=600,
    env={**os.environ, "COLUMNS": "80"},
  )
  assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
  result = json.loads(summary.read_text())
  assert result["resume_ok"], result["resume_detail"]
  assert len(result["trajectory"]) == 4 and result["trajectory"][0] != result["trajectory"][-1]
  averaged = [sum(step[n] for step in result["trajectory"]) / 4 for n in result["averaged"]]
  assert [round(a, 9) for a in averaged] == [round(result["averaged"][n], 9) for n in result["averaged"]]
  assert set(result["uniform_loss"]) == set(result["doremi_loss"]) == set(result["averaged"])
  assert "resume check: OK" in out.stdout and max(len(line) for line in out.stdout.splitlines()) <= 80
  # the proxy updates after every step, 4 steps ahead: at most the first (made once the prefetch
  # thread had planned further ahead than that) plans steps again
  assert 0 < result["pipeline_share"] < 1 and result["updates_replanned"] <= 1
  assert "of the proxy loop's step time" in " ".join(out.stdout.split())


def test_the_sft_demo_trains_on_masked_conversations_and_resumes_mid_epoch(tmp_path, capfd):
  out = tmp_path / "sft.json"
  code = main(["demo", "--sft", "--steps", "16", "--cache-dir", str(tmp_path / "cache"), "--json", str(out)])
  captured = capfd.readouterr()  # at the file descriptors: what the tokenizer library prints too
  assert "\n\n\n" not in captured.out + captured.err and "PyTorch was not found" not in captured.err  # no stray lines
  said = " ".join(captured.out.split())
  assert code == 0 and "resume mid-epoch: identical batches" in said
  result = json.loads(out.read_text())
  assert result["losses"][-1] < result["losses"][0]
  # the masks train the assistant's tokens only: a share of each set's tokens, never all of them
  assert all(0.05 < share < 0.9 for share in result["trained_share"].values())
  # document weights .55 / .30 / .15: the exact interleave keeps each set within one example of its share of
  # those drawn; the rows hold all drawn but the carry (under one step's ~50 of ~800): 0.07 bounds the gap
  for name, weight in (("chat", 0.55), ("tool_calls", 0.30), ("safety", 0.15)):
    assert abs(result["realised_documents"][name] - weight) < 0.07
  assert all(loss == loss for loss in result["held_out_loss"].values())  # every set has held-out trained tokens


def test_the_dpo_demo_raises_the_reward_margin_on_packed_pairs_and_resumes_mid_epoch(tmp_path, capfd):
  out = tmp_path / "dpo.json"
  code = main(["demo", "--dpo", "--steps", "16", "--cache-dir", str(tmp_path / "cache"), "--json", str(out)])
  said = " ".join(capfd.readouterr().out.split())
  assert code == 0 and "resume mid-epoch: identical batches" in said
  result = json.loads(out.read_text())
  margins = result["margins"]
  # at the reference model (step 0's parameters) every margin is 0; training moves the chosen side up
  assert abs(margins[0]) < 1e-6 and sum(margins[-4:]) / 4 > 0.1 and result["losses"][-1] < result["losses"][0]
  # pair weights .7 / .3: the exact interleave keeps each set within a pair of its share of those drawn; the
  # rows hold all drawn but the carry (under a step's ~15 of ~200 pairs): 0.1 bounds the gap
  total = sum(result["pairs"].values())
  assert total > 100 and abs(result["pairs"]["helpful"] / total - 0.7) < 0.1


def test_the_vision_demo_trains_on_packed_image_text_rows_and_resumes_halfway(tmp_path, capfd):
  out = tmp_path / "vision.json"
  code = main(["demo", "--vision", "--steps", "16", "--cache-dir", str(tmp_path / "cache"), "--json", str(out)])
  captured = capfd.readouterr()
  said = " ".join(captured.out.split())
  assert code == 0 and "resume halfway: identical batches" in said and "PyTorch was not found" not in captured.err
  result = json.loads(out.read_text())
  assert sum(result["losses"][-4:]) < sum(result["losses"][:4])
  # 16 steps of 8 rows, every example one picture: the rows hold several each (three budgets, examples whole)
  assert result["images_seen"] > 16 * 8 and 0.5 < result["patch_fill"] <= 1 and 0.5 < result["token_fill"] <= 1
