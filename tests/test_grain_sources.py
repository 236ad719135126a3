"""Every jaxdata dataset is a Grain `RandomAccessDataSource`; the mixture is a Grain `IterDataset` of documents.

Checked against Grain itself: `grain.MapDataset.source`, Grain's own checkpoint
assertion (`grain.experimental.assert_equal_output_after_checkpoint`), Grain's
packer after jaxdata's mixture, and `mp_prefetch` worker processes (which
unpickle the source in another process).
"""

from __future__ import annotations

import json
import os
import pickle
import re
import subprocess
import sys
import textwrap

import grain
import numpy as np
import pytest

from flat_fixtures import random_documents, write_megatron
from jaxdata import DatasetError, PipelineConfig, from_iterable
from jaxdata.checkpoint.state import seal
from jaxdata.errors import CheckpointError
from jaxdata.integrations.grain_mixture import MixtureDataset, MixtureDatasetIterator
from jaxdata.mixture.stream import DocumentStream
from jaxdata.pipeline.spec import PipelineSpec
from jaxdata.sources.flat_index import build_flat_index
from jaxdata.sources.opening import open_dataset
from jaxdata.sources.sampling_windows import WindowOptions
from pipeline_fixtures import coded_config, free_port, run_workers, worker_env, write_coded_dataset


@pytest.fixture(scope="module")
def documents() -> list[list[int]]:
  return random_documents(np.random.default_rng(11), 120, eos_id=0)


@pytest.fixture(scope="module")
def datasets(tmp_path_factory, documents) -> dict[str, tuple[str, WindowOptions | None]]:
  """The same documents as an ArrayRecord dataset, a Megatron .bin/.idx pair, and windows of the latter."""
  root = tmp_path_factory.mktemp("sources")
  from_iterable(documents, out=str(root / "arrayrecord"), tokenizer=None, dtype="uint16", shard_bytes=300)
  os.makedirs(root / "megatron")
  write_megatron(str(root / "megatron" / "part"), [[d] for d in documents])
  build_flat_index("megatron", [str(root / "megatron" / "part")])
  return {
    "arrayrecord": (str(root / "arrayrecord"), None),
    "megatron": (str(root / "megatron"), None),
    "windows": (str(root / "megatron"), WindowOptions(window=7)),
  }


@pytest.mark.parametrize("kind", ["arrayrecord", "megatron", "windows"])
def test_every_format_speaks_the_random_access_protocol(datasets, documents, kind):
  path, windows = datasets[kind]
  with open_dataset(path, windows=windows) as dataset:
    n = len(dataset)
    assert n == dataset.num_records and n > 10
    everything = dataset.read_global(np.arange(n)).to_list()
    if windows is None:  # documents in manifest order: the corpus as written
      assert [d.tolist() for d in everything] == documents
    assert [dataset[i].tolist() for i in range(n)] == [d.tolist() for d in everything]
    assert dataset[-1].tolist() == everything[-1].tolist()
    assert dataset[np.int64(3)].tolist() == everything[3].tolist()
    for bad in (n, -n - 1):
      with pytest.raises(IndexError, match=rf"index {bad} out of range for {n}"):
        dataset[bad]
    picks = [5, 0, 5, n - 1, -1, -n]
    assert [d.tolist() for d in dataset.__getitems__(picks)] == [everything[i].tolist() for i in picks]
    assert dataset.__getitems__([]) == []
    assert type(dataset).__name__ in repr(dataset) and str(n) in repr(dataset)


@pytest.mark.parametrize("kind", ["arrayrecord", "megatron", "windows"])
def test_a_pickle_is_small_and_reopens_the_same_dataset(datasets, kind):
  path, windows = datasets[kind]
  with open_dataset(path, windows=windows) as dataset:
    blob = pickle.dumps(dataset)
    # A path, options and a fingerprint: never the mapped tokens, an open reader or the manifest.
    assert len(blob) < 600, len(blob)
    with pickle.loads(blob) as again:
      assert type(again) is type(dataset) and len(again) == len(dataset)
      indices = np.random.default_rng(0).permutation(len(dataset))[:40]
      assert [a.tolist() for a in again.__getitems__(indices)] == [b.tolist() for b in dataset.__getitems__(indices)]


def test_a_pickle_of_a_dataset_that_changed_since_is_refused(tmp_path):
  from_iterable([[1, 2, 3], [4, 5]], out=str(tmp_path / "a"))
  with open_dataset(str(tmp_path / "a")) as dataset:
    blob = pickle.dumps(dataset)
  from_iterable([[7, 7, 7], [8]], out=str(tmp_path / "a"), overwrite=True)
  with pytest.raises(DatasetError, match=r"a/manifest.json: the dataset changed after it was opened and pickled"):
    pickle.loads(blob)


@pytest.mark.parametrize("kind", ["arrayrecord", "megatron"])
def test_grain_map_dataset_over_a_source_passes_grains_checkpoint_assertion(datasets, documents, kind):
  path, _ = datasets[kind]
  dataset = open_dataset(path)
  shuffled = grain.MapDataset.source(dataset).shuffle(seed=4)
  seen = [shuffled[i].tolist() for i in range(len(dataset))]
  assert sorted(seen) == sorted(documents) and seen != documents  # a permutation, not the identity
  pipeline = shuffled.map(lambda ids: ids.astype(np.int64).sum() * 2 + ids.size).batch(8).to_iter_dataset()
  grain.experimental.assert_equal_output_after_checkpoint(pipeline)


def _config(tmp_path, counts: tuple[int, int] = (50, 70), **overrides) -> PipelineConfig:
  rng = np.random.default_rng(5)
  return coded_config(
    tmp_path, [rng.integers(1, 30, counts[0]).tolist(), rng.integers(1, 20, counts[1]).tolist()], **overrides
  )


def test_the_mixture_dataset_yields_the_streams_documents_in_order(tmp_path):
  cfg = _config(tmp_path, mixture={"weights": {"d0": 3, "d1": 1}}, stop_after_passes=1, exhausted_policy="repeat")
  refs = list(DocumentStream.open(cfg))
  docs = list(MixtureDataset(cfg, dataset_ids=True))
  assert len(docs) == len(refs) > 100
  with open_dataset(str(tmp_path / "d0")) as d0, open_dataset(str(tmp_path / "d1")) as d1:
    readers = {"d0": d0, "d1": d1}
    for ref, doc in zip(refs, docs):
      assert doc["tokens"].tolist() == readers[ref.dataset][ref.record].tolist()
      assert doc["dataset_ids"].tolist() == [cfg.names.index(ref.dataset)] * ref.length


def test_the_mixture_dataset_follows_a_schedule_whatever_its_chunking(tmp_path):
  # The weights change after step 3: each document is picked with the weights of the step its first token
  # falls in, as `DocumentStream`'s one-at-a-time iteration does, whatever the chunks read at once.
  cfg = _config(
    tmp_path,
    mixture={
      "weights": None,
      "schedule": [{"until_step": 3, "weights": {"d0": 1, "d1": 1}}, {"weights": {"d0": 1, "d1": 9}}],
    },
    exhausted_policy="repeat",
  )
  stream = DocumentStream.open(cfg)
  expected = [next(stream).dataset for _ in range(200)]
  for chunk_docs in (1, 7, 1024):
    iterator = MixtureDatasetIterator(PipelineSpec(cfg), dataset_ids=True, chunk_docs=chunk_docs)
    got = [cfg.names[int(next(iterator)["dataset_ids"][0])] for _ in range(200)]
    assert got == expected, chunk_docs
  early, late = expected[:20], expected[-100:]
  assert late.count("d1") > 80 and early.count("d1") < 15  # the schedule did change the picks


def test_the_mixture_dataset_passes_grains_checkpoint_assertion_before_and_after_grain_packing(tmp_path):
  cfg = _config(tmp_path, (15, 20), stop_after_passes=1, exhausted_policy="repeat")  # restored at each element
  mixture = MixtureDataset(cfg, dataset_ids=True)
  grain.experimental.assert_equal_output_after_checkpoint(mixture.map(lambda d: d["tokens"]))
  packed = grain.experimental.FirstFitPackIterDataset(
    mixture.filter(lambda d: d["tokens"].size > 2), length_struct={"tokens": 32, "dataset_ids": 32}, num_packing_bins=4
  )
  grain.experimental.assert_equal_output_after_checkpoint(packed)
  rows = list(packed)
  assert all(row["tokens"].shape == (32,) for row in rows) and len(rows) > 8


def test_a_mixture_state_of_another_order_is_refused(tmp_path):
  cfg = _config(tmp_path, exhausted_policy="repeat")
  iterator = iter(MixtureDataset(cfg))
  for _ in range(5):
    next(iterator)
  state = json.loads(json.dumps(iterator.get_state()))
  reseeded = iter(MixtureDataset(PipelineConfig.from_dict({**cfg.to_dict(), "seed": 99})))
  with pytest.raises(CheckpointError, match=r"mixture state: the config or data changed .*seed"):
    reseeded.set_state(state)
  unsealed = {k: v for k, v in state.items() if k != "digest"}
  with pytest.raises(CheckpointError, match=r"offset must be an int >= 0"):
    iterator.set_state(seal({**unsealed, "offset": -1}))
  # an edited position is refused by the digest, and the iterator goes on where it was
  after = [next(iterator)["tokens"].tolist() for _ in range(3)]
  iterator.set_state(state)
  for edited in ({**state, "offset": state["offset"] + 1}, {**state, "stream": {**state["stream"], "emitted": 7}}):
    with pytest.raises(CheckpointError, match=r"mixture state: its digest does not match"):
      iterator.set_state(edited)
  assert [next(iterator)["tokens"].tolist() for _ in range(3)] == after


@pytest.mark.slow
@pytest.mark.multiprocess
def test_a_mixture_dataset_on_two_processes_is_refused_naming_what_to_use(tmp_path):
  cfg = _config(tmp_path)
  script = tmp_path / "host.py"
  script.write_text(
    textwrap.dedent(
      f"""
      import os, sys
      os.environ["JAX_PLATFORMS"] = "cpu"
      import jax
      jax.config.update("jax_cpu_collectives_implementation", "gloo")
      jax.distributed.initialize("localhost:" + sys.argv[1], 2, int(sys.argv[2]))
      from jaxdata import ConfigError, PipelineConfig
      from jaxdata.integrations.grain_mixture import MixtureDataset
      cfg = PipelineConfig.from_dict({cfg.to_dict()!r})
      try:
        MixtureDataset(cfg)
      except ConfigError as e:
        assert "one of 2 jax.distributed processes" in str(e) and "Pipeline(cfg, mesh=mesh)" in str(e), e
      else:
        raise SystemExit("MixtureDataset was built on 2 processes")
      """
    )
  )
  port = str(free_port())
  run_workers(str(script), [[port, "0"], [port, "1"]], timeout=120)


@pytest.mark.slow
@pytest.mark.multiprocess
def test_grain_worker_processes_read_a_source_they_unpickle(datasets, documents, tmp_path):
  path, _ = datasets["megatron"]
  script = textwrap.dedent(
    f"""
    import json, sys
    import grain
    from absl import flags
    from jaxdata.sources.opening import open_dataset

    if __name__ == "__main__":
      flags.FLAGS.mark_as_parsed()  # Grain's workers read absl flags; outside absl.app.run nobody parses them
      source = grain.MapDataset.source(open_dataset({path!r})).shuffle(seed=1).map(lambda ids: ids.tolist())
      in_process = list(source.to_iter_dataset())
      iterator = iter(source.to_iter_dataset().mp_prefetch(grain.MultiprocessingOptions(num_workers=2)))
      first = [next(iterator) for _ in range(30)]
      state = iterator.get_state()
      rest = list(iterator)
      restored = iter(source.to_iter_dataset().mp_prefetch(grain.MultiprocessingOptions(num_workers=2)))
      restored.set_state(state)
      again = list(restored)
      iterator.close(); restored.close()
      json.dump({{"in_process": in_process, "workers": first + rest, "resumed": again, "tail": rest}}, sys.stdout)
    """
  )
  (tmp_path / "workers.py").write_text(script)
  done = subprocess.run(
    [sys.executable, str(tmp_path / "workers.py")], capture_output=True, text=True, timeout=300, env=worker_env()
  )
  assert done.returncode == 0, done.stderr[-3000:]
  result = json.loads(done.stdout)
  assert sorted(result["in_process"]) == sorted(documents)
  assert result["workers"] == result["in_process"]  # Grain's workers interleave back to the one-process order
  assert result["resumed"] == result["tail"]


BAD_INDICES = [
  ([1.5, 2.9], TypeError, "float64"),
  (["1", "2"], TypeError, "str"),
  (np.array([True, False, True]), TypeError, "bool"),
  ([True, False], TypeError, "booleans"),
  ([[1], [2]], TypeError, "2-D"),
  ([np.uint64(2**63)], IndexError, "9223372036854775808 out of range"),
  ([2**64], TypeError, "object"),
  (None, TypeError, "NoneType"),
  ("12", TypeError, "str"),
  ([-41], IndexError, "index -41 out of range for 40"),
  ([40], IndexError, "index 40 out of range for 40"),
]


@pytest.mark.parametrize("indices, error, names", BAD_INDICES, ids=[repr(b[0])[:30] for b in BAD_INDICES])
def test_getitems_takes_integer_indices_only_and_names_the_value(tmp_path, indices, error, names):
  write_coded_dataset(str(tmp_path / "x"), 0, [3] * 40)
  with open_dataset(str(tmp_path / "x")) as dataset:
    with pytest.raises(error, match=re.escape(names)) as raised:
      dataset.__getitems__(indices)
    assert str(tmp_path / "x") in str(raised.value)
    assert [r.tolist() for r in dataset.__getitems__(np.array([-1, 0], np.int32))] == [
      dataset[39].tolist(),
      dataset[0].tolist(),
    ]
