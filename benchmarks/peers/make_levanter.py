"""The peer benchmark's corpus as Levanter token caches, built by Levanter's own cache builder (run in its venv).

    python benchmarks/peers/make_levanter.py --out /tmp/jaxdata-peers

Reads each source's documents (token ids) from the Megatron files <out>/megatron/<source>.bin/.idx
(the index parsed with NumPy, as Megatron-Core's _IndexReader lays it out) and builds a Levanter
TreeCache of {"input_ids": int32[n]} rows, one per document, with `build_or_load_cache` (the
builder LmDataConfig.build_caches ends in) fed by a ShardedDataSource and a BatchProcessor. Writes
<out>/levanter/<source>/, then checks the cache against the Megatron documents: the row count, the
per-document offsets and every token id.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
from levanter.data import BatchProcessor, ShardedDataSource
from levanter.store.cache import CacheOptions, TreeCache, build_or_load_cache

SOURCES = ("web", "code", "books", "curated")
# Megatron-Core's DType codes (megatron/core/datasets/indexed_dataset.py)
MEGATRON_DTYPES = {
  1: np.uint8,
  2: np.int8,
  3: np.int16,
  4: np.int32,
  5: np.int64,
  6: np.float64,
  7: np.float32,
  8: np.uint16,
}
EXEMPLAR = {"input_ids": np.zeros((0,), dtype=np.int32)}  # what sides.py loads the caches with


def read_megatron_index(prefix: str) -> tuple[np.dtype, np.ndarray, np.ndarray, np.ndarray]:
  """The .idx of a Megatron pair: token dtype, sequence lengths, byte pointers and document indices."""
  with open(prefix + ".idx", "rb") as f:
    header = f.read(34)  # magic (9), version (<Q), dtype code (<B), sequence count (<Q), document count (<Q)
  if header[:9] != b"MMIDIDX\x00\x00":
    raise ValueError(f"{prefix}.idx: not a Megatron index")
  version = int(np.frombuffer(header, "<u8", 1, 9)[0])
  if version != 1:
    raise ValueError(f"{prefix}.idx: index version {version}, expected 1")
  dtype = np.dtype(MEGATRON_DTYPES[header[17]])
  sequences, documents = (int(n) for n in np.frombuffer(header, "<u8", 2, 18))
  index = np.memmap(prefix + ".idx", np.uint8, mode="r")
  lengths = np.frombuffer(index, "<i4", sequences, 34)
  pointers = np.frombuffer(index, "<i8", sequences, 34 + lengths.nbytes)
  document_indices = np.frombuffer(index, "<i8", documents, 34 + lengths.nbytes + pointers.nbytes)
  return dtype, lengths, pointers, document_indices


def megatron_documents(prefix: str) -> tuple[np.ndarray, np.ndarray]:
  """A Megatron pair's tokens (memory-mapped) and the token offsets of its documents (n + 1)."""
  dtype, lengths, pointers, document_indices = read_megatron_index(prefix)
  tokens = np.memmap(prefix + ".bin", dtype, mode="r")
  # a document is the sequences document_indices[i]:document_indices[i + 1], stored back to back
  sequence_starts = pointers // dtype.itemsize
  if not np.array_equal(sequence_starts[1:], sequence_starts[:-1] + lengths[:-1]):
    raise ValueError(f"{prefix}.bin: sequences not contiguous")
  offsets = np.append(sequence_starts, sequence_starts[-1] + lengths[-1])[document_indices]
  return tokens, offsets


class MegatronSource(ShardedDataSource[dict]):
  """One shard (the source): its documents in order, as {"input_ids": ids}; opened lazily, so it pickles small."""

  def __init__(self, prefix: str) -> None:
    self.prefix = prefix

  @property
  def shard_names(self) -> Sequence[str]:
    return [os.path.basename(self.prefix)]

  def open_shard_at_row(self, shard_name: str, row: int) -> Iterator[dict]:
    tokens, offsets = megatron_documents(self.prefix)
    for start, end in zip(offsets[row:-1], offsets[row + 1 :]):
      yield {"input_ids": tokens[start:end]}


class TokenIds(BatchProcessor[dict, dict]):
  """Pre-tokenized documents, stored as they are (int32: 4-byte ids, as the Megatron files hold them)."""

  def __call__(self, batch: Sequence[dict]) -> Sequence[dict]:
    return [{"input_ids": np.asarray(d["input_ids"], dtype=np.int32)} for d in batch]

  @property
  def output_exemplar(self) -> Any:
    return EXEMPLAR

  @property
  def num_cpus(self) -> int:
    return 1

  @property
  def metadata(self) -> dict[str, Any]:
    return {"source": "megatron token ids", "dtype": "int32"}


def check(cache: TreeCache, prefix: str) -> int:
  """Every document of the cache against the Megatron pair; returns the token count."""
  tokens, offsets = megatron_documents(prefix)
  store = cache.store.tree["input_ids"]
  rows = len(cache)
  if rows != offsets.size - 1:
    raise AssertionError(f"{prefix}: {rows} cache rows, {offsets.size - 1} Megatron documents")
  cached_offsets = np.asarray(store.offsets[1 : rows + 1].read().result())  # row ends; [0] holds the row count
  if not np.array_equal(cached_offsets, offsets[1:] - offsets[0]):
    raise AssertionError(f"{prefix}: document boundaries differ")
  total = int(offsets[-1] - offsets[0])
  if cache.flat_field_length("input_ids") != total:
    raise AssertionError(f"{prefix}: {cache.flat_field_length('input_ids')} cached tokens, {total} Megatron")
  if not np.array_equal(np.asarray(store.data[0:total].read().result()), tokens[offsets[0] : offsets[-1]]):
    raise AssertionError(f"{prefix}: token ids differ")
  for i in (0, rows // 2, rows - 1):  # and row by row, through the reader the datasets use
    if not np.array_equal(cache[i]["input_ids"], tokens[offsets[i] : offsets[i + 1]]):
      raise AssertionError(f"{prefix}: document {i} differs")
  return total


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--out", default="/tmp/jaxdata-peers")
  args = parser.parse_args()
  for name in SOURCES:
    prefix = os.path.join(args.out, "megatron", name)
    directory = os.path.join(args.out, "levanter", name)
    started = time.perf_counter()
    # batch_size: documents per processor call (its default 128 makes many tiny tensorstore writes)
    cache = build_or_load_cache(directory, MegatronSource(prefix), TokenIds(), CacheOptions(batch_size=1024))
    built = time.perf_counter() - started
    total = check(cache, prefix)
    print(f"{name}: {len(cache):,} documents, {total:,} tokens, identical to Megatron's -> {directory} ({built:.1f} s)")


if __name__ == "__main__":
  main()
