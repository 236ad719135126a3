"""The peer benchmark's corpus, written by Megatron-Core's own IndexedDatasetBuilder (run in its venv).

    python benchmarks/peers/make_megatron.py --out /tmp/jaxdata-peers [--tokens 50000000]

Four sources at the workload's token shares (.62/.18/.12/.08 of --tokens), lognormal document
lengths (means 600, 1,500, 8,400 and 400 tokens, as benchmarks/make_corpus.py), uint32 ids below
128,256, stored as Megatron stores ids of a vocabulary over 65,500: int32 (4 bytes). Writes <out>/megatron/<source>.bin/.idx. The .bin files are flat 4-byte tokens: OLMo-core
reads them as its numpy token files; jaxdata indexes the pairs in place (`jaxdata index`).
"""

from __future__ import annotations

import argparse
import os

import numpy as np
import torch
from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder

SOURCES = {"web": (0.62, 600), "code": (0.18, 1_500), "books": (0.12, 8_400), "curated": (0.08, 400)}
VOCAB = 128_256


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--out", default="/tmp/jaxdata-peers")
  parser.add_argument("--tokens", type=int, default=50_000_000)
  args = parser.parse_args()
  directory = os.path.join(args.out, "megatron")
  os.makedirs(directory, exist_ok=True)
  for i, (name, (share, mean)) in enumerate(SOURCES.items()):
    prefix = os.path.join(directory, name)
    if os.path.exists(prefix + ".idx"):
      continue
    rng = np.random.default_rng([0, i])
    lengths = np.clip(rng.lognormal(np.log(mean) - 0.5, 1.0, int(share * args.tokens / mean * 1.2)), 1, 65_536)
    lengths = lengths.astype(np.int64)
    lengths = lengths[: int(np.searchsorted(np.cumsum(lengths), share * args.tokens)) + 1]
    builder = IndexedDatasetBuilder(prefix + ".bin", dtype=np.int32)  # its 4-byte ids (no uint32 code)
    tokens = rng.integers(0, VOCAB, int(lengths.sum()), dtype=np.uint32)
    try:
      for document in np.split(tokens, np.cumsum(lengths)[:-1]):
        builder.add_document(torch.from_numpy(document.astype(np.int64)), [document.size])
      builder.finalize(prefix + ".idx")
    except BaseException:  # a partial pair would be taken as written by the next run (.idx exists)
      for suffix in (".bin", ".idx"):
        if os.path.exists(prefix + suffix):
          os.remove(prefix + suffix)
      raise
    print(f"{name}: {lengths.size:,} documents, {lengths.sum():,} tokens -> {prefix}.bin/.idx")


if __name__ == "__main__":
  main()
