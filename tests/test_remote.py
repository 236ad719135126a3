"""Remote datasets (gs://, s3://) against real local object stores: the same
batches as local files, a bounded cache, named errors, refused changes."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import threading

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
import zstandard

import object_store  # the tests' local object stores
import test_multihost
from benchmarks.latency_proxy import LatencyProxy  # the benchmarks' network: latency, bandwidth
from flat_fixtures import random_documents, write_flat, write_megatron
from jaxdata import ConfigError, DatasetError, Pipeline, PipelineConfig, load_config
from jaxdata.conversion.beam_runner import convert_with_beam
from jaxdata.conversion.local_runner import convert
from jaxdata.conversion.options import ConvertOptions
from jaxdata.pipeline import reader as reader_module
from jaxdata.pipeline.execution import StepMaking
from jaxdata.pipeline.planner import StepPlanner
from jaxdata.sources import DatasetWriter, TokenDataset, shard_cache
from jaxdata.sources import remote as remote_module
from jaxdata.sources.boundaries import DocumentBoundaries
from jaxdata.sources.flat_index import build_flat_index
from jaxdata.sources.opening import open_dataset
from jaxdata.sources.parallelism import RANGE_REQUESTS, fetch_threads, range_requests
from jaxdata.sources.shard_cache import CacheOptions
from jaxdata.sources.stores import RemotePath, open_store
from jaxdata.testing import opened_datasets, wait_for_processes
from jaxdata.tools.cache_plan import cache_needs, cache_warnings
from pipeline_fixtures import digest, write_coded_dataset

pytestmark = [pytest.mark.slow, pytest.mark.integration]

STEPS = 200


@pytest.fixture(scope="module")
def stores():
  yield from object_store.servers()


@pytest.fixture(scope="module")
def local(tmp_path_factory) -> PipelineConfig:
  """Two datasets of 20 and 10 shards (about 40 documents each), read 3 shards at a time."""
  rng = np.random.default_rng(21)
  tmp = tmp_path_factory.mktemp("local")
  lengths = [rng.integers(1, 40, 800).tolist(), rng.integers(1, 25, 400).tolist()]
  for d, doc_lengths in enumerate(lengths):
    write_coded_dataset(str(tmp / f"d{d}"), d, doc_lengths, shard_bytes=40 * 21 * 4)
  return PipelineConfig.from_dict(
    {
      "datasets": [{"name": f"d{d}", "path": str(tmp / f"d{d}")} for d in range(2)],
      "mixture": {"weights": {"d0": 1, "d1": 1}},
      "exhausted_policy": "repeat",
      "shuffle_block_size": 24,
      "open_shards": 3,
      "packing": {"mode": "first_fit", "seq_len": 32},
      "batch": {"global_batch_size": 8},
    }
  )


def remote_config(local: PipelineConfig, urls: list[str], cache_dir: str, cache_bytes: int) -> PipelineConfig:
  raw = local.to_dict()
  for entry, url in zip(raw["datasets"], urls):
    entry["path"] = url
  return PipelineConfig.from_dict({**raw, "cache_dir": cache_dir, "cache_bytes": cache_bytes})


def dataset_bytes(cfg: PipelineConfig) -> int:
  return sum(
    os.path.getsize(os.path.join(d.path, f))
    for d in cfg.datasets
    for f in os.listdir(d.path)
    if f.endswith(".array_record")
  )


def largest_shard(cfg: PipelineConfig) -> int:
  return max(
    os.path.getsize(os.path.join(d.path, f))
    for d in cfg.datasets
    for f in os.listdir(d.path)
    if f.endswith(".array_record")
  )


def digests(cfg: PipelineConfig, steps: int, **options) -> list[str]:
  with Pipeline(cfg, **options) as pipe:
    return [digest(next(pipe)) for _ in range(steps)]


@pytest.fixture(scope="module")
def reference(local) -> list[str]:
  return digests(local, STEPS, prefetch=0)


@pytest.mark.parametrize("scheme", ["s3", "gs"])
def test_a_remote_dataset_gives_the_local_batches_through_a_small_cache(stores, local, reference, scheme, tmp_path):
  server = stores[scheme]
  urls = [server.upload(d.path, "jaxdata-test", f"run-{scheme}/{d.name}") for d in local.datasets]
  # 14 shards: fewer than d0's 20 alone, more than a read span reads (about 3 open + the next ones per dataset).
  budget = 14 * largest_shard(local)
  cfg = remote_config(local, urls, str(tmp_path / "cache"), budget)
  # Read spans of 4 steps (1,024 tokens, about 25 documents per dataset) touch about 4 shards per dataset.
  with Pipeline(cfg, prefetch=2, read_ahead_tokens=1024) as pipe:
    assert not pipe.execution().read_thread  # remote data keeps its own fetch-ahead (no read thread)
    got = [digest(next(pipe)) for _ in range(STEPS)]
    caches = [dataset.remote.cache for dataset in opened_datasets(pipe)]
    fetched = [dataset.remote.fetched_bytes for dataset in opened_datasets(pipe)]
  assert got == reference
  assert sum(fetched) > dataset_bytes(local)  # the data went round more than once
  # open_shards 3 keeps a read's working set small: the datasets' shared cache never held more than its budget.
  assert caches[0] is caches[1] and caches[0].counts.peak_bytes <= budget


def test_workers_read_remote_datasets_too(stores, local, reference, tmp_path):
  server = stores["s3"]
  urls = [server.upload(d.path, "jaxdata-test", f"workers/{d.name}") for d in local.datasets]
  cfg = remote_config(local, urls, str(tmp_path / "cache"), 2 * 7 * largest_shard(local))
  assert (
    digests(cfg, 60, prefetch=1, making=StepMaking("process", reader_processes=1), read_ahead_tokens=1024)
    == reference[:60]
  )


def test_a_store_that_goes_away_is_a_named_error_at_the_step_then_the_run_continues(stores, local, reference, tmp_path):
  server = stores["s3"]
  urls = [server.upload(d.path, "jaxdata-test", f"outage/{d.name}") for d in local.datasets]
  cfg = remote_config(local, urls, str(tmp_path / "cache"), 2 * 7 * largest_shard(local))
  with Pipeline(cfg, prefetch=0, read_ahead_tokens=1024) as pipe:
    got = [digest(next(pipe)) for _ in range(20)]
    server.kill()
    try:
      with pytest.raises(DatasetError, match=r"s3://jaxdata-test/outage/d\d/.*fetch failed after 4 attempts"):
        for _ in range(STEPS):
          got.append(digest(next(pipe)))
    finally:
      server.start()  # an in-memory store comes back empty: the data is uploaded again
      for d in local.datasets:
        server.upload(d.path, "jaxdata-test", f"outage/{d.name}")
    failed_at = len(got)
    assert pipe.get_state()["step"] == failed_at  # nothing skipped
    got.extend(digest(next(pipe)) for _ in range(10))
  assert got == reference[: failed_at + 10]


def test_a_shard_changed_on_the_server_after_its_manifest_is_refused(stores, local, tmp_path):
  server = stores["gs"]
  d0 = local.datasets[0]
  urls = [server.upload(d.path, "jaxdata-test", f"changed/{d.name}") for d in local.datasets]
  shard = sorted(f for f in os.listdir(d0.path) if f.endswith(".array_record"))[0]
  data = bytearray(open(os.path.join(d0.path, shard), "rb").read())
  data[len(data) // 2] ^= 0xFF  # same size, one byte different
  server.put(f"{urls[0]}/{shard}", bytes(data))
  cfg = remote_config(local, urls, str(tmp_path / "cache"), dataset_bytes(local))
  with Pipeline(cfg, prefetch=0) as pipe:
    with pytest.raises(DatasetError, match=rf"{urls[0]}/{shard}: differs from the shard manifest.json lists"):
      for _ in range(STEPS):
        next(pipe)


def test_a_missing_remote_dataset_names_its_manifest(stores, local, tmp_path):
  raw = local.to_dict()
  raw["datasets"][0]["path"] = "s3://jaxdata-test/nowhere/d0"
  with pytest.raises(DatasetError, match=r"s3://jaxdata-test/nowhere/d0/manifest.json: object is missing"):
    Pipeline(PipelineConfig.from_dict({**raw, "cache_dir": str(tmp_path)}))


def test_remote_paths_and_cache_settings_are_checked(local):
  with pytest.raises(DatasetError, match=r"s3://: a remote dataset path is gs://BUCKET/PREFIX or s3://BUCKET/PREFIX"):
    RemotePath.parse("s3://")
  assert RemotePath.parse("gs://bucket/a/b/").key("manifest.json") == "a/b/manifest.json"
  raw = local.to_dict()
  with pytest.raises(ConfigError, match="cache_bytes: expected an int >= 1, got 0"):
    PipelineConfig.from_dict({**raw, "cache_bytes": 0})
  with pytest.raises(ConfigError, match="cache_dir: expected a directory path"):
    PipelineConfig.from_dict({**raw, "cache_dir": ""})


def test_a_cache_smaller_than_one_read_warns_and_still_reads_right(stores, local, reference, tmp_path):
  server = stores["s3"]
  urls = [server.upload(d.path, "jaxdata-test", f"tiny/{d.name}") for d in local.datasets]
  cfg = remote_config(local, urls, str(tmp_path / "cache"), 2 * largest_shard(local))  # two shards
  with pytest.warns(UserWarning) as warned:
    assert digests(cfg, 30, prefetch=0) == reference[:30]
  messages = [str(w.message) for w in warned]
  assert any(
    re.search(r"s3://jaxdata-test/tiny/d\d: one read needs \d+ shards .* raise cache_bytes", m) for m in messages
  )
  # At the end, the most it held at once (the first warning quoted only the first such read).
  peak = [m for m in messages if "the shard cache held up to" in m]
  assert len(peak) == 1 and int(
    re.search(r"up to ([\d,]+) bytes", peak[0]).group(1).replace(",", "")
  ) > 2 * largest_shard(local)


def test_the_plan_names_the_cache_a_read_span_needs(stores, local, tmp_path):
  server = stores["gs"]
  urls = [server.upload(d.path, "jaxdata-test", f"plan/{d.name}") for d in local.datasets]
  cfg = remote_config(local, urls, str(tmp_path / "cache"), 14 * largest_shard(local))
  needs = cache_needs(cfg, hosts=2, spans=6, read_ahead_tokens=512)
  # Each host's 2-step read spans touch the 3 open shards of each dataset, or a few more.
  assert all(3 <= n.max_shards <= 8 and n.remote for n in needs.datasets)
  # The most one read span holds of both datasets together.
  peaks = [n.max_bytes for n in needs.datasets]
  assert max(peaks) < needs.max_remote_bytes <= sum(peaks)
  assert needs.max_remote_bytes <= needs.thrash_bytes <= dataset_bytes(local)
  assert cache_warnings(needs, needs.thrash_bytes) == []
  (warning,) = cache_warnings(needs, needs.thrash_bytes - 1)
  assert f"below the {needs.thrash_bytes:,} bytes under which the planned spans would fetch" in warning


def test_a_pinned_read_span_stays_cached_until_it_is_read(stores, local, tmp_path):
  server = stores["gs"]
  url = server.upload(local.datasets[0].path, "jaxdata-test", "pinned/d0")
  shard = largest_shard(local)
  with TokenDataset(url, cache=CacheOptions(str(tmp_path / "cache"), 2 * shard)) as dataset:
    cache = dataset.remote.cache
    span = dataset.remote.pin(np.array([0, 1, 0]))
    for other in (2, 3, 4):  # reads of other shards meanwhile (another dataset's, in a pipeline)
      dataset.remote.shard_file(other, {other})
    assert {"0", "1"} <= {name.rpartition("-")[2] for name in cache.present}  # over budget, but kept
    dataset.remote.unpin(span)
    assert cache.held() <= 2 * shard


def test_each_host_fetches_only_the_shards_of_its_own_rows(stores, tmp_path):
  """Two jax.distributed processes read an S3 copy of the multi-host test's
  datasets through caches that hold everything: together they build the
  single-process global batches, and each fetched at least the shards of the
  read spans it finished reading (its read log) and none but shards holding its
  own rows' documents (of the steps it could have planned)."""
  config = test_multihost.write_two_datasets(tmp_path)
  raw = yaml.safe_load(open(config))
  local_dirs = {d["name"]: str(tmp_path / d["path"]) for d in raw["datasets"]}
  for entry in raw["datasets"]:
    entry["path"] = stores["s3"].upload(local_dirs[entry["name"]], "jaxdata-test", f"hosts/{entry['name']}")
  # No cache_dir: each process caches in its own directory ($JAXDATA_CACHE_DIR, set by the worker), like hosts.
  remote_config = tmp_path / "remote.yaml"
  remote_config.write_text(yaml.safe_dump(raw))
  out_dir = tmp_path / "out"
  out_dir.mkdir()
  test_multihost.run_processes(2, str(remote_config), str(out_dir))
  with Pipeline(load_config(config), prefetch=0) as reference:
    expected = [next(reference) for _ in range(test_multihost.STEPS)]
  host_rows = test_multihost.rebuilt_global_batches(out_dir, expected)
  # Beyond the steps handed out, a process may have planned (and begun fetching) a few read spans more.
  plans = list(StepPlanner(load_config(config)).plans(test_multihost.STEPS + 16))
  fetched_any = []
  for process in range(2):
    reads = np.load(out_dir / f"p{process}_reads.npz")
    fetched = json.loads((out_dir / f"p{process}_fetched.json").read_text())
    rows = np.array(sorted(host_rows[0][process]))  # the same rows every step: the mesh is fixed
    for d, (name, directory) in enumerate(local_dirs.items()):
      with TokenDataset(directory) as dataset:

        def shard_bytes(records: np.ndarray) -> int:
          shards = np.unique(dataset.locate(records)[0]).tolist()
          fetched_any.append(len(shards) < dataset.num_shards)
          return sum(dataset.manifest.shards[s].num_bytes for s in shards)

        # Read spans of the steps handed out were read whole.
        done = [
          reads[k]
          for k in reads.files
          if k.endswith(f"/{name}") and int(k.split("/")[0].split("-")[1]) <= test_multihost.STEPS
        ]
        own = [p.pieces.record[p.in_rows(rows)][p.pieces.dataset[p.in_rows(rows)] == d] for p in plans]
        lower = shard_bytes(np.concatenate(done or [np.zeros(0, np.int64)]))
        assert lower <= fetched[name] <= shard_bytes(np.concatenate(own)), (process, name)
  assert any(fetched_any)  # some host skipped some shards


@pytest.mark.parametrize("planner_process", [False, True])
def test_the_next_read_spans_shards_are_fetched_while_one_is_read(stores, local, reference, tmp_path, planner_process):
  """Every shard read after the first read span was asked for a span ahead
  (with room for everything, so none is dropped for lack of it): planned
  in process, or by a planner process whose read spans this process reads."""
  server = stores["s3"]
  urls = [server.upload(d.path, "jaxdata-test", f"ahead-{planner_process}/{d.name}") for d in local.datasets]
  cfg = remote_config(local, urls, str(tmp_path / "cache"), 2 * dataset_bytes(local))
  with Pipeline(cfg, prefetch=0, read_ahead_tokens=1024, planner_process=planner_process) as pipe:
    got = [digest(next(pipe))]
    if planner_process:
      wait_for_processes(pipe)  # from the next step on, the planner process plans every span
    got += [digest(next(pipe)) for _ in range(39)]
    assert not planner_process or pipe.execution().steps_from_processes == 39
    cache = opened_datasets(pipe)[0].remote.cache
    first_span = StepPlanner(cfg).plan()  # the first read span is one step
    first_shards = {
      (d, int(s))
      for d, dataset in enumerate(opened_datasets(pipe))
      for s in dataset.locate(first_span.pieces.record[first_span.pieces.dataset == d])[0]
    }
  assert got == reference[:40]
  gets = cache.counts.hits + cache.counts.prefetched + cache.counts.misses
  assert gets > 10 * len(first_shards) and gets - cache.counts.ahead_gets <= len(first_shards)


@pytest.mark.parametrize("scheme", ["s3", "gs"])
def test_a_store_reads_no_more_than_the_bytes_asked_for(stores, local, scheme):
  """Manifests are read with a limit, so an oversized object is refused
  (Manifest.parse: `larger than 64 MiB`) without being downloaded whole."""
  url = stores[scheme].upload(local.datasets[1].path, "jaxdata-test", f"limit-{scheme}/d1")
  location = RemotePath.parse(url)
  head = open_store(location).read(location.key("manifest.json"), 10)
  assert head == open(os.path.join(local.datasets[1].path, "manifest.json"), "rb").read(10)


def test_a_later_run_reuses_the_shards_it_finds_cached(stores, local, reference, tmp_path):
  server = stores["s3"]
  urls = [server.upload(d.path, "jaxdata-test", f"reuse/{d.name}") for d in local.datasets]
  cfg = remote_config(local, urls, str(tmp_path / "cache"), 2 * dataset_bytes(local))
  assert digests(cfg, 20, prefetch=0) == reference[:20]
  with Pipeline(cfg, prefetch=0) as pipe:  # the same cache directory: every shard is there, checked by hash
    assert [digest(next(pipe)) for _ in range(20)] == reference[:20]
    assert [dataset.remote.fetched_bytes for dataset in opened_datasets(pipe)] == [0, 0]


@pytest.mark.parametrize("scheme", ["s3", "gs"])
def test_flat_files_and_windows_read_in_place_from_the_store_give_the_local_batches(stores, scheme, tmp_path):
  """Megatron and flat files in a bucket, read by range through tensorstore (no shard cache):
  documents and windows equal the local run's, metadata beside the files or kept apart."""

  documents = random_documents(np.random.default_rng(5), 160, eos_id=0)
  write_flat(str(tmp_path / "flat" / "a.bin"), documents[:90])
  write_flat(str(tmp_path / "flat" / "b.bin"), documents[90:])
  build_flat_index(
    "flat",
    [str(tmp_path / "flat" / "a.bin"), str(tmp_path / "flat" / "b.bin")],
    dtype="uint16",
    boundaries=DocumentBoundaries.eos(0),
  )
  os.makedirs(tmp_path / "meg")
  write_megatron(str(tmp_path / "meg" / "m"), [[d] for d in documents])
  build_flat_index("megatron", [str(tmp_path / "meg" / "m")])
  server = stores[scheme]
  flat_url = server.upload(str(tmp_path / "flat"), "jaxdata-test", f"flat-{scheme}")
  meg_files = tmp_path / "meg-files"
  meg_files.mkdir()
  for suffix in (".bin", ".idx"):
    os.link(tmp_path / "meg" / f"m{suffix}", meg_files / f"m{suffix}")
  meg_url = server.upload(str(meg_files), "jaxdata-test", f"meg-{scheme}")
  # Metadata kept locally, tokens in the bucket: data_root names the bucket prefix.
  build_flat_index("megatron", [str(meg_files / "m")], out_dir=str(tmp_path / "meg-meta"), data_root=meg_url)

  def config(flat: str, meg: str) -> PipelineConfig:
    return PipelineConfig.from_dict(
      {
        "seed": 8,
        "exhausted_policy": "repeat",
        "shuffle_block_size": "global",
        "datasets": [
          {"name": "draws", "path": flat, "sampling": "windows", "window": 16},
          {"name": "perm", "path": flat, "sampling": "windows", "window": 8, "with_replacement": False},
          {"name": "docs", "path": meg},
        ],
        "mixture": {"weights": {"draws": 0.3, "perm": 0.3, "docs": 0.4}},
        "packing": {"mode": "first_fit", "seq_len": 16},
        "batch": {"global_batch_size": 8},
      }
    )

  with Pipeline(config(str(tmp_path / "flat"), str(tmp_path / "meg")), prefetch=0) as pipe:
    want = [digest(next(pipe)) for _ in range(30)]
  with Pipeline(config(flat_url, str(tmp_path / "meg-meta")), prefetch=0) as pipe:
    assert [digest(next(pipe)) for _ in range(30)] == want
    assert all(ds.remote is None for ds in opened_datasets(pipe))  # nothing went through the shard cache


@pytest.mark.parametrize("planner_process", [False, True])
def test_read_spans_that_read_from_a_store_are_read_ahead(stores, tmp_path, monkeypatch, planner_process):
  """Flat files in a bucket, planned in process or by a planner process (the
  default with a mesh): each read span's byte ranges are read on the read-ahead thread, a span
  ahead, and the batches (after set_state, and after a failed read is
  raised at its step and retried) are the local run's."""
  write_flat(str(tmp_path / "flat" / "a.bin"), random_documents(np.random.default_rng(7), 120, eos_id=0))
  build_flat_index("flat", [str(tmp_path / "flat" / "a.bin")], dtype="uint16", boundaries=DocumentBoundaries.eos(0))
  url = stores["s3"].upload(str(tmp_path / "flat"), "jaxdata-test", f"flat-planner-{planner_process}")

  def config(path: str) -> PipelineConfig:
    return PipelineConfig.from_dict(
      {
        "seed": 3,
        "exhausted_policy": "repeat",
        "shuffle_block_size": "global",
        "datasets": [
          {"name": "draws", "path": path, "sampling": "windows", "window": 16},
          {"name": "docs", "path": path},
        ],
        "mixture": {"weights": {"draws": 0.5, "docs": 0.5}},
        "packing": {"mode": "first_fit", "seq_len": 16},
        "batch": {"global_batch_size": 8},
      }
    )

  with Pipeline(config(str(tmp_path / "flat")), prefetch=0) as pipe:
    want = [digest(next(pipe)) for _ in range(70)]
  threads: set[str] = set()
  failing = {"now": False}
  real = reader_module._read_with_retries

  def read(dataset, records, images):
    threads.add(threading.current_thread().name)
    if failing["now"]:
      raise OSError(5, "Input/output error (injected)")
    return real(dataset, records, images)

  monkeypatch.setattr(reader_module, "_read_with_retries", read)
  with Pipeline(config(url), prefetch=2, read_ahead_tokens=256, planner_process=planner_process) as pipe:
    got = [digest(next(pipe))]
    if planner_process:
      wait_for_processes(pipe)  # from the next step on, the planner process plans every span
    got += [digest(next(pipe)) for _ in range(24)]
    state = pipe.get_state()
    got += [digest(next(pipe)) for _ in range(5)]
    pipe.set_state(state)  # read spans read ahead are dropped; the same steps again
    got += [digest(next(pipe)) for _ in range(15)]
    failing["now"] = True
    with pytest.raises(OSError, match="injected"):
      while True:
        got.append(digest(next(pipe)))
    failing["now"] = False
    assert len(got) < 45 + 20  # raised at the first step of a read span not yet read (spans of ~8 steps)
    got += [digest(next(pipe)) for _ in range(30 + 45 - len(got))]  # retried from the step that failed
    from_planner = pipe.execution().steps_from_processes if planner_process else None
  assert got == want[:30] + want[25:70]
  assert threads == {"jaxdata-read-ahead"}  # never on the prefetch thread, which assembles meanwhile
  assert not planner_process or from_planner >= 60


def test_a_flat_read_from_a_store_that_goes_away_names_the_file_after_retries(stores, tmp_path):
  """tensorstore retries a failed range read 4 times (0.25 s to 2 s apart), then a DatasetError names the file."""
  write_flat(str(tmp_path / "flat" / "a.bin"), random_documents(np.random.default_rng(6), 40, eos_id=0))
  build_flat_index("flat", [str(tmp_path / "flat" / "a.bin")], dtype="uint16", boundaries=DocumentBoundaries.eos(0))
  server = stores["s3"]
  url = server.upload(str(tmp_path / "flat"), "jaxdata-test", "flat-outage")
  with open_dataset(url) as dataset:
    first = dataset.read_global(np.arange(5)).to_list()
    server.kill()
    try:
      with pytest.raises(DatasetError, match=r"s3://jaxdata-test/flat-outage/a\.bin: read failed after retries"):
        dataset.read_global(np.arange(5, 10))
    finally:
      server.start()  # an in-memory store comes back empty
      server.upload(str(tmp_path / "flat"), "jaxdata-test", "flat-outage")
    assert [d.tolist() for d in dataset.read_global(np.arange(5)).to_list()] == [d.tolist() for d in first]


def test_the_beam_converter_reads_inputs_from_the_store_and_writes_the_local_bytes(stores, tmp_path):
  """JSONL (plain, gzip, zstd), Parquet and text in moto S3, listed and read through Beam's S3 file system."""
  inputs = tmp_path / "inputs"
  inputs.mkdir()
  lines = [json.dumps({"text": f"document {i} " * (i % 9)}) if i % 50 != 3 else "{bad" for i in range(600)]
  (inputs / "a.jsonl").write_text("\n".join(lines) + "\n")
  (inputs / "b.jsonl.gz").write_bytes(gzip.compress(("\n".join(lines[:200]) + "\n").encode()))
  (inputs / "c.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(("\n".join(lines[200:]) + "\n").encode()))
  pq.write_table(pa.table({"text": [f"row {i}" for i in range(300)]}), inputs / "d.parquet", row_group_size=50)
  (inputs / "e.txt").write_text("a plain text file\nof two lines")
  (inputs / ".hidden.jsonl").write_text("{broken")
  server = stores["s3"]
  url = server.upload(str(inputs), "jaxdata-test", "convert-inputs")
  options = ConvertOptions(skip_invalid=True, shard_bytes=3_000, workers=1)
  local = convert([str(inputs)], str(tmp_path / "local"), "mix", options)
  beam_args = [
    f"--s3_endpoint_url={server.endpoint}",
    "--s3_access_key_id=test",
    "--s3_secret_access_key=test",
    "--s3_region_name=us-east-1",
  ]
  remote = convert_with_beam([url + "/"], str(tmp_path / "remote"), "mix", options, beam_args)
  assert remote.shards == local.shards and len(local.shards) > 5  # names, counts and sha256 of every shard
  for shard in local.shards:
    assert (tmp_path / "remote" / shard.lengths_path).read_bytes() == (
      tmp_path / "local" / shard.lengths_path
    ).read_bytes()
  assert [i["path"] for i in remote.stats["inputs"]] == [
    f"{url}/{n}" for n in ("a.jsonl", "b.jsonl.gz", "c.jsonl.zst", "d.parquet", "e.txt")
  ]
  counts = ("documents", "skipped_empty", "skipped_invalid")
  assert [remote.stats[k] for k in counts] == [local.stats[k] for k in counts] and local.stats["skipped_invalid"] == 24
  # Scratch and output in the bucket (one small input): the local converter's shards, and the run's
  # scratch folder is gone afterwards.
  small = tmp_path / "small"
  small.mkdir()
  (small / "e.txt").write_text((inputs / "e.txt").read_text())
  small_url = server.upload(str(small), "jaxdata-test", "convert-small")
  in_bucket = convert_with_beam(
    [small_url + "/"],
    "s3://jaxdata-test/beam-out",
    "small",
    options,
    beam_args + ["--temp_location=s3://jaxdata-test/beam-temp"],
  )
  assert in_bucket.shards == convert([str(small)], str(tmp_path / "small-local"), "small", options).shards
  left = server.client().list_objects_v2(Bucket="jaxdata-test", Prefix="beam-temp/").get("Contents", [])
  assert [o["Key"] for o in left] == []


def flat_in_store(server: object_store.ObjectStoreServer, tmp_path, name: str) -> tuple[PipelineConfig, PipelineConfig]:
  """A flat dataset (two token files) read locally, and the same files in the store with local metadata."""
  documents = random_documents(np.random.default_rng(9), 400, eos_id=0, max_length=200)
  files = tmp_path / f"{name}-files"
  write_flat(str(files / "a.bin"), documents[:200])
  write_flat(str(files / "b.bin"), documents[200:])
  url = server.upload(str(files), "jaxdata-test", name)
  build_flat_index(
    "flat",
    [str(files / "a.bin"), str(files / "b.bin")],
    dtype="uint16",
    boundaries=DocumentBoundaries.eos(0),
    out_dir=str(tmp_path / f"{name}-meta"),
    data_root=url,
  )
  build_flat_index(
    "flat", [str(files / "a.bin"), str(files / "b.bin")], dtype="uint16", boundaries=DocumentBoundaries.eos(0)
  )

  def config(path: str) -> PipelineConfig:
    return PipelineConfig.from_dict(
      {
        "seed": 3,
        "datasets": [{"name": "docs", "path": path}],
        "mixture": {"weights": {"docs": 1}},
        "exhausted_policy": "repeat",
        "shuffle_block_size": "global",
        "packing": {"mode": "first_fit", "seq_len": 64},
        "batch": {"global_batch_size": 8},
      }
    )

  return config(str(files)), config(str(tmp_path / f"{name}-meta"))


def take_until_error(pipe: Pipeline, steps: int) -> tuple[list, DatasetError | None]:
  got = []
  try:
    for _ in range(steps):
      got.append(digest(next(pipe)))
  except DatasetError as error:
    return got, error
  return got, None


@pytest.mark.parametrize("scheme", ["s3", "gs"])
def test_byte_range_reads_are_pinned_to_the_indexed_object(stores, scheme, tmp_path):
  """A token object replaced mid-run by one of the same size is refused at the next read that touches it:
  every batch handed out is the local run's, then a DatasetError names the object (S3: its ETag changed;
  the GCS emulator names no generation: the block checksums catch it)."""
  server = stores[scheme]
  local_cfg, remote_cfg = flat_in_store(server, tmp_path, f"pinned-{scheme}")
  want = digests(local_cfg, 60, prefetch=0)
  with Pipeline(remote_cfg, prefetch=0) as pipe:
    got = [digest(next(pipe)) for _ in range(5)]
    url = f"{scheme}://jaxdata-test/pinned-{scheme}/a.bin"
    original = (tmp_path / f"pinned-{scheme}-files" / "a.bin").read_bytes()
    server.put(url, bytes(b ^ 0x01 for b in original))  # same size, every id off by one
    more, error = take_until_error(pipe, 55)
    assert error is not None, "a replaced object was read without an error"
    assert url in str(error) and ("object changed" in str(error) or "block checksum" in str(error)), str(error)
    assert got + more == want[: 5 + len(more)]  # nothing wrong was handed out
    server.put(url, original)  # back as indexed: the same step is retried and the run goes on
    if scheme == "s3":  # (its ETag is the indexed object's again)
      rest = [digest(next(pipe)) for _ in range(5)]
      assert got + more + rest == want[: 10 + len(more)]


@pytest.mark.parametrize("scheme", ["s3", "gs"])
def test_corrupt_response_bodies_are_refused_never_used(stores, scheme, tmp_path):
  """A path that damages every ranged response (one byte flipped): a DatasetError naming the object at the
  first step that reads, every batch before it right; once the path is healthy the step is retried."""
  server = stores[scheme]
  local_cfg, remote_cfg = flat_in_store(server, tmp_path, f"corrupt-{scheme}")
  want = digests(local_cfg, 30, prefetch=0)
  proxy = object_store.CorruptingProxy(server.endpoint)
  variable = "AWS_ENDPOINT_URL" if scheme == "s3" else "TENSORSTORE_GCS_HTTP_URL"
  saved = os.environ.get(variable)
  os.environ[variable] = proxy.endpoint  # read when the dataset opens its store
  try:
    with Pipeline(remote_cfg, prefetch=0) as pipe:
      got = [digest(next(pipe)) for _ in range(3)]
      proxy.corrupt = True
      more, error = take_until_error(pipe, 27)
      assert error is not None and proxy.damaged > 0, "damaged bodies were read without an error"
      assert f"{scheme}://jaxdata-test/corrupt-{scheme}/" in str(error) and "block checksum" in str(error), str(error)
      assert got + more == want[: 3 + len(more)]
      proxy.corrupt = False
      got += more + [digest(next(pipe)) for _ in range(27 - len(more))]
    assert got == want
  finally:
    if saved is None:
      os.environ.pop(variable, None)
    else:
      os.environ[variable] = saved
    proxy.close()


def test_a_cache_directory_without_room_for_the_cache_is_said_at_open(stores, local, tmp_path, monkeypatch):
  """A disk with less free space than the cache may hold (the dataset, or cache_bytes) is a ConfigError when the
  pipeline opens, naming the directory and both figures; not ENOSPC after retries mid-run."""
  server = stores["s3"]
  urls = [server.upload(d.path, "jaxdata-test", f"room/{d.name}") for d in local.datasets]
  cfg = remote_config(local, urls, str(tmp_path / "cache"), 1 << 40)
  total = shutil.disk_usage(tmp_path)
  monkeypatch.setattr(remote_module.shutil, "disk_usage", lambda path: total._replace(free=1000))
  with pytest.raises(
    ConfigError, match=r"cache_dir: .*cache.* has 1,000 bytes free .* lower cache_bytes or free space"
  ):
    Pipeline(cfg, prefetch=0)


def test_shards_whose_bodies_are_cut_short_every_time_are_named_after_retries(stores, local, reference, tmp_path):
  """boto3's own error for a body that never arrives whole (RetriesExceededError) is retried, then a
  DatasetError names the shard; once the path is healthy the step is retried and the run goes on."""
  server = stores["s3"]
  urls = [server.upload(d.path, "jaxdata-test", f"cut/{d.name}") for d in local.datasets]
  cfg = remote_config(local, urls, str(tmp_path / "cache"), 1 << 30)
  proxy = object_store.CorruptingProxy(server.endpoint)
  saved = os.environ["AWS_ENDPOINT_URL"]
  os.environ["AWS_ENDPOINT_URL"] = proxy.endpoint
  try:
    with Pipeline(cfg, prefetch=0) as pipe:  # manifests and lengths read whole; no shard yet
      proxy.truncate = True
      with pytest.raises(
        DatasetError,
        match=r"s3://jaxdata-test/cut/d\d/.*array_record: fetch failed after 4 "
        r"attempts \(RetriesExceededError",
      ):
        next(pipe)
      assert proxy.damaged > 0 and pipe.get_state()["step"] == 0
      proxy.truncate = False
      assert [digest(next(pipe)) for _ in range(10)] == reference[:10]
  finally:
    os.environ["AWS_ENDPOINT_URL"] = saved
    proxy.close()


def test_reading_a_store_with_credentials_in_the_environment_logs_no_credential_errors(stores, tmp_path):
  """Tensorstore's default credential chains log an error line per request when ~/.aws or gcloud's
  defaults are absent; keys in the environment (S3) and an emulator (GCS) must not go through them."""
  urls = []
  for scheme, server in stores.items():
    _, in_store = flat_in_store(server, tmp_path, f"quiet-{scheme}")
    urls.append(in_store.datasets[0].path)
  script = tmp_path / "read.py"
  script.write_text(
    "import sys\n"
    "from jaxdata.sources.opening import open_dataset\n"
    "for path in sys.argv[1:]:\n"
    "  with open_dataset(path) as dataset:\n"
    "    assert len(dataset[3]) > 0 and len(dataset.__getitems__(list(range(50)))) == 50\n"
  )
  home = tmp_path / "home"  # no ~/.aws, no gcloud configuration
  home.mkdir()
  done = subprocess.run(
    [sys.executable, str(script), *urls],
    env={**os.environ, "HOME": str(home)},
    capture_output=True,
    text=True,
    timeout=120,
  )
  assert done.returncode == 0, done.stderr[-2000:]
  errors = [line for line in done.stderr.splitlines() if re.match(r"^[EW]\d{4} ", line)]
  assert not errors, errors


def test_behind_a_network_latency_more_fetches_run_at_once_and_the_batches_stay(
  stores, local, reference, tmp_path, monkeypatch
):
  """A store 40 ms away (a proxy holding every exchange, 20 MB/s per connection): each dataset
  measures the round trip when it opens and keeps fetch_threads(latency, shard size) fetches in
  flight instead of 8; the batches are the local ones, and every byte fetched is counted."""
  server = stores["s3"]
  urls = [server.upload(d.path, "jaxdata-test", f"latency/{d.name}") for d in local.datasets]
  with LatencyProxy(server.endpoint, 0.04, mb_per_s=20) as proxy:
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
    cfg = remote_config(local, urls, str(tmp_path / "cache"), 14 * largest_shard(local))
    with Pipeline(cfg, prefetch=2, read_ahead_tokens=1024) as pipe:
      got = [digest(next(pipe)) for _ in range(60)]
      transfers = [(d.transfer_stats(), d.manifest.shards) for d in opened_datasets(pipe)]
  assert got == reference[:60]
  for stats, shards in transfers:
    assert stats["latency_s"] >= 0.04
    assert stats["parallelism"] >= fetch_threads(stats["latency_s"], np.median([s.num_bytes for s in shards])) > 8
    assert stats["fetched_bytes"] > 0


def test_windows_from_a_store_far_away_keep_more_ranges_in_flight_and_read_the_same(stores, tmp_path, monkeypatch):
  """Flat files read by range through a 30 ms proxy: the kvstore keeps range_requests(latency)
  requests in flight (tensorstore's default, 32, without it) and the windows are the local ones."""
  documents = random_documents(np.random.default_rng(6), 120, eos_id=0)
  write_flat(str(tmp_path / "flat" / "a.bin"), documents)
  build_flat_index("flat", [str(tmp_path / "flat" / "a.bin")], dtype="uint16", boundaries=DocumentBoundaries.eos(0))
  server = stores["s3"]
  url = server.upload(str(tmp_path / "flat"), "jaxdata-test", "latency-flat")

  def config(path: str) -> PipelineConfig:
    return PipelineConfig.from_dict(
      {
        "exhausted_policy": "repeat",
        "datasets": [{"name": "w", "path": path, "sampling": "windows", "window": 16}],
        "mixture": {"weights": {"w": 1}},
        "packing": {"mode": "first_fit", "seq_len": 16},
        "batch": {"global_batch_size": 8},
      }
    )

  with Pipeline(config(str(tmp_path / "flat")), prefetch=0) as pipe:
    want = [digest(next(pipe)) for _ in range(20)]
    assert opened_datasets(pipe)[0].transfer_stats() is None  # local files: nothing fetched
  with LatencyProxy(server.endpoint, 0.03) as proxy:
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
    with Pipeline(config(url), prefetch=0) as pipe:
      assert [digest(next(pipe)) for _ in range(20)] == want
      stats = opened_datasets(pipe)[0].transfer_stats()
  assert stats["latency_s"] >= 0.03
  assert stats["parallelism"] == range_requests(stats["latency_s"]) > RANGE_REQUESTS
  assert stats["fetched_bytes"] >= 20 * 8 * 17 * 2  # every window's 17 uint16 tokens, at least


class _CountingStore:
  """A store whose objects are bytes in memory; it records each download."""

  errors = (OSError,)

  def __init__(self, objects: dict[str, bytes]) -> None:
    self.objects, self.downloads = objects, []

  def read(self, key: str, limit: int) -> bytes:
    return self.objects[key][:limit]

  def download(self, key: str, destination: str) -> None:
    self.downloads.append(key)
    with open(destination, "wb") as f:
      f.write(self.objects[key])


def test_a_read_of_more_shards_than_fit_keeps_its_own_and_fetches_the_rest_at_once(tmp_path):
  """Room for two shards, 1 and 3 cached (0 evicted earlier); a read needs 0, 1 and 2: shard 3 (not
  in it) leaves, shard 1 (in it) stays, and 0 and 2 are requested together before the read waits."""
  objects = {f"k{i}": bytes([i]) * 100 for i in range(4)}
  store = _CountingStore(objects)
  shards = [
    shard_cache.CachedShard(
      f"d-{i}", f"s3://b/k{i}", f"k{i}", 100, hashlib.sha256(objects[f"k{i}"]).hexdigest(), store, lambda: None
    )
    for i in range(4)
  ]
  cache = shard_cache.ShardCache(str(tmp_path / "cache"), 200)
  for shard in (shards[0], shards[1], shards[3]):
    cache.get(shard, set())
  assert store.downloads == ["k0", "k1", "k3"] and list(cache.present) == ["d-1", "d-3"]
  read = shards[:3]
  cache.want(read)
  assert set(cache.pending) | set(cache.present) >= {"d-0", "d-2"}  # both requested at once
  for shard in read:
    cache.get(shard, {s.name for s in read})
  assert sorted(store.downloads[3:]) == ["k0", "k2"], store.downloads  # shard 1 was not fetched again
  cache.pool.shutdown(wait=True)


def test_a_remote_dataset_without_documents_opens(stores, tmp_path):
  """A manifest with no shards (DatasetWriter.finish with nothing written) opens from a bucket as locally."""
  DatasetWriter(str(tmp_path / "empty"), "empty", np.dtype("<u4"), {"kind": "x"}).finish()
  url = stores["s3"].upload(str(tmp_path / "empty"), "jaxdata-test", "empty")
  with TokenDataset(url, cache=CacheOptions(str(tmp_path / "cache"), 1 << 20)) as dataset:
    assert dataset.num_records == 0 and dataset.transfer_stats()["fetched_bytes"] == 0
