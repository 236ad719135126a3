"""`jaxdata index`: one dataset per directory, a dtype check from token statistics, --force."""

from __future__ import annotations

import os

import numpy as np
import pytest

from jaxdata import DatasetError
from jaxdata.cli import main
from jaxdata.sources import TokenDataset
from jaxdata.sources.boundaries import DocumentBoundaries
from jaxdata.sources.flat_index import build_flat_index
from jaxdata.sources.index import build_index, dtype_suspicion
from test_sources import write_raw_shard


def zipf_ids(rng: np.random.Generator, count: int, vocab: int) -> np.ndarray:
  """Token ids as text has them: Zipf-distributed frequencies, ids spread over the vocabulary
  (a BPE id follows merge order, not frequency)."""
  ranks = np.minimum(rng.zipf(1.1, count), vocab) - 1
  return np.random.default_rng(vocab).permutation(vocab)[ranks].astype(np.int64)


def shards_in(directory, rng: np.random.Generator, dtype: str, vocab: int, count: int = 2) -> list[str]:
  os.makedirs(directory, exist_ok=True)
  paths = []
  for i in range(count):
    paths.append(str(directory / f"s{i}.array_record"))
    write_raw_shard(paths[-1], [zipf_ids(rng, int(n), vocab).astype(dtype).tobytes() for n in rng.integers(5, 90, 40)])
  return paths


def test_shards_of_several_directories_are_refused_or_indexed_one_dataset_each(tmp_path, capsys):
  rng = np.random.default_rng(0)
  shards = shards_in(tmp_path / "web", rng, "<u2", 50_000) + shards_in(tmp_path / "code", rng, "<u2", 50_000)
  assert main(["index", *shards, "--dtype", "uint16"]) == 1
  assert "they lie in 2 directories" in capsys.readouterr().err and not (tmp_path / "manifest.json").exists()
  assert main(["index", *shards, "--dtype", "uint16", "--per-directory", "--out", str(tmp_path)]) == 1
  assert "--per-directory: writes each directory's index beside its files; it takes no --out" in capsys.readouterr().err
  assert main(["index", *shards, "--dtype", "uint16", "--per-directory", "-q"]) == 0
  for name in ("web", "code"):
    with TokenDataset(str(tmp_path / name)) as dataset:
      assert (dataset.name, dataset.num_shards, dataset.num_records) == (name, 2, 80)
  assert main(["index", *shards, "--dtype", "uint16", "--out", str(tmp_path), "-q"]) == 0  # merged on purpose
  with TokenDataset(str(tmp_path)) as merged:
    assert merged.num_records == 160


@pytest.mark.parametrize("written, claimed", [("<u4", "uint16"), ("<u2", "uint32")])
def test_ids_read_as_the_wrong_dtype_are_named(tmp_path, written, claimed):
  rng = np.random.default_rng(1)
  shards = shards_in(tmp_path / "d", rng, written, 60_000, count=1)
  if written == "<u2":  # an even count per record, so the bytes are also whole uint32s
    write_raw_shard(
      shards[0], [zipf_ids(rng, 2 * int(n), 60_000).astype("<u2").tobytes() for n in rng.integers(3, 40, 40)]
    )
  expected = "uint32 ids read as uint16" if claimed == "uint16" else "uint16 ids read as uint32"
  with pytest.raises(DatasetError, match=rf"s0\.array_record: looks like {expected}"):
    build_index(shards, claimed)
  assert build_index(shards, claimed, check_dtype=False).num_records == 40  # --no-dtype-check: as asked


def test_real_uint32_ids_pass_the_check():
  rng = np.random.default_rng(2)
  for vocab in (70_000, 150_000, 256_000):  # Zipf-distributed ids of real vocabularies
    assert dtype_suspicion(zipf_ids(rng, 50_000, vocab).astype("<u4").tobytes(), np.dtype("<u4")) is None
    assert dtype_suspicion(zipf_ids(rng, 50_000, vocab).astype("<u4").tobytes(), np.dtype("<u2")) is not None


def test_reindexing_needs_force_and_rebuilds(tmp_path, capsys):
  rng = np.random.default_rng(3)
  shards = shards_in(tmp_path / "d", rng, "<u2", 30_000)
  assert main(["index", *shards, "--dtype", "uint16", "-q"]) == 0
  assert main(["index", *shards, "--dtype", "uint16", "-q"]) == 1
  assert "already has a manifest.json; --force rebuilds it" in capsys.readouterr().err  # the CLI's words
  with pytest.raises(FileExistsError, match="already has a manifest.json; `force=True` rebuilds it"):
    build_index(shards, "uint16")  # the library's: its parameter, not a flag
  write_raw_shard(shards[1], [b"\x05\x00" * 7] * 3)  # the shard changed: rebuild
  assert main(["index", *shards, "--dtype", "uint16", "--force", "--no-dtype-check", "-q"]) == 0
  with TokenDataset(str(tmp_path / "d")) as dataset:
    assert dataset.num_records == 43 and dataset.shard_num_records.tolist() == [40, 3]


def test_flat_files_get_the_same_dtype_check(tmp_path):
  rng = np.random.default_rng(4)
  zipf_ids(rng, 100_000, 60_000).astype("<u4").tofile(tmp_path / "t.bin")
  with pytest.raises(DatasetError, match=r"t\.bin: looks like uint32 ids read as uint16"):
    build_flat_index("flat", [str(tmp_path / "t.bin")], dtype="uint16", boundaries=DocumentBoundaries.eos(0))
  eos = int(np.fromfile(tmp_path / "t.bin", "<u4")[0])  # an id the file holds (0 never occurs: refused)
  assert (
    build_flat_index("flat", [str(tmp_path / "t.bin")], dtype="uint32", boundaries=DocumentBoundaries.eos(eos)).dtype
    == "uint32"
  )


def test_a_folder_is_indexed_as_its_shards_or_named_when_it_holds_none(tmp_path, capsys):
  rng = np.random.default_rng(1)
  shards_in(tmp_path / "web", rng, "<u2", 50_000)
  assert main(["index", str(tmp_path / "web"), "--dtype", "uint16", "-q"]) == 0  # was "shard file does not exist"
  with TokenDataset(str(tmp_path / "web")) as dataset:
    assert (dataset.num_shards, dataset.num_records) == (2, 80)
  os.makedirs(tmp_path / "empty")
  assert main(["index", str(tmp_path / "empty"), "--dtype", "uint16"]) == 1
  assert "empty: a folder with no .array_record files; pass the shard files" in capsys.readouterr().err
