"""The benchmark workload: 4 datasets with lognormal document lengths, ~100M tokens.

Later benchmarks (mixture, packing, pipeline, checkpoint) reuse this corpus.
Documents are random token ids written through `jaxdata.sources.DatasetWriter`, the
same writer path `jaxdata convert` uses.

    python benchmarks/make_corpus.py --out /tmp/jaxdata-bench [--scale 0.1] [--vocab 128256]

A vocabulary up to 65,536 ids is stored as uint16, a larger one as uint32
(current model families: 128k-256k ids). `corpus_dir(base, vocab)` names each
width's directory, so both corpora live side by side.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import time

import numpy as np

from jaxdata.sources import DatasetWriter, TokenDataset
from jaxdata.sources.manifest import COMPRESSIONS, Manifest

VOCAB_SIZE = 50_257  # GPT-2's: uint16 ids
VOCAB_SIZE_U32 = 128_256  # Llama 3's: uint32 ids
VOCABS = {"uint16": VOCAB_SIZE, "uint32": VOCAB_SIZE_U32}


def id_dtype(vocab_size: int) -> np.dtype:
  """The narrowest stored id type for a vocabulary."""
  return np.dtype("<u2") if vocab_size <= 1 << 16 else np.dtype("<u4")


def corpus_dir(base: str, vocab_size: int, compression: str = "zstd") -> str:
  """The corpus directory for a vocabulary and compression: `base` for uint16,
  `base-u32` for uint32; `-none` / `-snappy` appended for those compressions."""
  width = "" if id_dtype(vocab_size).itemsize == 2 else "-u32"
  return base + width + ("" if compression == "zstd" else f"-{compression}")


@dataclasses.dataclass(frozen=True)
class CorpusSpec:
  """One benchmark dataset: mean document length, cap, and token budget."""

  name: str
  mean_length: float
  max_length: int
  tokens: int
  sigma: float = 1.0


SPECS = (
  CorpusSpec("web", 600, 65_536, 40_000_000),
  CorpusSpec("code", 1_500, 65_536, 25_000_000),
  CorpusSpec("books", 8_400, 65_536, 25_000_000),
  CorpusSpec("curated", 400, 65_536, 10_000_000),
)
# A second corpus with another length distribution (the same names and token budgets): many short documents
# (lognormal, median 200 tokens: mean 200 e^(sigma^2 / 2) = 330 at sigma 1) and one long-document set.
SHORT_SPECS = (
  CorpusSpec("web", 330, 65_536, 40_000_000),
  CorpusSpec("code", 330, 65_536, 25_000_000),
  CorpusSpec("books", 30_000, 262_144, 25_000_000, sigma=0.5),
  CorpusSpec("curated", 330, 65_536, 10_000_000),
)
CORPORA = {"project": SPECS, "short": SHORT_SPECS}


def lognormal_lengths(spec: CorpusSpec, tokens: int, rng: np.random.Generator) -> np.ndarray:
  """Lengths with the given mean (before the cap) summing to about `tokens`."""
  mu = np.log(spec.mean_length) - spec.sigma**2 / 2
  count = max(1, int(tokens / spec.mean_length * 1.1))
  lengths = np.clip(rng.lognormal(mu, spec.sigma, count).astype(np.int64), 1, spec.max_length)
  stop = int(np.searchsorted(np.cumsum(lengths), tokens)) + 1
  return lengths[:stop]


def make_corpus(
  out_dir: str,
  scale: float = 1.0,
  seed: int = 0,
  shard_bytes: int = 8 << 20,
  vocab_size: int = VOCAB_SIZE,
  compression: str = "zstd",
  specs: tuple[CorpusSpec, ...] = SPECS,
) -> dict[str, str]:
  """Writes (or reuses) the corpus; returns {dataset name: directory}. The
  same seed gives the same document lengths at either width and compression:
  the corpora differ only in their ids and how they are stored."""
  dtype = id_dtype(vocab_size)
  stats: dict[str, object] = {"generator": "benchmarks/make_corpus.py", "seed": seed, "scale": scale}
  if specs != SPECS:  # the second corpus (its stats name it: never reused as the first)
    stats["lengths"] = [dataclasses.astuple(s) for s in specs]
  if compression != "zstd":  # the older corpora's stats, unchanged: they are reused as they are
    stats["compression"] = compression
  dirs = {}
  for i, spec in enumerate(specs):
    directory = os.path.join(out_dir, spec.name)
    dirs[spec.name] = directory
    if os.path.exists(os.path.join(directory, "manifest.json")):
      manifest = Manifest.load(directory)
      same = np.dtype(manifest.dtype) == dtype and manifest.stats == stats  # else: another corpus, rewritten
      if manifest.format_version >= 2 and same:  # 2 and 3 open alike (3 adds flat formats)
        TokenDataset(directory).close()  # validates a reused corpus
        continue
      shutil.rmtree(directory)  # an older format opens slower (full hashes): the figures would not be today's
    rng = np.random.default_rng([seed, i])
    lengths = lognormal_lengths(spec, int(spec.tokens * scale), rng)
    writer = DatasetWriter(
      directory, spec.name, dtype, {"kind": "synthetic", "vocab_size": vocab_size}, shard_bytes, compression
    )
    for chunk in np.array_split(lengths, max(1, lengths.size // 8192)):
      writer.write_documents(rng.integers(0, vocab_size, int(chunk.sum())).astype(dtype), chunk)
    writer.finish(stats)
  return dirs


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--out", default="/tmp/jaxdata-bench")
  parser.add_argument("--scale", type=float, default=1.0, help="fraction of ~100M tokens")
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument(
    "--vocab", type=int, action="append", help=f"vocabulary size, repeatable (default: both widths, {VOCABS})"
  )
  parser.add_argument("--compression", default="zstd", choices=sorted(COMPRESSIONS))
  args = parser.parse_args()
  started = time.perf_counter()
  directories = []
  for vocab in args.vocab or VOCABS.values():
    out = corpus_dir(args.out, vocab, args.compression)
    directories += make_corpus(out, args.scale, args.seed, vocab_size=vocab, compression=args.compression).items()
  for name, directory in directories:
    with TokenDataset(directory) as ds:
      print(
        f"{name:8s} {ds.num_shards:3d} shards {ds.num_records:9,d} docs "
        f"{ds.num_tokens:13,d} tokens  mean {ds.lengths.mean():7.0f}  {ds.dtype}  {directory}"
      )
  print(f"done in {time.perf_counter() - started:.1f}s")


if __name__ == "__main__":
  main()
