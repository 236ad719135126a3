"""docs/configuration.md lists every config field with its true default,
allowed values and an example that the config accepts."""

from __future__ import annotations

import copy
import dataclasses
import glob
import inspect
import json
import os
import re
import shlex
from typing import Any

import pytest
import yaml

from jaxdata import Pipeline, load_config
from jaxdata.cli import build_parser
from jaxdata.config import (
  BatchConfig,
  DatasetConfig,
  MixtureConfig,
  PackingConfig,
  Phase,
  PipelineConfig,
  WarmupPhase,
  schema,
)
from pipeline_fixtures import coded_config

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REFERENCE = os.path.join(REPO, "docs", "configuration.md")
SECTIONS = {
  "Top level": PipelineConfig,
  "`datasets[]`": DatasetConfig,
  "`mixture`": MixtureConfig,
  "`mixture.schedule[]`": Phase,
  "`packing`": PackingConfig,
  "`packing.warmup[]`": WarmupPhase,
  "`batch`": BatchConfig,
}
CHOICES = {
  ("`mixture`", "unit"): schema.UNITS,
  ("`mixture`", "interleave"): schema.INTERLEAVES,
  ("`packing`", "mode"): schema.PACKING_MODES,
  ("`packing`", "long_docs"): schema.LONG_DOCS,
  ("`datasets[]`", "exhausted_policy"): schema.EXHAUSTED_POLICIES,
  ("`datasets[]`", "sampling"): schema.SAMPLINGS,
}
# Keys that apply only beside another: their example is tried with it.
REQUIRES = {("`datasets[]`", k): {"sampling": "windows"} for k in ("window", "with_replacement", "cross_documents")}
REQUIRES[("`packing`", "group_by_length")] = {"mode": "none"}
# raw inputs stand instead of a path, with their tokenizer
REQUIRES[("`datasets[]`", "inputs")] = {"path": "", "tokenizer": "byte"}
REQUIRES[("`datasets[]`", "tokenizer")] = {"path": "", "inputs": "corpus/web.jsonl"}
REQUIRES[("`datasets[]`", "convert")] = {"path": "", "inputs": "corpus/web.jsonl", "tokenizer": "byte"}


def _tables() -> dict[str, dict[str, dict[str, str]]]:
  """Section heading -> key -> column -> cell, from the markdown tables."""
  tables: dict[str, dict[str, dict[str, str]]] = {}
  section, header = None, None
  for line in open(REFERENCE, encoding="utf-8"):
    if line.startswith("## "):
      section, header = line[3:].strip(), None
      continue
    if section not in SECTIONS or not line.startswith("|"):
      continue
    cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
    if header is None:
      header = cells
    elif not set(cells[0]) <= set("-|"):
      tables.setdefault(section, {})[cells[0].strip("`")] = dict(zip(header, cells))
  return tables


TABLES = _tables()


def _code(cell: str) -> str:
  match = re.fullmatch(r"`([^`]*)`", cell)
  assert match, f"expected one `code` cell, got {cell!r}"
  return match.group(1)


def test_every_field_of_every_section_is_documented_once():
  for section, kind in SECTIONS.items():
    documented = set(TABLES.get(section, {}))
    fields = {f.name for f in dataclasses.fields(kind)}
    assert documented == fields, f"{section}: undocumented {fields - documented}, unknown {documented - fields}"


def test_documented_defaults_are_the_dataclass_defaults():
  for section, kind in SECTIONS.items():
    for field in dataclasses.fields(kind):
      cell = TABLES[section][field.name]["default"]
      if field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
        assert cell == "required", (section, field.name)
      elif cell == "inherits":
        assert field.default in (None, schema.INHERIT), (section, field.name)
      else:
        documented = yaml.safe_load(_code(cell))
        default = field.default
        if dataclasses.is_dataclass(default):
          assert default == type(default)(**documented), (section, field.name)
        elif isinstance(default, tuple):
          assert list(default) == documented, (section, field.name)
        else:
          assert documented == default and type(documented) is type(default), (section, field.name)


def test_documented_choices_are_the_allowed_values():
  for (section, key), allowed in CHOICES.items():
    cell = TABLES[section][key]["allowed values"]
    assert set(re.findall(r"`([^`]*)`", cell)) == set(allowed), (section, key)


BASE: dict[str, Any] = {
  "datasets": [{"name": "web", "path": "data/web"}, {"name": "code", "path": "data/code"}],
  "mixture": {"weights": {"web": 1, "code": 1}},
}


def _with_example(section: str, example: dict[str, Any]) -> dict[str, Any]:
  raw = copy.deepcopy(BASE)
  if section == "Top level":
    raw.update(example)
    if "datasets" in example:  # weights must name exactly the example's datasets
      raw["mixture"] = {"weights": {d["name"]: 1 for d in example["datasets"]}}
  elif section == "`datasets[]`":
    raw["datasets"][0].update({**REQUIRES.get((section, *example), {}), **example})
  elif section == "`mixture`":
    if "schedule" in example:
      del raw["mixture"]["weights"]
    raw["mixture"].update(example)
  elif section == "`mixture.schedule[]`":
    phases = [{"weights": {"web": 1, "code": 1}, "until_step": 2000}, {"weights": {"web": 1, "code": 2}}]
    phases[0 if "until_step" in example else 1].update(example)
    raw["mixture"] = {"schedule": phases}
  elif section == "`packing.warmup[]`":
    raw["packing"] = {"warmup": [{"until_step": 1000, "seq_len": 512, **example}]}
  else:
    raw[section.strip("`")] = {**REQUIRES.get((section, *example), {}), **example}
  return raw


@pytest.mark.parametrize("section", list(SECTIONS))
def test_every_example_is_accepted_and_sets_its_key(section):
  for key, row in TABLES[section].items():
    example = yaml.safe_load(_code(row["example"]))
    assert isinstance(example, dict) and list(example) == [key], (section, key, example)
    PipelineConfig.from_dict(_with_example(section, example))


def test_the_complete_example_loads(tmp_path):
  text = open(REFERENCE, encoding="utf-8").read()
  block = re.search(r"```yaml\n(.*?)```", text, re.S).group(1)
  (tmp_path / "pipeline.yaml").write_text(block)
  cfg = load_config(str(tmp_path / "pipeline.yaml"))
  assert cfg.names == ("web", "code") and cfg.stats_path == str(tmp_path / "run" / "stats.jsonl")


def test_performance_doc_lists_the_pipeline_knobs_with_their_true_defaults():
  """docs/performance.md's argument table: each argument's default as the signature has it."""
  text = open(os.path.join(REPO, "docs", "performance.md")).read()
  rows = dict(re.findall(r"^\| `(\w+)` \| ([^|]+?) \|", text, re.MULTILINE))
  parameters = inspect.signature(Pipeline).parameters
  assert set(rows) == {
    "prefetch",
    "making",
    "read_ahead_tokens",
    "read_threads",
    "wait_warning_s",
    "switch_interval_s",
  }
  for name, shown in rows.items():
    default = parameters[name].default
    expected = f"{default >> 20}M" if isinstance(default, int) and default >= 1 << 20 else str(default)
    assert shown == expected, f"{name}: docs say {shown}, the default is {default}"


def test_the_remote_doc_example_is_a_valid_streaming_config(tmp_path):
  text = open(os.path.join(REPO, "docs", "remote.md")).read()
  block = re.search(r"```yaml\n(.*?)```", text, re.S).group(1)
  (tmp_path / "pipeline.yaml").write_text(block)
  cfg = load_config(str(tmp_path / "pipeline.yaml"))
  assert [d.path for d in cfg.datasets][0] == "s3://my-bucket/corpora/web"
  assert {s.open_shards for s in cfg.dataset_settings()} == {8} and cfg.shuffle_block_size == 10_000
  assert cfg.cache_bytes == 64 << 30


def test_the_formats_doc_example_is_a_valid_window_config(tmp_path):
  text = open(os.path.join(REPO, "docs", "formats.md")).read()
  block = re.search(r"```yaml\n(.*?)```", text, re.S).group(1)
  (tmp_path / "pipeline.yaml").write_text(block)
  settings = {s.name: s for s in load_config(str(tmp_path / "pipeline.yaml")).dataset_settings()}
  assert (settings["web"].window, settings["web"].with_replacement) == (2048, True)
  assert (settings["books"].with_replacement, settings["books"].cross_documents) == (False, False)
  assert settings["code"].window is None


FENCE = re.compile(r"```\w*\n(.*?)```", re.S)
DOCUMENTS = ["README.md", *sorted(os.path.relpath(p, REPO) for p in glob.glob(os.path.join(REPO, "docs", "*.md")))]


def documented_command_lines() -> list[tuple[str, str]]:
  """(document, line) of every `jaxdata ...` line in a fenced block: `\\` continuations joined,
  `[optional]` parts dropped (usage notation), comments dropped by shlex."""
  found = []
  for document in DOCUMENTS:
    for block in FENCE.findall(open(os.path.join(REPO, document), encoding="utf-8").read()):
      for line in block.replace("\\\n", " ").splitlines():
        if line.startswith("jaxdata "):
          found.append((document, re.sub(r"\s\[[^\]]*\]", "", line)))
  return found


def test_the_documents_show_commands():
  assert len(documented_command_lines()) >= 20  # the extraction finds them (a broken pattern would find none)


@pytest.mark.parametrize("document,line", documented_command_lines())
def test_every_documented_command_line_parses(document, line, capsys):
  """Every flag and choice a document shows exists: a renamed flag fails here, not for a reader."""
  words = shlex.split(line, comments=True)[1:]
  try:
    build_parser().parse_args(words)
  except SystemExit as e:
    if e.code != 0:  # `--version` and `--help` exit 0
      pytest.fail(f"{document}: `{line}` does not parse: {capsys.readouterr().err.strip()}")


def test_the_state_listing_has_every_field_a_state_has(tmp_path):
  """docs/state.md's example state: the same keys as a real state, top level and stream, and every one
  explained in its table (`stream.next_step` and `stream.updates` were missing)."""
  text = open(os.path.join(REPO, "docs", "state.md")).read()
  listed = json.loads(re.search(r"```json\n(.*?)```", text, re.S).group(1))
  cfg = coded_config(tmp_path, [[5, 9, 3] * 20, [4, 6] * 20])
  with Pipeline(cfg, prefetch=0) as pipe:
    next(pipe)
    pipe.update_mixture({"d0": 3, "d1": 2})
    real = pipe.get_state()
  assert set(listed) == set(real) and set(listed["stream"]) == set(real["stream"])
  assert set(listed["packer"]) == set(real["packer"])
  explained = set(re.findall(r"^\| `([\w.]+)`", text, re.MULTILINE))
  for key in set(real["stream"]) - {"version", "unit", "interleave", "emitted", "tokens"}:
    assert f"stream.{key}" in explained, key


def test_the_state_guide_counts_the_matrix_as_it_is():
  import equivalence_matrix  # noqa: PLC0415 -- a test support module, imported where it is read

  text = " ".join(open(os.path.join(REPO, "docs", "state.md")).read().split())
  count = int(re.search(r"`tests/test_equivalence.py`\): (\d+) features", text).group(1))
  assert count == len(equivalence_matrix.FEATURES)
