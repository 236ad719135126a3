"""The demo corpus: three datasets built from what every Python install has.

    code       the standard library's modules, cut at blank lines (a document is a function or class)
    docs       pydoc help topics, one per document
    synthetic  deterministic prose from the topics' words, lognormal lengths

All are converted with the byte tokenizer and cached under the cache dir.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import sysconfig
import time
from typing import Callable

import numpy as np
import pydoc_data.topics

from jaxdata.errors import DatasetError
from jaxdata.sources.dataset import TokenDataset
from jaxdata.sources.manifest import MANIFEST_NAME
from jaxdata.tools.convert import ConvertOptions, convert

__all__ = ["Log", "build_demo_corpus"]

MAX_CODE_FILES = 400  # standard-library modules, to keep the first run short
CORPUS_VERSION = "2"  # bump when the corpus recipe changes; older caches are rebuilt
SYNTHETIC_DOCUMENTS = 6000
Log = Callable[[str], None]


def _stdlib_modules() -> list[str]:
  stdlib = sysconfig.get_paths()["stdlib"]
  names = sorted(n for n in os.listdir(stdlib) if n.endswith(".py"))
  return [os.path.join(stdlib, n) for n in names[:MAX_CODE_FILES]]


def _write_docs_jsonl(path: str) -> None:
  topics = pydoc_data.topics.topics
  with open(path, "w") as f:
    for key in sorted(topics):
      f.write(json.dumps({"topic": key, "text": topics[key]}) + "\n")


def _write_synthetic_jsonl(path: str) -> None:
  """Deterministic prose: words of the help topics, lognormal document lengths."""
  words = sorted({w for text in pydoc_data.topics.topics.values() for w in text.split() if w.isalpha()})
  rng = np.random.default_rng(0)
  lengths = np.clip(rng.lognormal(np.log(80), 0.8, SYNTHETIC_DOCUMENTS), 5, 2000).astype(int)
  with open(path, "w") as f:
    for n in lengths:
      f.write(json.dumps({"text": " ".join(rng.choice(words, n).tolist()) + "."}) + "\n")


def build_demo_corpus(cache_dir: str, log: Log = print) -> dict[str, str]:
  """Converts (or reuses) the demo datasets; returns {name: dataset dir}."""
  raw_dir = os.path.join(cache_dir, "raw")
  stamp = os.path.join(cache_dir, "corpus_version")
  if os.path.exists(cache_dir) and (not os.path.exists(stamp) or open(stamp).read() != CORPUS_VERSION):
    shutil.rmtree(cache_dir)  # built by another jaxdata version: rebuild
  os.makedirs(raw_dir, exist_ok=True)
  with open(stamp, "w") as f:
    f.write(CORPUS_VERSION)
  sources = {
      "synthetic": (os.path.join(raw_dir, "synthetic.jsonl"), _write_synthetic_jsonl, ConvertOptions(input_format="jsonl")),
      "code": (None, None, ConvertOptions(input_format="text", text_mode="paragraph")),
      "docs": (os.path.join(raw_dir, "docs.jsonl"), _write_docs_jsonl, ConvertOptions(input_format="jsonl")),
  }
  out = {}
  for name, (raw, write_raw, options) in sources.items():
    directory = os.path.join(cache_dir, name)
    out[name] = directory
    if os.path.exists(os.path.join(directory, MANIFEST_NAME)):
      try:
        TokenDataset(directory).close()
      except DatasetError as e:
        raise DatasetError(f"{e}\n(the demo cache is damaged; remove {cache_dir} and run again)") from e
      log(f"reusing {name} dataset in {directory}")
      continue
    if write_raw is not None:
      write_raw(raw)
    inputs = [raw] if raw else _stdlib_modules()
    started = time.perf_counter()
    manifest = convert(inputs, directory, name, dataclasses.replace(options, shard_bytes=1 << 20))
    log(f"converted {name}: {manifest.num_records} documents, {manifest.num_tokens:,} tokens, "
        f"{len(manifest.shards)} shards in {time.perf_counter() - started:.1f}s")
  return out
