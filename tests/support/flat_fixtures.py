"""Token files as other tools write them: a reference Megatron writer and OLMo-style flat files.

The Megatron writer follows the published MMapIndexedDataset layout
(Megatron-LM `_IndexWriter`), written here from the format, not with
Megatron's code::

    PREFIX.idx  b"MMIDIDX\\x00\\x00" | u64 version 1 | u8 dtype code | u64 sequence count | u64 document count
                | int32 sizes[sequences] | int64 pointers[sequences] (byte offsets) | int64 doc_idx[documents]
    PREFIX.bin  every sequence's tokens, back to back
"""

from __future__ import annotations

import gzip
import os
import struct
from collections.abc import Sequence

import numpy as np

MEGATRON_CODES = {np.dtype(np.uint16): 8, np.dtype(np.int32): 4, np.dtype(np.uint8): 1, np.dtype(np.float32): 7}


def write_megatron(
  prefix: str,
  documents: Sequence[Sequence[Sequence[int]]],
  dtype: np.dtype = np.dtype(np.uint16),
  code: int | None = None,
) -> None:
  """`documents[d]` is a list of sequences (lists of ids) that make document d."""
  dtype = np.dtype(dtype)
  sequences = [np.asarray(seq, dtype) for doc in documents for seq in doc]
  sizes = np.array([s.size for s in sequences], np.int32)
  pointers = np.concatenate([[0], np.cumsum(sizes.astype(np.int64) * dtype.itemsize)[:-1]]).astype(np.int64)
  doc_idx = np.concatenate([[0], np.cumsum([len(doc) for doc in documents])]).astype(np.int64)
  with open(prefix + ".bin", "wb") as f:
    for seq in sequences:
      f.write(seq.astype(dtype.newbyteorder("<")).tobytes())
  with open(prefix + ".idx", "wb") as f:
    f.write(b"MMIDIDX\x00\x00")
    f.write(struct.pack("<Q", 1))
    f.write(struct.pack("<B", MEGATRON_CODES[dtype] if code is None else code))
    f.write(struct.pack("<Q", len(sequences)))
    f.write(struct.pack("<Q", doc_idx.size))
    f.write(sizes.astype("<i4").tobytes())
    f.write(pointers.astype("<i8").tobytes())
    f.write(doc_idx.astype("<i8").tobytes())


def write_flat(path: str, documents: Sequence[Sequence[int]], dtype: np.dtype = np.dtype(np.uint16)) -> None:
  """OLMo-style: every document's ids (each ending with its EOS), concatenated, raw."""
  os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
  np.concatenate([np.asarray(d, dtype) for d in documents]).astype(np.dtype(dtype).newbyteorder("<")).tofile(path)


def random_documents(
  rng: np.random.Generator, count: int, eos_id: int, vocab: int = 60000, max_length: int = 40
) -> list[list[int]]:
  """Documents of 1..max_length tokens; each ends with eos_id, which appears nowhere else."""
  docs = []
  for _ in range(count):
    body = rng.integers(eos_id + 1, vocab, size=int(rng.integers(0, max_length)))
    docs.append([*body.tolist(), eos_id])
  return docs


def lying_megatron(prefix: str, documents: list[list[int]], stored: np.dtype, claimed_code: int) -> None:
  """A .bin of `stored` ids whose .idx claims another dtype, with sizes scaled so the byte counts still add up."""
  scale = np.dtype(stored).itemsize / {8: 2, 4: 4}[claimed_code]
  with open(prefix + ".bin", "wb") as f:
    for doc in documents:
      f.write(np.asarray(doc, stored).tobytes())
  sizes = (np.array([len(d) for d in documents]) * scale).astype(np.int32)
  pointers = np.concatenate([[0], np.cumsum(sizes.astype(np.int64) * {8: 2, 4: 4}[claimed_code])[:-1]])
  with open(prefix + ".idx", "wb") as f:
    f.write(b"MMIDIDX\x00\x00" + struct.pack("<Q", 1) + struct.pack("<B", claimed_code))
    f.write(struct.pack("<Q", len(documents)) + struct.pack("<Q", len(documents) + 1))
    f.write(sizes.astype("<i4").tobytes() + pointers.astype("<i8").tobytes())
    f.write(np.arange(len(documents) + 1, dtype="<i8").tobytes())


def write_dolma_memmap(path: str, documents: list[list[int]], dtype: str = "uint32") -> None:
  """As Dolma's tokenizer writes a part: raw ids back to back (a `np.memmap`, no NumPy header) under
  a `.npy` name, each document ending in its EOS."""
  ids = np.concatenate([np.asarray(d, dtype) for d in documents])
  memmap = np.memmap(path, dtype=dtype, mode="w+", shape=ids.shape)
  memmap[:] = ids
  memmap.flush()


def write_dolma_metadata(path: str, documents: list[list[int]]) -> None:
  """Dolma's metadata beside a memmap: one gzipped CSV row per document, start,end,id,src,loc (no header)."""
  ends = np.cumsum([len(d) for d in documents])
  with gzip.open(path, "wt", encoding="utf-8") as f:
    for i, (start, end) in enumerate(zip(np.r_[0, ends[:-1]], ends)):
      f.write(f"{start},{end},doc-{i},s3://bucket/src.jsonl.gz,{i + 1}\n")
