"""Record compression against id width: bytes stored and the CPU of random reads, in one run.

    python -m benchmarks.compression [--out /tmp/jaxdata-compression] [--tokens 20000000]

The same documents (lognormal lengths, mean ~600 tokens) written by `DatasetWriter` with each
`compression` ("zstd", the default; "snappy"; "none") at both id widths: uint16 (vocab 50,257)
and uint32 (vocab 128,256). Then batched random reads (`read_global`, 4,096 records a call, the
pipeline's read path) until every width and compression has read --tokens tokens, interleaved
three times. Printed per cell: bytes stored per token, tokens/s, and CPU-ms per 65,536 tokens of
the whole process (ArrayRecord decodes on its own threads). Random ids are the compressor's
worst case but for their zero high bits: text token ids, which repeat, compress further.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

from jaxdata.sources import DatasetWriter, TokenDataset

WIDTHS = {"uint16": 50_257, "uint32": 128_256}
COMPRESSIONS = ("zstd", "snappy", "none")


def write(out: str, width: str, compression: str, lengths: np.ndarray, seed: int) -> str:
  directory = os.path.join(out, f"{width}-{compression}")
  if not os.path.exists(os.path.join(directory, "manifest.json")):
    vocab = WIDTHS[width]
    tokens = np.random.default_rng(seed).integers(0, vocab, int(lengths.sum())).astype(width)
    writer = DatasetWriter(
      directory, "d", np.dtype(width), {"kind": "synthetic", "vocab_size": vocab}, 64 << 20, compression
    )
    writer.write_documents(tokens, lengths)
    writer.finish()
  return directory


def read_rate(directory: str, tokens: int) -> tuple[float, float]:
  """(tokens/s, CPU-ms per 65,536 tokens) of batched random reads."""
  with TokenDataset(directory) as ds:
    rng = np.random.default_rng(0)
    done, cpu, started = 0, time.process_time(), time.perf_counter()
    while done < tokens:
      done += ds.read_global(rng.choice(ds.num_records, 4096, replace=False)).tokens.size
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
  return done / seconds, 1e3 * cpu * 65_536 / done


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--out", default="/tmp/jaxdata-compression")
  parser.add_argument("--tokens", type=int, default=20_000_000, help="tokens per dataset and per read run")
  args = parser.parse_args()
  rng = np.random.default_rng(1)
  lengths = np.clip(rng.lognormal(np.log(600) - 0.5, 1.0, args.tokens // 500), 1, 65_536).astype(np.int64)
  lengths = lengths[: int(np.searchsorted(np.cumsum(lengths), args.tokens)) + 1]
  cells = {(w, c): write(args.out, w, c, lengths, 7) for w in WIDTHS for c in COMPRESSIONS}
  runs: dict[tuple[str, str], list[tuple[float, float]]] = {cell: [] for cell in cells}
  for _ in range(3):  # interleaved
    for cell, directory in cells.items():
      runs[cell].append(read_rate(directory, args.tokens))
  print(f"{lengths.size:,} documents, {int(lengths.sum()):,} tokens; medians of 3 interleaved read runs")
  print(f"{'width':7s} {'compression':12s} {'bytes/token':>11s} {'tokens/s':>10s} {'CPU-ms / 64Ki':>14s}")
  for (width, compression), directory in cells.items():
    stored = sum(
      os.path.getsize(os.path.join(directory, f)) for f in os.listdir(directory) if f.endswith(".array_record")
    )
    rate = statistics.median(r[0] for r in runs[(width, compression)])
    cpu = statistics.median(r[1] for r in runs[(width, compression)])
    print(f"{width:7s} {compression:12s} {stored / lengths.sum():11.3f} {rate / 1e6:8.1f} M {cpu:14.2f}")


if __name__ == "__main__":
  main()
