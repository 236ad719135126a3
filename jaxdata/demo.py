"""`jaxdata demo`: build the embedded sample corpus and show it working.

The corpus comes from text every Python install carries, so the demo needs
no network: the standard library's own modules as a ``code`` dataset (one
document per file) and the ``pydoc_data`` help topics as a ``docs`` dataset
(JSONL, one document per topic). Both go through `convert` with the
byte-level tokenizer into a cache directory and are reused on later runs.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sysconfig
import time
from typing import Callable

import numpy as np
import pydoc_data.topics

from jaxdata.convert import ConvertOptions, convert
from jaxdata.errors import DatasetError
from jaxdata.sources.dataset import TokenDataset
from jaxdata.sources.manifest import MANIFEST_NAME
from jaxdata.tokenizers import ByteTokenizer

__all__ = ["DemoResult", "build_demo_corpus", "default_cache_dir", "run_demo"]

# At most this many standard-library modules, to keep the first run short.
MAX_CODE_FILES = 400


def default_cache_dir() -> str:
  base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
  return os.path.join(base, "jaxdata", "demo")


def _stdlib_modules() -> list[str]:
  stdlib = sysconfig.get_paths()["stdlib"]
  names = sorted(n for n in os.listdir(stdlib) if n.endswith(".py"))
  return [os.path.join(stdlib, n) for n in names[:MAX_CODE_FILES]]


def _write_docs_jsonl(path: str) -> None:
  topics = pydoc_data.topics.topics
  with open(path, "w") as f:
    for key in sorted(topics):
      f.write(json.dumps({"topic": key, "text": topics[key]}) + "\n")


def build_demo_corpus(
    cache_dir: str, log: Callable[[str], None] = print
) -> dict[str, str]:
  """Converts (or reuses) the demo datasets; returns {name: dataset dir}."""
  raw_dir = os.path.join(cache_dir, "raw")
  os.makedirs(raw_dir, exist_ok=True)
  docs_jsonl = os.path.join(raw_dir, "docs.jsonl")
  sources = {
      "code": ([*_stdlib_modules()], ConvertOptions(input_format="text", text_mode="file")),
      "docs": ([docs_jsonl], ConvertOptions(input_format="jsonl", field="text")),
  }
  out = {}
  for name, (inputs, options) in sources.items():
    directory = os.path.join(cache_dir, name)
    out[name] = directory
    if os.path.exists(os.path.join(directory, MANIFEST_NAME)):
      try:
        TokenDataset(directory).close()
        log(f"reusing {name} dataset in {directory}")
        continue
      except DatasetError as e:
        raise DatasetError(
            f"{e}\n(the demo cache is damaged; remove {cache_dir} and run again)"
        ) from e
    if name == "docs":
      _write_docs_jsonl(docs_jsonl)
    started = time.perf_counter()
    manifest = convert(inputs, directory, name, dataclasses.replace(options, shard_bytes=1 << 20))
    log(
        f"converted {name}: {manifest.num_records} documents, {manifest.num_tokens} "
        f"tokens, {len(manifest.shards)} shards in {time.perf_counter() - started:.1f}s"
    )
  return out


@dataclasses.dataclass(frozen=True)
class DemoResult:
  dataset_dirs: dict[str, str]
  records_read: int
  tokens_read: int
  read_seconds: float
  sample: str


def run_demo(
    cache_dir: str | None = None, log: Callable[[str], None] = print, seed: int = 0
) -> DemoResult:
  """Builds the corpus and reads every document of it in random batches."""
  dirs = build_demo_corpus(cache_dir or default_cache_dir(), log)
  rng = np.random.default_rng(seed)
  records = tokens = 0
  sample = ""
  started = time.perf_counter()
  for name, directory in dirs.items():
    with TokenDataset(directory) as dataset:
      order = rng.permutation(dataset.num_records)
      for batch in np.array_split(order, max(1, dataset.num_records // 256)):
        read = dataset.read_global(batch)
        records += len(read)
        tokens += read.tokens.size
      if name == "docs":
        sample = ByteTokenizer().decode(dataset.read_global([0])[0])[:120]
  return DemoResult(dirs, records, tokens, time.perf_counter() - started, sample)
