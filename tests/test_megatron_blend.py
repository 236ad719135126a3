"""Megatron's blend and split as a jaxdata mixture: `--data-path 0.3 A 0.7 B --split 969,30,1`.

The split is checked against a re-implementation of Megatron-Core's
(`parse_and_normalize_split`, `convert_split_vector_to_split_matrix`, and
the rounding of each book-end by the document count), written from its
definition; the files by the reference Megatron writer of `flat_fixtures`.
"""

from __future__ import annotations

import json
import os
import re

import numpy as np
import pytest

from flat_fixtures import random_documents, write_megatron
from jaxdata import ConfigError, DatasetError, Pipeline, PipelineConfig, load_config
from jaxdata.cli import main
from jaxdata.integrations.megatron import megatron_config, megatron_split_ranges, parse_blend
from jaxdata.mixture import DocumentStream
from jaxdata.sources.opening import open_dataset
from pipeline_fixtures import write_coded_dataset


def megatron_core_split(split: str, num_documents: int) -> list[tuple[int, int] | None]:
  """Megatron-Core: ratios normalised, book-ends accumulated, each cut at round(bookend x documents)."""
  ratios = [float(v) for v in re.findall(r"[.0-9]+", split)]
  ratios += [0.0] * (3 - len(ratios))
  ratios = [r / sum(ratios) for r in ratios]
  bookends = [0.0]
  for r in ratios:
    bookends.append(bookends[-1] + r)
  matrix = [(bookends[i], bookends[i + 1]) for i in range(3)]
  return [(int(round(a * num_documents)), int(round(b * num_documents))) for a, b in matrix]


def test_the_split_cuts_documents_where_megatron_core_does():
  rng = np.random.default_rng(0)
  splits = ["969,30,1", "98,2,0", "1", "90,10", "0.8,0.1,0.1", "1,1,1"]
  splits += [",".join(str(int(v)) for v in rng.integers(0, 1000, 3)) for _ in range(30)]
  for split in splits:
    if split.replace(",", "").strip("0") == "":
      continue
    for n in [1, 2, 3, 7, 100, 999, 1000, 12345, int(rng.integers(1, 10**7))]:
      ours = megatron_split_ranges(split, n)
      assert ours == megatron_core_split(split, n), (split, n)
      assert ours[0][0] == 0 and ours[-1][1] == n and all(a[1] == b[0] for a, b in zip(ours, ours[1:]))


def test_blend_strings_parse_as_megatron_reads_them():
  assert parse_blend("0.3 a 0.7 b") == [(0.3, "a"), (0.7, "b")]
  assert parse_blend(["30", "a", "70", "b"]) == [(30.0, "a"), (70.0, "b")]
  assert parse_blend("a b c") == [(None, "a"), (None, "b"), (None, "c")]
  for bad in ("0.3 a 0.7", "0.3 a b 0.7", "a 0.3", "-1 a 2 b", ""):
    with pytest.raises(ConfigError, match=r"data_path: "):
      parse_blend(bad)
  with pytest.raises(ConfigError, match=r"split: 'x' is not up to three ratios"):
    megatron_split_ranges("x", 10)


@pytest.fixture(scope="module")
def prefixes(tmp_path_factory) -> dict[str, list[list[int]]]:
  root = tmp_path_factory.mktemp("megatron")
  rng = np.random.default_rng(4)
  corpora = {}
  for name, count in (("web_text_document", 400), ("code_text_document", 250)):
    docs = random_documents(rng, count, eos_id=0, max_length=30)
    # an empty document (preprocess_data.py on {"text": ""}) in the middle: skipped, as Megatron's reader does
    write_megatron(str(root / name), [[d] for d in docs[:100]] + [[]] + [[d] for d in docs[100:]])
    corpora[str(root / name)] = docs
  return corpora


def test_the_blend_is_a_mixture_with_megatrons_weights_and_split(prefixes, tmp_path):
  web, code = list(prefixes)
  cfg = megatron_config(f"0.3 {web} 0.7 {code}", split="969,30,1", index_dir=str(tmp_path / "ix"), seq_len=16)
  assert cfg.names == ("web_text_document", "code_text_document")
  assert [float(w) for w in cfg.schedule.exact_weights_at(0)] == [0.3, 0.7]
  # Megatron numbers 401 and 251 documents (the empty ones included): round(0.969 x 401) = 389 of which one
  # (document 100) is empty, so records [0, 388); round(0.969 x 251) = 243 -> records [0, 242)
  assert [d.documents for d in cfg.datasets] == [(0, 388), (0, 242)]
  # the realised token shares of the exact interleave: within one document of the weights
  stream = DocumentStream.open(cfg)
  refs = [next(stream) for _ in range(3000)]
  tokens = {name: sum(r.length for r in refs if r.dataset == name) for name in cfg.names}
  total = sum(tokens.values())
  assert abs(tokens["code_text_document"] / total - 0.7) <= 30 / total
  # every split reads its own documents, each once per pass, in Megatron's document order before shuffling
  seen = {}
  for which in ("train", "valid", "test"):
    split_cfg = megatron_config(
      f"0.3 {web} 0.7 {code}",
      split="90,7,3",
      which=which,
      index_dir=str(tmp_path / "ix"),
      seq_len=16,
      stop_after_passes=1,
    )  # (train repeats by default: one pass here)
    seen[which] = {(r.dataset, r.record) for r in DocumentStream.open(split_cfg)}
    for d in split_cfg.datasets:
      assert {r for n, r in seen[which] if n == d.name} == set(range(d.documents[1] - d.documents[0]))
  assert megatron_config(f"0.3 {web} 0.7 {code}", which="valid", index_dir=str(tmp_path / "ix")).datasets[
    0
  ].documents == (
    388,
    400,
  )


def test_an_unweighted_blend_weighs_by_tokens_and_a_split_with_no_documents_is_named(prefixes, tmp_path):
  web, code = list(prefixes)
  cfg = megatron_config(f"{web} {code}", split="1,0,0", index_dir=str(tmp_path / "ix"))
  sizes = [sum(len(d) for d in docs) for docs in prefixes.values()]
  assert [float(w) for w in cfg.schedule.exact_weights_at(0)] == pytest.approx([s / sum(sizes) for s in sizes])
  with pytest.raises(ConfigError, match=r"split: '1,0,0' gives valid no document of .*web_text_document"):
    megatron_config(f"{web} {code}", split="1,0,0", which="valid", index_dir=str(tmp_path / "ix"))
  with pytest.raises(ConfigError, match=r"data_path: .*missing.bin does not exist"):
    megatron_config(f"1 {tmp_path}/missing", index_dir=str(tmp_path / "ix"))


def test_a_documents_range_beyond_the_dataset_is_refused_naming_it(prefixes, tmp_path):
  web = list(prefixes)[0]
  cfg = megatron_config(f"1 {web}", index_dir=str(tmp_path / "ix"))
  raw = cfg.to_dict()
  raw["datasets"][0]["documents"] = [10, 5000]
  with pytest.raises(DatasetError, match=r"documents \[10, 5000\) asked of a dataset of 400 documents"):
    Pipeline(PipelineConfig.from_dict(raw))
  with pytest.raises(ConfigError, match=r"documents: expected \[start, stop\]"):
    PipelineConfig.from_dict({**raw, "datasets": [{**raw["datasets"][0], "documents": [5, 5]}]})


def test_the_cli_writes_a_config_that_trains(prefixes, tmp_path, capsys):
  web, code = list(prefixes)
  out = str(tmp_path / "megatron.yaml")
  argv = ["from-megatron", "--data-path", "0.3", web, "0.7", code, "--split", "969,30,1"]
  argv += ["--index-dir", str(tmp_path / "ix"), "--seq-length", "32", "--global-batch-size", "4", "--out", out]
  assert main(argv) == 0
  said = " ".join(capsys.readouterr().out.split())  # the console may wrap
  assert "token shares web_text_document 0.3, code_text_document 0.7" in said and "[0, 388)" in said
  cfg = load_config(out)
  assert [d.documents for d in cfg.datasets] == [(0, 388), (0, 242)]
  with Pipeline(cfg, prefetch=0) as pipe:
    batch = next(pipe)
  assert batch["tokens"].shape == (4, 32)
  assert os.path.isfile(tmp_path / "ix" / "web_text_document" / "manifest.json")


def test_a_prefix_rewritten_after_indexing_is_indexed_again(tmp_path):
  rng = np.random.default_rng(8)
  write_megatron(str(tmp_path / "a"), [[d] for d in random_documents(rng, 50, eos_id=0)])
  first = megatron_config(f"1 {tmp_path}/a", index_dir=str(tmp_path / "ix"), split="1")
  assert first.datasets[0].documents == (0, 50)
  write_megatron(str(tmp_path / "a"), [[d] for d in random_documents(rng, 80, eos_id=0)])  # rewritten in place
  second = megatron_config(f"1 {tmp_path}/a", index_dir=str(tmp_path / "ix"), split="1")
  assert second.datasets[0].documents == (0, 80)
  with Pipeline(second, prefetch=0) as pipe:
    next(pipe)


def test_an_idx_rewritten_with_the_same_counts_is_indexed_again(tmp_path):
  # two documents swap sizes: the document count and the token total stay, the .idx bytes do not
  write_megatron(str(tmp_path / "a"), [[list(range(1, 34))], [list(range(1, 32))], [list(range(1, 47))]])
  megatron_config(f"1 {tmp_path}/a", index_dir=str(tmp_path / "ix"), split="1")
  write_megatron(str(tmp_path / "a"), [[list(range(1, 32))], [list(range(1, 34))], [list(range(1, 47))]])
  cfg = megatron_config(f"1 {tmp_path}/a", index_dir=str(tmp_path / "ix"), split="1")
  with open_dataset(cfg.datasets[0].path) as dataset:
    assert np.asarray(dataset.lengths).tolist() == [31, 33, 46]
    assert [len(dataset[i]) for i in range(3)] == [31, 33, 46]


def test_from_megatron_never_replaces_a_directory_it_did_not_index_for_that_prefix(prefixes, tmp_path):
  web, code = list(prefixes)
  index_dir = tmp_path / "ix"
  # a user's ArrayRecord dataset where the prefix's index would go
  write_coded_dataset(str(index_dir / "web_text_document"), 0, [5, 9, 3] * 10)
  before = {p.name: p.read_bytes() for p in (index_dir / "web_text_document").iterdir()}
  with pytest.raises(ConfigError, match=r"index_dir: .*web_text_document holds a arrayrecord dataset"):
    megatron_config(f"1 {web}", index_dir=str(index_dir))
  assert {p.name: p.read_bytes() for p in (index_dir / "web_text_document").iterdir()} == before
  # another prefix's index under this prefix's name
  megatron_config(f"1 {code}", index_dir=str(tmp_path / "other"))
  os.rename(tmp_path / "other" / "code_text_document", tmp_path / "other" / "web_text_document")
  with pytest.raises(ConfigError, match=r"holds the Megatron index of .*code_text_document"):
    megatron_config(f"1 {web}", index_dir=str(tmp_path / "other"))
  # files but no manifest
  (tmp_path / "loose" / "web_text_document").mkdir(parents=True)
  (tmp_path / "loose" / "web_text_document" / "notes.txt").write_text("mine")
  with pytest.raises(ConfigError, match=r"already holds files and no jaxdata index"):
    megatron_config(f"1 {web}", index_dir=str(tmp_path / "loose"))
  assert (tmp_path / "loose" / "web_text_document" / "notes.txt").read_text() == "mine"


def test_the_written_config_shuffles_keeps_every_eval_token_and_holds_only_what_it_sets(tmp_path):
  rng = np.random.default_rng(5)
  web, code = str(tmp_path / "web_text_document"), str(tmp_path / "code_text_document")
  for prefix, count in ((web, 400), (code, 250)):  # byte-level ids: they mix with `--tokenizer byte` data
    write_megatron(prefix, [[d] for d in random_documents(rng, count, eos_id=0, vocab=256, max_length=30)])
  (tmp_path / "cfg").mkdir()
  out = str(tmp_path / "cfg" / "valid.yaml")
  argv = ["from-megatron", "--data-path", "0.3", web, "0.7", code, "--split", "90,10,0", "--which", "valid"]
  argv += ["--index-dir", str(tmp_path / "ix"), "--seq-length", "16", "--global-batch-size", "4", "--out", out]
  argv += ["--tokenizer", "byte"]
  assert main(argv) == 0
  text = open(out).read()
  assert len(text.splitlines()) < 25 and str(tmp_path) not in text  # only the keys set, relative paths
  cfg = load_config(out)
  assert cfg.shuffle_block_size == "global" and not cfg.batch.drop_remainder
  # every token of the valid split reaches a batch (the last one padded): the stream's tokens, all placed
  with Pipeline(cfg, prefetch=0) as pipe:
    placed = sum(int((b["segment_ids"] > 0).sum()) for b in pipe)
  streamed = list(DocumentStream.open(cfg))
  assert placed == sum(r.length for r in streamed)
  for d in cfg.datasets:
    assert {r.record for r in streamed if r.dataset == d.name} == set(range(d.documents[1] - d.documents[0]))
  # train shuffles: the first pass is not the stored order
  train = megatron_config(f"1 {web}", split="1", index_dir=str(tmp_path / "ix"), tokenizer={"kind": "byte"})
  order = [r.record for _, r in zip(range(50), DocumentStream.open(train))]
  assert order != list(range(50)) and len(set(order)) == 50
  # the tokenizer is recorded: the index mixes with byte-converted data
  manifest = json.load(open(tmp_path / "ix" / "web_text_document" / "manifest.json"))
  assert manifest["tokenizer"]["kind"] == "byte"


def test_a_split_that_is_not_ratios_is_named(prefixes, tmp_path):
  for bad in ("1.2.3", "a,b", "1,-1,0", "nan,1", "1,2,3,4"):
    with pytest.raises(ConfigError, match=rf"split: {re.escape(repr(bad))} is not up to three ratios"):
      megatron_config(f"1 {list(prefixes)[0]}", split=bad, index_dir=str(tmp_path / "ix"))
