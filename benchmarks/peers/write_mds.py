"""The peer benchmark's corpus as MDS shards, written by Mosaic Streaming's own MDSWriter (run in its venv).

    python benchmarks/peers/write_mds.py --out /tmp/jaxdata-peers

Each source's tokens (the Megatron .bin file: flat uint32) cut into 2,048-token samples, as
Streaming's LLM recipes store pre-tokenized text: {"tokens": ndarray uint32, "source": int}.
Writes <out>/mds/<source>/.
"""

from __future__ import annotations

import argparse
import os

import numpy as np
from streaming import MDSWriter

SOURCES = ("web", "code", "books", "curated")
SEQ_LEN = 2048


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--out", default="/tmp/jaxdata-peers")
  args = parser.parse_args()
  for i, name in enumerate(SOURCES):
    directory = os.path.join(args.out, "mds", name)
    if os.path.exists(os.path.join(directory, "index.json")):
      continue
    tokens = np.fromfile(os.path.join(args.out, "megatron", f"{name}.bin"), np.uint32)
    samples = tokens[: tokens.size // SEQ_LEN * SEQ_LEN].reshape(-1, SEQ_LEN)
    with MDSWriter(out=directory, columns={"tokens": "ndarray:uint32", "source": "int"}, size_limit=1 << 26) as out:
      for sample in samples:
        out.write({"tokens": sample, "source": i})
    print(f"{name}: {len(samples):,} samples -> {directory}")


if __name__ == "__main__":
  main()
