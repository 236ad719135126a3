"""Raw inputs named in a config: converted once into a keyed cache, reused, rebuilt when anything that
decides the dataset changes (saying what), and the same batches as the dataset `jaxdata convert` writes."""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import chat_families as families
from jaxdata import ConfigError, ConvertOptions, DatasetError, Pipeline, PipelineConfig, convert, with_built_inputs
from jaxdata.conversion.tokenizers import TokenizerSpec
from pipeline_fixtures import worker_env


def write_jsonl(path, rows) -> None:
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, "w") as f:
    f.writelines(json.dumps(r) + "\n" for r in rows)


def texts(seed: int, count: int) -> list[dict]:
  rng = np.random.default_rng(seed)
  return [{"text": " ".join(f"w{j}" for j in rng.integers(0, 60, rng.integers(3, 50)))} for _ in range(count)]


def config(tmp_path, datasets, **top) -> PipelineConfig:
  raw = {
    "seed": 3,
    "datasets": datasets,
    "mixture": {"weights": {d["name"]: 1 + i for i, d in enumerate(datasets)}},
    "exhausted_policy": "repeat",
    "packing": {"mode": "best_fit", "seq_len": 96},
    "batch": {"global_batch_size": 4},
    "cache_dir": str(tmp_path / "cache"),
    **top,
  }
  return PipelineConfig.from_dict(raw)


def batches(cfg: PipelineConfig, count: int = 6, **kwargs) -> list[dict]:
  with Pipeline(cfg, prefetch=0, **kwargs) as pipe:
    return [{k: np.asarray(v).tolist() for k, v in next(pipe).items()} for _ in range(count)]


@pytest.fixture
def corpus(tmp_path):
  write_jsonl(str(tmp_path / "corpus" / "web.jsonl"), texts(0, 200))
  write_jsonl(str(tmp_path / "corpus" / "code-a.jsonl"), texts(1, 80))
  write_jsonl(str(tmp_path / "corpus" / "code-b.jsonl"), texts(2, 80))
  return tmp_path / "corpus"


def test_raw_inputs_give_the_batches_of_the_converted_dataset_and_the_cache_is_reused(tmp_path, corpus, caplog):
  raw = [
    {"name": "web", "inputs": str(corpus / "web.jsonl"), "tokenizer": "byte"},
    {"name": "code", "inputs": [str(corpus / "code-*.jsonl")], "tokenizer": "byte", "convert": {"compression": "none"}},
  ]
  caplog.set_level(logging.INFO, logger="jaxdata")
  first = batches(config(tmp_path, raw))
  assert "web: converting its 1 input files into a cache (the first time)" in caplog.text
  convert([str(corpus / "web.jsonl")], str(tmp_path / "web"), "web", ConvertOptions(workers=1))
  convert(
    [str(corpus / "code-a.jsonl"), str(corpus / "code-b.jsonl")],
    str(tmp_path / "code"),
    "code",
    ConvertOptions(workers=1, compression="none"),
  )
  converted = [{"name": "web", "path": str(tmp_path / "web")}, {"name": "code", "path": str(tmp_path / "code")}]
  assert batches(config(tmp_path, converted)) == first  # the same dataset, the same batches
  caplog.clear()
  with Pipeline(config(tmp_path, raw), prefetch=2) as pipe:  # a second run: the cache, no conversion
    state = None
    for step in range(6):
      if step == 3:
        state = pipe.get_state()
      assert {k: np.asarray(v).tolist() for k, v in next(pipe).items()} == first[step]
  assert "convert" not in caplog.text
  with Pipeline(config(tmp_path, converted), prefetch=0) as pipe:  # a state restores across the two spellings
    pipe.set_state(state)
    assert [{k: np.asarray(v).tolist() for k, v in next(pipe).items()} for _ in range(3)] == first[3:]


def test_a_change_of_inputs_tokenizer_or_options_builds_a_new_cache_and_says_why(tmp_path, corpus, caplog):
  caplog.set_level(logging.INFO, logger="jaxdata")
  raw = [{"name": "web", "inputs": str(corpus / "web.jsonl"), "tokenizer": "byte"}]
  before = batches(config(tmp_path, raw), 2)
  write_jsonl(str(corpus / "web.jsonl"), texts(9, 150))
  caplog.clear()
  after = batches(config(tmp_path, raw), 2)
  assert after != before and f"web: converting again: {corpus / 'web.jsonl'} changed (size" in caplog.text
  caplog.clear()
  raw[0]["convert"] = {"field": "text", "compression": "snappy"}
  batches(config(tmp_path, raw), 1)
  assert "web: converting again: the options changed" in caplog.text
  built = sorted(n for n in os.listdir(tmp_path / "cache" / "datasets") if n.startswith("web-") and "." not in n)
  assert len(built) == 3  # one cache per key; none is reused for other inputs


def test_chat_examples_from_raw_inputs_are_the_converted_examples(tmp_path):
  tokenizer = families.build_tokenizer(str(tmp_path / "tok"))
  tokenizer.save_pretrained(str(tmp_path / "tok"))
  (tmp_path / "t.jinja").write_text(families.CHATML_PLAIN)
  rows = [
    {"messages": [{"role": "user", "content": f"Question {i}?"}, {"role": "assistant", "content": f"Answer {i}."}]}
    for i in range(60)
  ]
  write_jsonl(str(tmp_path / "chat.jsonl"), rows)
  options = {"examples": "chat", "chat_template": str(tmp_path / "t.jinja")}
  raw = [
    {"name": "chat", "inputs": str(tmp_path / "chat.jsonl"), "tokenizer": f"hf:{tmp_path / 'tok'}", "convert": options}
  ]
  converted_options = ConvertOptions(tokenizer=TokenizerSpec.parse(f"hf:{tmp_path / 'tok'}"), workers=1, **options)
  convert([str(tmp_path / "chat.jsonl")], str(tmp_path / "chat"), "chat", converted_options)
  converted = [{"name": "chat", "path": str(tmp_path / "chat")}]
  assert batches(config(tmp_path, raw)) == batches(config(tmp_path, converted))


def _build(path: str) -> None:
  cfg = PipelineConfig.from_dict(json.load(open(path)))
  with Pipeline(cfg, prefetch=0) as pipe:
    next(pipe)


def test_two_runs_building_one_cache_at_once_build_it_once(tmp_path, corpus):
  raw = [{"name": "web", "inputs": str(corpus / "web.jsonl"), "tokenizer": "byte", "convert": {"workers": 1}}]
  (tmp_path / "cfg.json").write_text(json.dumps(config(tmp_path, raw).to_dict()))
  context = multiprocessing.get_context("spawn")
  runs = [context.Process(target=_build, args=(str(tmp_path / "cfg.json"),)) for _ in range(2)]
  for run in runs:
    run.start()
  for run in runs:
    run.join(120)
    assert run.exitcode == 0
  entries = os.listdir(tmp_path / "cache" / "datasets")
  assert len([n for n in entries if n.startswith("web-") and not n.endswith(".lock")]) == 1
  assert not [n for n in entries if ".building-" in n]


def test_a_build_that_fails_leaves_no_cache_and_bad_entries_are_named(tmp_path, corpus):
  bad = tmp_path / "bad.jsonl"
  bad.write_text('{"text": "fine"}\n{"text": \n')
  raw = [{"name": "web", "inputs": str(bad), "tokenizer": "byte"}]
  with pytest.raises(Exception, match="bad.jsonl:2"):
    batches(config(tmp_path, raw), 1)
  assert not [n for n in os.listdir(tmp_path / "cache" / "datasets") if n.startswith("web-") and "." not in n]
  assert not [n for n in os.listdir(tmp_path / "cache" / "datasets") if ".building-" in n]
  for entry, message in (
    ({"inputs": str(corpus / "web.jsonl")}, "datasets.web.tokenizer: raw inputs need a tokenizer"),
    (
      {"inputs": str(corpus / "web.jsonl"), "path": "data/web", "tokenizer": "byte"},
      "give path .* or inputs .*, not both",
    ),
    ({"path": "data/web", "tokenizer": "byte"}, "datasets.web.tokenizer: applies to raw inputs"),
    (
      {"inputs": str(corpus / "nothing*.jsonl"), "tokenizer": "byte"},
      "datasets.web.inputs: .* the glob must match a file",
    ),
    (
      {"inputs": str(corpus / "web.jsonl"), "tokenizer": "byte", "convert": {"feild": "x"}},
      r"datasets.web.convert.feild: not an option",
    ),
    (
      {"inputs": str(corpus / "web.jsonl"), "tokenizer": "byte", "convert": {"examples": "poems"}},
      r"datasets.web.convert: examples",
    ),
    (
      {"inputs": str(corpus / "web.jsonl"), "tokenizer": f"hf:{tmp_path / 'none'}"},
      "datasets.web.tokenizer: .*none does not exist",
    ),
  ):
    with pytest.raises(ConfigError, match=message):
      batches(config(tmp_path, [{"name": "web", **entry}]), 1)


def test_inputs_too_large_to_convert_in_place_print_the_command_that_builds_the_same_cache(tmp_path, corpus):
  import shlex  # noqa: PLC0415

  from jaxdata.cli import main  # noqa: PLC0415

  raw = [
    {"name": "web", "inputs": str(corpus / "web.jsonl"), "tokenizer": "byte", "convert": {"compression": "none"}},
  ]
  with pytest.raises(ConfigError, match="more than inputs_max_bytes") as refused:
    batches(config(tmp_path, raw, inputs_max_bytes=1000), 1)
  command = str(refused.value).split("then run again: ")[1]
  words = shlex.split(command)
  assert words[:2] == ["jaxdata", "convert"] and "--runner" in words and "--compression" in words
  words[words.index("--runner") + 1] = "local"  # the same command on the local runner: the same cache
  assert main(words[1:] + ["-q", "--workers", "1"]) == 0
  assert len(batches(config(tmp_path, raw, inputs_max_bytes=1000), 2)) == 2  # found, not converted again


def test_maxtexts_dataset_type_hf_reads_local_parquet_through_the_cache(tmp_path):
  """MaxText's hf keys (hf_path parquet, hf_train_files, train_data_columns, tokenizer_path) give the batches of
  the same files converted with the same tokenizer and column."""
  import pyarrow as pa  # noqa: PLC0415 -- the parquet extra, which the test extra installs
  import pyarrow.parquet as pq  # noqa: PLC0415

  from jaxdata.integrations.maxtext import maxtext_config  # noqa: PLC0415

  tokenizer = families.build_tokenizer(str(tmp_path / "tok"))
  tokenizer.save_pretrained(str(tmp_path / "tok"))
  os.makedirs(tmp_path / "pq")
  for i in range(2):
    rows = [{"content": r["text"].replace("w", "word ")} for r in texts(i, 120)]
    pq.write_table(pa.Table.from_pylist(rows), str(tmp_path / "pq" / f"part-{i}.parquet"))
  values = {
    "dataset_type": "hf",
    "hf_path": "parquet",
    "hf_train_files": str(tmp_path / "pq" / "*.parquet"),
    "train_data_columns": ["content"],
    "tokenizer_path": str(tmp_path / "tok"),
    "max_target_length": 64,
    "global_batch_size_to_load": 4,
    "add_bos": False,
    "add_eos": False,
  }
  cfg = maxtext_config(values, cache_dir=str(tmp_path / "cache"))
  got = batches(cfg, 3)
  options = ConvertOptions(tokenizer=TokenizerSpec.parse(f"hf:{tmp_path / 'tok'}"), field="content", workers=1)
  convert([str(tmp_path / "pq" / "*.parquet")], str(tmp_path / "converted"), "hf", options)
  raw = cfg.to_dict()
  raw["datasets"] = [{"name": "hf", "path": str(tmp_path / "converted")}]
  assert batches(PipelineConfig.from_dict(raw), 3) == got
  for bad, message in (
    ({"hf_path": "allenai/c4"}, "hf_path: 'allenai/c4' is not a local file or directory"),
    ({"hf_train_files": None}, "hf_train_files: hf_path 'parquet' names a format; give the files"),
    ({"tokenizer_path": None}, "tokenizer_path: dataset_type hf converts text"),
  ):
    with pytest.raises(ConfigError, match=message):
      maxtext_config({**values, **bad})


@pytest.mark.slow
@pytest.mark.integration
def test_the_ray_runner_writes_the_local_runners_dataset_byte_for_byte(tmp_path, corpus, monkeypatch, capfd):
  """`jaxdata convert --runner ray` on a Ray started here (127.0.0.1): every file the local runner writes, the same
  bytes (chat examples with masks, preference-free; several shards and units)."""
  import hashlib  # noqa: PLC0415

  from jaxdata.cli import main  # noqa: PLC0415

  inputs = [str(corpus / "web.jsonl"), str(corpus / "code-a.jsonl"), str(corpus / "code-b.jsonl")]
  common = ["--name", "web", "--shard-size", "4KB", "--compression", "none", "-q"]
  assert main(["convert", *inputs, "--out", str(tmp_path / "local"), "--workers", "2", *common]) == 0
  monkeypatch.delenv("RAY_ADDRESS", raising=False)  # a fresh local Ray, not one a developer's shell points at
  assert main(["convert", *inputs, "--out", str(tmp_path / "ray"), "--runner", "ray", *common]) == 0

  def files(directory):
    return {n: hashlib.sha256(open(os.path.join(directory, n), "rb").read()).hexdigest() for n in os.listdir(directory)}

  local, ray = files(tmp_path / "local"), files(tmp_path / "ray")
  assert len(local) > 4 and local == ray
  (tmp_path / "bad.jsonl").write_text('{"text": "fine"}\n{"text": \n')
  assert main(["convert", str(tmp_path / "bad.jsonl"), "--out", str(tmp_path / "bad"), "--runner", "ray", *common]) == 1
  said = capfd.readouterr().err
  assert "bad.jsonl:2" in said and "Traceback" not in said  # the task's error, one line, as the local runner says it


def test_a_file_that_changes_while_it_is_converted_is_named_and_nothing_is_cached(tmp_path, corpus, monkeypatch):
  """Another process appending to an input during the build (here: right after the conversion reads it)."""
  from jaxdata.conversion import input_cache  # noqa: PLC0415

  real = input_cache.build_part

  def convert_while_the_file_grows(*args, **kwargs):
    manifest = real(*args, **kwargs)
    with open(corpus / "web.jsonl", "a") as f:
      f.write(json.dumps({"text": "a late line"}) + "\n")
    return manifest

  monkeypatch.setattr(input_cache, "build_part", convert_while_the_file_grows)
  raw = [{"name": "web", "inputs": str(corpus / "web.jsonl"), "tokenizer": "byte"}]
  with pytest.raises(Exception, match=r"web: inputs changed while they were converted \(.*web.jsonl changed"):
    batches(config(tmp_path, raw), 1)
  assert not [n for n in os.listdir(tmp_path / "cache" / "datasets") if n.startswith("web-") and "." not in n]
  monkeypatch.setattr(input_cache, "build_part", real)
  assert len(batches(config(tmp_path, raw), 1)) == 1  # stable again: built, and the late line in it


def _build_as(path: str, index: int, count: int, wait_s: float) -> subprocess.CompletedProcess:
  env = {**worker_env(), "JAXDATA_PROCESS_INDEX": str(index), "JAXDATA_PROCESS_COUNT": str(count)}
  env["JAXDATA_BUILD_WAIT_S"] = str(wait_s)
  code = (
    "import json, logging, sys, jaxdata\n"
    "logging.basicConfig(level=logging.INFO, stream=sys.stdout, format='%(message)s')\n"
    f"cfg = jaxdata.PipelineConfig.from_dict(json.load(open({path!r})))\n"
    "with jaxdata.Pipeline(cfg, prefetch=0) as pipe:\n"
    "  print('first batch', int(next(pipe)['tokens'].sum()))\n"
  )
  return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
@pytest.mark.multiprocess
def test_processes_divide_one_build_and_a_stopped_one_resumes_from_its_finished_units(tmp_path, corpus):
  """JAXDATA_PROCESS_INDEX / _COUNT (a pod's hosts sharing cache_dir): each tokenizes its share; process 0 seals the
  cache; a process whose partner never came stops naming it, keeps its units, and resumes after."""
  raw = [
    {
      "name": "web",
      "inputs": str(corpus / "web.jsonl"),
      "tokenizer": "byte",
      "convert": {"workers": 1, "unit_bytes": 2048},
    }
  ]
  (tmp_path / "cfg.json").write_text(json.dumps(config(tmp_path, raw).to_dict()))
  alone = _build_as(str(tmp_path / "cfg.json"), 0, 2, 3)  # process 1 never comes
  assert alone.returncode != 0 and "processes not done after 3 s" in alone.stderr and "processes [1]" in alone.stderr
  with ThreadPoolExecutor(2) as pool:
    both = list(pool.map(lambda i: _build_as(str(tmp_path / "cfg.json"), i, 2, 120), (0, 1)))
  assert [run.returncode for run in both] == [0, 0], both[0].stderr[-2000:] + both[1].stderr[-2000:]
  assert "resuming" in both[0].stdout  # its units from the stopped run were kept
  assert "units (100%)" in both[1].stdout and "tokenized" in both[1].stdout  # process 1 did its share
  assert both[0].stdout.splitlines()[-1] == both[1].stdout.splitlines()[-1]  # the same first batch
  converted = [{"name": "web", "path": str(tmp_path / "web")}]
  convert([str(corpus / "web.jsonl")], str(tmp_path / "web"), "web", ConvertOptions(workers=1))
  assert batches(config(tmp_path, raw), 3) == batches(config(tmp_path, converted), 3)
  assert not [n for n in os.listdir(tmp_path / "cache" / "datasets") if n.endswith((".units", ".building"))]


@pytest.mark.slow
@pytest.mark.integration
def test_raw_inputs_in_buckets_are_converted_once_and_a_changed_object_converts_again(tmp_path, corpus, caplog):
  """gs:// and s3:// inputs on the local emulators: the batches of the same files converted locally; the cache is
  reused while the objects stay, and rebuilt (saying which) when one is replaced."""
  import object_store  # noqa: PLC0415 -- the tests' local object stores

  caplog.set_level(logging.INFO, logger="jaxdata")
  convert([str(corpus / "web.jsonl")], str(tmp_path / "web"), "web", ConvertOptions(workers=1))
  local = batches(config(tmp_path, [{"name": "web", "path": str(tmp_path / "web")}]), 3)
  for stores in object_store.servers():
    for scheme, server in stores.items():
      url = server.upload(str(corpus), "raw-inputs", scheme)
      raw = [{"name": "web", "inputs": f"{url}/web.jsonl", "tokenizer": "byte"}]
      cfg = config(tmp_path, raw, cache_dir=str(tmp_path / f"cache-{scheme}"))
      assert batches(cfg, 3) == local
      caplog.clear()
      assert batches(cfg, 3) == local and "convert" not in caplog.text  # found by its key
      server.put(f"{url}/web.jsonl", (corpus / "web.jsonl").read_bytes() + b'{"text": "one more"}\n')
      assert len(batches(cfg, 1)) == 1 and f"web: converting again: {url}/web.jsonl changed" in caplog.text


@pytest.mark.slow
@pytest.mark.integration
def test_a_cache_in_a_bucket_is_built_once_published_manifest_last_and_opened_by_hosts_without_it(
  tmp_path, corpus, caplog, monkeypatch
):
  """inputs_cache: gs:// / s3:// (hosts that share no disk): process 0 converts on its own disk and uploads, the
  manifest last; another host (its own empty cache_dir) opens the bucket's copy without converting; a copy whose
  manifest never arrived is published again from the local cache; a host waiting for process 0 names the URL."""
  import object_store  # noqa: PLC0415 -- the tests' local object stores

  caplog.set_level(logging.INFO, logger="jaxdata")
  convert([str(corpus / "web.jsonl")], str(tmp_path / "web"), "web", ConvertOptions(workers=1))
  local = batches(config(tmp_path, [{"name": "web", "path": str(tmp_path / "web")}]), 3)
  raw = [{"name": "web", "inputs": str(corpus / "web.jsonl"), "tokenizer": "byte", "convert": {"workers": 1}}]
  for stores in object_store.servers():
    for scheme, server in stores.items():
      bucket = server.upload(str(corpus), "caches", "made") + "/runs"  # the bucket exists
      monkeypatch.setenv("JAXDATA_PROCESS_COUNT", "2")
      monkeypatch.setenv("JAXDATA_PROCESS_INDEX", "1")
      monkeypatch.setenv("JAXDATA_BUILD_WAIT_S", "1")
      waiting = config(tmp_path, raw, cache_dir=str(tmp_path / f"host1-{scheme}"), inputs_cache=bucket)
      with pytest.raises(DatasetError, match=f"process 0 did not publish the cache {bucket}/web-"):
        with_built_inputs(waiting)
      monkeypatch.setenv("JAXDATA_PROCESS_INDEX", "0")
      too_large = config(tmp_path, raw, inputs_cache=bucket, inputs_max_bytes=10)
      with pytest.raises(ConfigError, match=f"more than inputs_max_bytes .* --out {bucket}/web-[0-9a-f]{{16}} "):
        with_built_inputs(too_large)  # the engine's command writes the bucket's copy itself
      host0 = config(tmp_path, raw, cache_dir=str(tmp_path / f"host0-{scheme}"), inputs_cache=bucket)
      caplog.clear()
      path = with_built_inputs(host0).datasets[0].path
      assert path.startswith(f"{bucket}/web-") and "converting its 1 input files" in caplog.text
      assert batches(host0, 3) == local
      monkeypatch.setenv("JAXDATA_PROCESS_INDEX", "1")
      caplog.clear()
      assert batches(waiting, 3) == local and "convert" not in caplog.text  # the bucket's copy, read remotely
      assert not os.path.exists(tmp_path / f"host1-{scheme}" / "datasets")  # nothing built on that host
      server.put(f"{path}/manifest.json", b"")  # an upload cut short: objects there, no valid seal ...
      _remove(server, f"{path}/manifest.json")  # ... and no manifest at all
      monkeypatch.setenv("JAXDATA_PROCESS_INDEX", "0")
      caplog.clear()
      assert batches(host0, 3) == local
      assert "publishing the cache" in caplog.text and "converting" not in caplog.text  # from the local cache


def _remove(server, url: str) -> None:
  bucket, _, key = url.split("://", 1)[1].partition("/")
  if server.scheme == "s3":
    server.client().delete_object(Bucket=bucket, Key=key)
  else:
    server.client().bucket(bucket).blob(key).delete()


def test_review_cases_include_globs_tokenizer_neighbours_and_paths_relative_to_the_config(
  tmp_path, corpus, caplog, monkeypatch
):
  """A string include is one glob; a tokenizer named by its file is keyed with tokenizer_config.json beside it (the
  special ids); a config's template and tokenizer files are taken from its directory, whatever the cwd."""
  (corpus / "notes.txt").write_text("not a jsonl file\n")
  raw = [{"name": "web", "inputs": str(corpus), "tokenizer": "byte", "convert": {"include": "*web.jsonl"}}]
  convert([str(corpus / "web.jsonl")], str(tmp_path / "web"), "web", ConvertOptions(workers=1))
  assert batches(config(tmp_path, raw), 2) == batches(
    config(tmp_path, [{"name": "web", "path": str(tmp_path / "web")}]), 2
  )

  tokenizer = families.build_tokenizer(str(tmp_path / "tok"))
  tokenizer.save_pretrained(str(tmp_path / "tok"))
  raw = [{"name": "web", "inputs": str(corpus / "web.jsonl"), "tokenizer": f"hf:{tmp_path / 'tok' / 'tokenizer.json'}"}]
  batches(config(tmp_path, raw), 1)
  settings = json.loads((tmp_path / "tok" / "tokenizer_config.json").read_text())
  settings["eos_token"] = settings.get("bos_token") or "<unk>"
  (tmp_path / "tok" / "tokenizer_config.json").write_text(json.dumps(settings))
  caplog.set_level(logging.INFO, logger="jaxdata")
  caplog.clear()
  batches(config(tmp_path, raw), 1)
  assert "web: converting again: the tokenizer changed" in caplog.text

  (tmp_path / "t.jinja").write_text(families.CHATML_PLAIN)
  write_jsonl(
    str(tmp_path / "chat.jsonl"),
    [{"messages": [{"role": "user", "content": "Hi?"}, {"role": "assistant", "content": "Yes."}]}] * 20,
  )
  (tmp_path / "raw.yaml").write_text(
    json.dumps(
      {
        "datasets": [
          {
            "name": "chat",
            "inputs": "chat.jsonl",
            "tokenizer": "tok/tokenizer.json",
            "convert": {"examples": "chat", "chat_template": "t.jinja"},
          }
        ],
        "mixture": {"weights": {"chat": 1}},
        "exhausted_policy": "repeat",
        "packing": {"seq_len": 64},
        "batch": {"global_batch_size": 2},
        "cache_dir": "cache",
      }
    )
  )
  elsewhere = tmp_path / "elsewhere"
  elsewhere.mkdir()
  monkeypatch.chdir(elsewhere)
  from jaxdata import load_config  # noqa: PLC0415

  cfg = load_config(str(tmp_path / "raw.yaml"))
  assert cfg.datasets[0].tokenizer == str(tmp_path / "tok" / "tokenizer.json")
  assert cfg.datasets[0].convert["chat_template"] == str(tmp_path / "t.jinja")
  assert len(batches(cfg, 1)) == 1


def test_maxtexts_hf_text_is_a_row_a_line_and_a_directory_gives_its_data_files(tmp_path):
  from jaxdata.integrations.maxtext import maxtext_config  # noqa: PLC0415

  (tmp_path / "lines.txt").write_text("".join(f"line number {i}\n" for i in range(100)))
  values = {
    "dataset_type": "hf",
    "hf_path": "text",
    "hf_train_files": str(tmp_path / "lines.txt"),
    "tokenizer_path": "x.model",
    "global_batch_size_to_load": 4,
  }
  entry = maxtext_config(values, check_paths=False).datasets[0]
  assert entry.convert["text_mode"] == "line"
  (tmp_path / "hub").mkdir()
  (tmp_path / "hub" / "README.md").write_text("# card\n")
  directory = maxtext_config({**values, "hf_path": str(tmp_path / "hub"), "hf_train_files": None}).datasets[0]
  assert "*.parquet" in directory.convert["include"] and directory.inputs == (str(tmp_path / "hub"),)
  (tmp_path / "hub" / "data-00000-of-00001.arrow").write_bytes(b"")
  with pytest.raises(ConfigError, match="is a save_to_disk directory"):
    maxtext_config({**values, "hf_path": str(tmp_path / "hub"), "hf_train_files": None})


def test_cache_dir_must_be_local_and_inputs_cache_names_a_bucket_or_a_directory(tmp_path, corpus):
  """cache_dir is where remote shards are copied (local); a bucket for raw inputs' caches is inputs_cache's."""
  raw = [{"name": "web", "inputs": str(corpus / "web.jsonl"), "tokenizer": "byte"}]
  with pytest.raises(ConfigError, match="cache_dir: gs://b/c is a bucket.*inputs_cache"):
    config(tmp_path, raw, cache_dir="gs://b/c")
  with pytest.raises(ConfigError, match="inputs_cache: expected a directory path"):
    config(tmp_path, raw, inputs_cache="")
  shared = tmp_path / "shared-disk"
  path = with_built_inputs(config(tmp_path, raw, inputs_cache=str(shared))).datasets[0].path
  assert os.path.dirname(path) == str(shared) and os.path.isfile(os.path.join(path, "manifest.json"))


def test_maxtext_pipeline_runs_dataset_type_hf_and_names_a_missing_bos(tmp_path, monkeypatch):
  """`MaxTextPipeline` with `dataset_type: hf` gives maxtext_config + Pipeline's batches; add_bos (MaxText's
  default) with a Hugging Face tokenizer that has no BOS says so, naming tokenizer_path."""
  from jaxdata.integrations.maxtext import MAXTEXT_FEATURES, MaxTextPipeline, maxtext_batch, maxtext_config  # noqa: PLC0415

  monkeypatch.setenv("JAXDATA_CACHE_DIR", str(tmp_path / "cache"))
  tokenizer = families.build_tokenizer(str(tmp_path / "tok"))
  tokenizer.save_pretrained(str(tmp_path / "tok"))
  (tmp_path / "raw").mkdir()
  (tmp_path / "raw" / "a.jsonl").write_text("".join(json.dumps({"text": r["text"]}) + "\n" for r in texts(0, 80)))
  values = {
    "dataset_type": "hf",
    "hf_path": str(tmp_path / "raw"),
    "tokenizer_path": str(tmp_path / "tok"),
    "max_target_length": 32,
    "global_batch_size_to_load": 2,
    "add_bos": False,
    "add_eos": False,
  }
  with Pipeline(maxtext_config(values), prefetch=0) as pipe:
    expected = [maxtext_batch(next(pipe), 0) for _ in range(3)]
  with MaxTextPipeline(values, prefetch=0) as pipe:
    got = [next(pipe) for _ in range(3)]
  for a, b in zip(got, expected):
    assert all(np.array_equal(np.asarray(a[k]), np.asarray(b[k])) for k in MAXTEXT_FEATURES)
  with pytest.raises(
    ConfigError,
    match=r"add_bos: true, but no packing.bos_id is given and the datasets. tokenizer \(huggingface, tokenizer.json, recorded in their manifests\) has no BOS token",
  ):
    MaxTextPipeline({**values, "add_bos": True})


def test_maxtexts_sft_and_dpo_configs_run_from_raw_files(tmp_path, monkeypatch):
  """MaxText's sft.yml (`use_sft`, `train_data_columns: ['messages']`) and dpo.yml (`use_dpo`,
  `train_data_columns: ['chosen', 'rejected']`, Anthropic HH's whole texts) with dataset_type hf on local
  files, base.yml's `hf_train_files: ''` beside them: SFT gives the batches of the files converted as chat,
  DPO one pair a row, each side whole."""
  from jaxdata.integrations.maxtext import MaxTextPipeline, maxtext_config  # noqa: PLC0415

  monkeypatch.setenv("JAXDATA_CACHE_DIR", str(tmp_path / "cache"))
  tokenizer = families.build_tokenizer(str(tmp_path / "tok"))
  tokenizer.save_pretrained(str(tmp_path / "tok"))
  (tmp_path / "chat.jinja").write_text(families.without_blocks(families.CHATML))
  (tmp_path / "sft").mkdir()
  conversations = [
    {"messages": [{"role": "user", "content": f"question {i}"}, {"role": "assistant", "content": f"answer {i}"}]}
    for i in range(40)
  ]
  (tmp_path / "sft" / "train.jsonl").write_text("".join(json.dumps(c) + "\n" for c in conversations))
  sft = {
    "dataset_type": "hf",
    "hf_path": str(tmp_path / "sft"),
    "hf_train_files": "",
    "train_data_columns": ["messages"],
    "use_sft": True,
    "sft_train_on_completion_only": True,
    "chat_template_path": str(tmp_path / "chat.jinja"),
    "tokenizer_path": str(tmp_path / "tok"),
    "max_target_length": 64,
    "global_batch_size_to_load": 2,
    "add_bos": False,
    "add_eos": False,
  }
  got = batches(maxtext_config(sft), 3)
  options = ConvertOptions(
    tokenizer=TokenizerSpec.parse(f"hf:{tmp_path / 'tok'}"),
    examples="chat",
    field="messages",
    chat_template=str(tmp_path / "chat.jinja"),
    workers=1,
  )
  convert([str(tmp_path / "sft" / "train.jsonl")], str(tmp_path / "converted"), "hf", options)
  raw = maxtext_config(sft).to_dict()
  raw["datasets"] = [{"name": "hf", "path": str(tmp_path / "converted")}]
  assert batches(PipelineConfig.from_dict(raw), 3) == got
  (tmp_path / "dpo").mkdir()
  pairs = [
    {
      "chosen": f"\n\nHuman: is {i} even?\n\nAssistant: yes",
      "rejected": f"\n\nHuman: is {i} even?\n\nAssistant: no idea",
    }
    for i in range(0, 40, 2)
  ]
  (tmp_path / "dpo" / "train.jsonl").write_text("".join(json.dumps(p) + "\n" for p in pairs))
  dpo = {**sft, "hf_path": str(tmp_path / "dpo"), "train_data_columns": ["chosen", "rejected"], "use_dpo": True}
  del dpo["use_sft"], dpo["sft_train_on_completion_only"], dpo["chat_template_path"]
  with MaxTextPipeline(dpo, prefetch=0) as pipe:
    batch = next(pipe)
  for side in ("chosen", "rejected"):
    assert (np.asarray(batch[f"{side}_segmentation"]).max(axis=1) == 1).all()  # one pair a row
  chosen = tokenizer.decode([t for t in np.asarray(batch["chosen"])[0].tolist() if t])
  assert "Human: is" in chosen and chosen.endswith("Assistant: yes")
