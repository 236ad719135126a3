"""The raw inputs' cache as a user meets it: what its key reads (sampled or every byte), a template edit
that rebuilds only what renders it, a cache inside its own input directory, a half-removed cache, the
caches listed and pruned with their sizes, and a build's progress in a script that set up no logging."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import textwrap

import pytest

import chat_families as families
from jaxdata import ConfigError, PipelineConfig, with_built_inputs
from jaxdata.cli import main
from jaxdata.conversion.cache_listing import cached_datasets, prune_caches
from jaxdata.conversion.input_files import CACHE_TAG
from jaxdata.conversion.ray_runner import check_ray_address
from jaxdata.sources.fileutil import SAMPLE_BLOCK, SAMPLE_BLOCKS
from pipeline_fixtures import worker_env
from test_raw_inputs import batches, config, texts, write_jsonl


@pytest.fixture
def corpus(tmp_path):
  write_jsonl(str(tmp_path / "corpus" / "web.jsonl"), texts(0, 300))
  return tmp_path / "corpus"


def built(cfg: PipelineConfig) -> dict[str, str]:
  return {d.name: d.path for d in with_built_inputs(cfg, log=lambda m: None).datasets}


def test_the_key_samples_a_file_unless_asked_to_hash_every_byte(tmp_path, corpus):
  web = corpus / "big.jsonl"
  write_jsonl(str(web), texts(5, 4000))  # ~500 KB: the 16 sampled blocks of 4 KiB leave gaps
  raw = [{"name": "web", "inputs": str(web), "tokenizer": "byte"}]
  sampled, full = config(tmp_path, raw), config(tmp_path, raw, inputs_hash="full")
  before = built(sampled)["web"], built(full)["web"]
  # one byte changed between the sampled blocks, with the size and modification time put back
  data, stat = bytearray(web.read_bytes()), os.stat(web)
  last = len(data) - SAMPLE_BLOCK
  gap = last // (SAMPLE_BLOCKS - 1) // 2 + SAMPLE_BLOCK  # past the first block, before the second
  assert SAMPLE_BLOCK < gap < last // (SAMPLE_BLOCKS - 1)
  middle = next(i for i in range(gap, len(data)) if data[i : i + 1] == b"w")  # a letter of a word, not JSON
  data[middle : middle + 1] = b"x"
  web.write_bytes(bytes(data))
  os.utime(web, ns=(stat.st_atime_ns, stat.st_mtime_ns))
  assert built(sampled)["web"] == before[0]  # as docs/configuration.md says: an edit between the blocks is not seen
  assert built(full)["web"] != before[1]  # every byte: a new cache
  with pytest.raises(Exception, match="inputs_hash: 'all' is not one of sampled, full"):
    config(tmp_path, raw, inputs_hash="all")


def test_a_template_edit_rebuilds_the_datasets_that_render_it_not_all_that_share_the_tokenizer(tmp_path):
  tokenizer = families.build_tokenizer(str(tmp_path / "tok"))
  tokenizer.chat_template = families.CHATML_PLAIN
  tokenizer.save_pretrained(str(tmp_path / "tok"))
  rows = [
    {"messages": [{"role": "user", "content": f"Q {i}?"}, {"role": "assistant", "content": f"A {i}."}]}
    for i in range(40)
  ]
  write_jsonl(str(tmp_path / "chat.jsonl"), rows)
  write_jsonl(str(tmp_path / "web.jsonl"), texts(1, 40))
  hf = f"hf:{tmp_path / 'tok'}"
  raw = [
    {"name": "chat", "inputs": str(tmp_path / "chat.jsonl"), "tokenizer": hf, "convert": {"examples": "chat"}},
    {"name": "web", "inputs": str(tmp_path / "web.jsonl"), "tokenizer": hf},
  ]
  cfg = config(tmp_path, raw)
  before = built(cfg)
  template_files = [p for p in os.listdir(tmp_path / "tok") if p in ("chat_template.jinja", "tokenizer_config.json")]
  assert template_files  # where transformers saved the template
  tokenizer.chat_template = families.CHATML_PLAIN.replace("<|im_end|>", "<|im_end|> ")
  tokenizer.save_pretrained(str(tmp_path / "tok"))
  after = built(cfg)
  assert after["chat"] != before["chat"]  # it renders the template
  assert after["web"] == before["web"]  # text: the template never reaches it


def test_a_cache_inside_its_own_input_directory_is_not_read_as_inputs(tmp_path, corpus):
  raw = [{"name": "web", "inputs": str(corpus), "tokenizer": "byte", "convert": {"input_format": "jsonl"}}]
  cfg = config(tmp_path, raw, cache_dir=str(corpus / "cache"))
  first = built(cfg)["web"]
  assert os.path.isfile(corpus / "cache" / "datasets" / CACHE_TAG)
  manifest = json.loads(open(os.path.join(first, "manifest.json")).read())
  assert [os.path.basename(f["path"]) for f in manifest["stats"]["inputs"]] == ["web.jsonl"]  # not its own shards
  assert built(cfg)["web"] == first  # and the key does not change with the cache in it


def test_a_half_removed_cache_is_built_again(tmp_path, corpus):
  raw = [{"name": "web", "inputs": str(corpus / "web.jsonl"), "tokenizer": "byte"}]
  cfg = config(tmp_path, raw)
  first = batches(cfg, 2)
  path = built(cfg)["web"]
  os.remove(os.path.join(path, "manifest.json"))  # it failed with "OSError: Directory not empty"
  assert batches(cfg, 2) == first
  assert os.path.isfile(os.path.join(path, "manifest.json"))


def test_caches_are_listed_with_sizes_and_the_stale_pruned(tmp_path, corpus, capsys):
  raw = [{"name": "web", "inputs": str(corpus / "web.jsonl"), "tokenizer": "byte"}]
  old = built(config(tmp_path, raw))["web"]
  current = built(config(tmp_path, [{**raw[0], "convert": {"compression": "none"}}]))["web"]
  root = str(tmp_path / "cache" / "datasets")
  os.makedirs(os.path.join(root, "web-0123456789abcdef"))  # half removed: no manifest
  states = {os.path.basename(c.path): c.state for c in cached_datasets(root)}
  assert states == {
    os.path.basename(old): "superseded",
    os.path.basename(current): "current",
    "web-0123456789abcdef": "incomplete",
  }
  sizes = {os.path.basename(c.path): c.size for c in cached_datasets(root)}
  assert sizes[os.path.basename(current)] == sum(os.path.getsize(os.path.join(current, n)) for n in os.listdir(current))
  assert main(["cache", "list", "--cache-dir", str(tmp_path / "cache")]) == 0
  out = capsys.readouterr().out
  assert "superseded" in out and "3 entries" in out and "2 stale" in out
  assert sorted(c.state for c in prune_caches(root, dry_run=True)) == ["incomplete", "superseded"]
  assert os.path.isdir(old)  # a dry run removes nothing
  assert main(["cache", "prune", "--cache-dir", str(tmp_path / "cache")]) == 0
  assert "removed 2 entries" in capsys.readouterr().out
  assert [os.path.basename(c.path) for c in cached_datasets(root)] == [os.path.basename(current)]
  assert not os.path.exists(old)


def test_a_script_without_logging_shows_the_builds_progress(tmp_path, corpus):
  raw = [{"name": "web", "inputs": str(corpus / "web.jsonl"), "tokenizer": "byte"}]
  cfg = {
    "datasets": raw,
    "mixture": {"weights": {"web": 1}},
    "packing": {"seq_len": 64},
    "batch": {"global_batch_size": 2},
    "cache_dir": str(tmp_path / "cache"),
  }
  script = textwrap.dedent(
    f"""
    import jaxdata
    if __name__ == "__main__":
      with jaxdata.Pipeline(jaxdata.PipelineConfig.from_dict({cfg!r}), prefetch=0) as pipe:
        next(pipe)
    """
  )
  (tmp_path / "train.py").write_text(script)
  done = subprocess.run([sys.executable, str(tmp_path / "train.py")], capture_output=True, text=True, env=worker_env())
  assert done.returncode == 0, done.stderr
  assert "jaxdata: web: converting its 1 input files into a cache (the first time)" in done.stderr
  assert "units (100%)" in done.stderr and "tokenized" in done.stderr
  assert "jaxdata: web: converted into the cache" in done.stderr


def test_a_ray_address_where_nothing_answers_is_an_error_not_a_wait(tmp_path, corpus):
  # Ray waits minutes for a head that is not there (no exit in 50 s); jaxdata asks first.
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]  # closed again below: nothing listens there
  command = [sys.executable, "-m", "jaxdata", "convert", str(corpus / "web.jsonl"), "--out", str(tmp_path / "o")]
  command += ["--name", "w", "--runner", "ray", "--ray-address", f"127.0.0.1:{port}"]
  done = subprocess.run(command, capture_output=True, text=True, timeout=120, env=worker_env())
  assert done.returncode == 1
  assert f"--ray-address 127.0.0.1:{port}: nothing answers there" in done.stderr
  assert f"ray start --head --port {port}" in done.stderr
  assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("address", ["head-node", "ray://:6379", "10.0.0.1:port"])
def test_a_ray_address_that_is_not_host_and_port_is_named(address):
  with pytest.raises(ConfigError, match=rf"--ray-address '{re.escape(address)}': give HOST:PORT"):
    check_ray_address(address)
