"""Optional extras: the core works without rich, matplotlib, pyarrow and Pillow; a missing extra is named."""

from __future__ import annotations

import json
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import tokenizers
import transformers

from jaxdata import Pipeline
from pipeline_fixtures import coded_config

SCRIPT = """
import sys
for name in {blocked!r}:
  sys.modules[name] = None  # import raises ImportError, as when the extra is not installed
from jaxdata.cli import main
sys.exit(main({argv!r}))
"""


def jaxdata(argv: list[str], blocked: tuple[str, ...]) -> subprocess.CompletedProcess:
  code = SCRIPT.format(blocked=list(blocked), argv=argv)
  return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)


RICH = ("rich", "rich.console", "rich.table", "rich.progress")
PLOTS = ("matplotlib", "matplotlib.figure")
PARQUET = ("pyarrow", "pyarrow.parquet")
PILLOW = ("PIL", "PIL.Image", "PIL.ImageOps")


@pytest.mark.slow
def test_the_cli_converts_and_inspects_without_rich_matplotlib_pyarrow_or_pillow(tmp_path):
  (tmp_path / "in.jsonl").write_text("".join(json.dumps({"text": f"document {i}"}) + "\n" for i in range(50)))
  out = str(tmp_path / "ds")
  done = jaxdata(
    ["convert", str(tmp_path / "in.jsonl"), "--out", out, "--name", "plain", "--workers", "1"],
    RICH + PLOTS + PARQUET + PILLOW,
  )
  assert done.returncode == 0, done.stderr[-2000:]
  assert "wrote" in done.stdout and "50 documents" in done.stdout
  shown = jaxdata(["inspect", out], RICH + PLOTS + PARQUET)
  assert shown.returncode == 0, shown.stderr[-2000:]
  lines = shown.stdout.splitlines()
  assert lines[0] == "jaxdata datasets" and lines[1].split()[:3] == ["dataset", "shards", "documents"]
  assert lines[2].split()[:3] == ["plain", "1", "50"]  # a plain, aligned table


@pytest.mark.slow
def test_a_missing_extra_is_named(tmp_path):
  pq.write_table(pa.table({"text": ["a", "b"]}), tmp_path / "t.parquet")
  done = jaxdata(
    ["convert", str(tmp_path / "t.parquet"), "--out", str(tmp_path / "o"), "--name", "o", "--workers", "1"], PARQUET
  )
  assert done.returncode == 1 and "reading Parquet needs pyarrow: pip install 'jaxdata[parquet]'" in done.stderr
  (tmp_path / "c.jsonl").write_text(json.dumps({"image": "a.png", "text": "a cat"}) + "\n")
  (tmp_path / "a.png").write_bytes(b"\x89PNG\r\n\x1a\n")  # never opened: the missing extra is named first
  argv = ["convert", str(tmp_path / "c.jsonl"), "--out", str(tmp_path / "v"), "--name", "v", "--workers", "1"]
  words = {"[UNK]": 0, "a": 1, "cat": 2, "<|vision_start|>": 3, "<|image_pad|>": 4, "<|vision_end|>": 5}
  tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(words, unk_token="[UNK]"))
  tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
  transformers.PreTrainedTokenizerFast(tokenizer_object=tok).save_pretrained(str(tmp_path / "tok"))
  done = jaxdata([*argv, "--format", "vision", "--tokenizer", "hf:" + str(tmp_path / "tok")], PILLOW)
  assert done.returncode == 1 and "reading images needs PIL: pip install 'jaxdata[vision]'" in done.stderr
  cfg = coded_config(tmp_path, [[5, 9, 3] * 20], stats_path=str(tmp_path / "stats.jsonl"))
  with Pipeline(cfg, prefetch=0) as pipe:
    for _ in range(3):
      next(pipe)
  plotted = jaxdata(["report", str(tmp_path / "stats.jsonl")], PLOTS)
  assert plotted.returncode == 1 and "plotting needs matplotlib: pip install 'jaxdata[plots]'" in plotted.stderr
  assert "Traceback" not in plotted.stderr
