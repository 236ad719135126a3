"""The demo corpus: three datasets built from what every Python install has.

    code       the standard library's modules, cut at blank lines (a document is a function or class)
    docs       pydoc help topics, cut at blank lines into sections
    synthetic  deterministic prose from the topics' words, lognormal lengths

Every document is at most MAX_DOCUMENT_BYTES (a longer paragraph is cut at
line ends), so each fits in one step of the demo's pipeline (8,192 tokens):
the stream's per-step mixture then holds within one document of its target.
All are converted with the byte tokenizer and cached under the cache dir.
"""

from __future__ import annotations

import json
import os
import pydoc_data.topics
import re
import sysconfig
import time
from collections.abc import Callable

import numpy as np

from jaxdata.conversion.local_runner import convert
from jaxdata.conversion.options import ConvertOptions
from jaxdata.errors import DatasetError
from jaxdata.sources.dataset import TokenDataset
from jaxdata.sources.fileutil import claim_directory, clear_claimed
from jaxdata.sources.manifest import MANIFEST_NAME

__all__ = ["Log", "OWNER", "build_demo_corpus"]

MAX_CODE_FILES = 400  # standard-library modules, to keep the first run short
CORPUS_VERSION = "3"  # bump when the corpus recipe changes; older caches are rebuilt
SYNTHETIC_DOCUMENTS = 6000
MAX_DOCUMENT_BYTES = 6000  # below the demo's 8,192 tokens per step
_BLANK_LINES = re.compile(r"\n[ \t]*\n")
Log = Callable[[str], None]
OWNER = "jaxdata demo"  # the marker of directories the demo created (and may clear)


def _stdlib_modules() -> list[str]:
  stdlib = sysconfig.get_paths()["stdlib"]
  names = sorted(n for n in os.listdir(stdlib) if n.endswith(".py"))
  return [os.path.join(stdlib, n) for n in names[:MAX_CODE_FILES]]


def _documents(text: str) -> list[str]:
  """Paragraphs (blank-line separated) of at most MAX_DOCUMENT_BYTES UTF-8
  bytes: a longer one is cut at line ends (or, for a single huge line, by size)."""
  out = []
  for paragraph in _BLANK_LINES.split(text):
    chunk = ""
    for line in paragraph.splitlines(keepends=True):
      while len(line.encode()) > MAX_DOCUMENT_BYTES:
        head = line.encode()[:MAX_DOCUMENT_BYTES].decode("utf-8", "ignore")
        out.append(head)
        line = line[len(head) :]
      if chunk and len((chunk + line).encode()) > MAX_DOCUMENT_BYTES:
        out.append(chunk)
        chunk = ""
      chunk += line
    out.append(chunk)
  return [d for d in (d.strip("\n") for d in out) if d.strip()]


def _write_code_jsonl(path: str) -> None:
  with open(path, "w") as f:
    for module in _stdlib_modules():
      with open(module, encoding="utf-8", errors="replace") as source:
        for document in _documents(source.read()):
          f.write(json.dumps({"text": document}) + "\n")


def _write_docs_jsonl(path: str) -> None:
  topics = pydoc_data.topics.topics
  with open(path, "w") as f:
    for key in sorted(topics):
      for document in _documents(topics[key]):
        f.write(json.dumps({"topic": key, "text": document}) + "\n")


def _write_synthetic_jsonl(path: str) -> None:
  """Deterministic prose: words of the help topics, lognormal document lengths."""
  words = sorted({w for text in pydoc_data.topics.topics.values() for w in text.split() if w.isalpha()})
  rng = np.random.default_rng(0)
  lengths = np.clip(rng.lognormal(np.log(80), 0.8, SYNTHETIC_DOCUMENTS), 5, 600).astype(int)  # < 6,000 bytes
  with open(path, "w") as f:
    for n in lengths:
      f.write(json.dumps({"text": " ".join(rng.choice(words, n).tolist()) + "."}) + "\n")


def build_demo_corpus(cache_dir: str, log: Log = print) -> dict[str, str]:
  """Converts (or reuses) the demo datasets; returns {name: dataset dir}."""
  raw_dir = os.path.join(cache_dir, "raw")
  stamp = os.path.join(cache_dir, "corpus_version")
  # Refuses a non-empty directory the demo did not create (its marker): a file that happens to be
  # named like the demo's stamp proves nothing, so nothing is ever adopted and cleared.
  claim_directory(cache_dir, OWNER)
  if not os.path.exists(stamp) or open(stamp).read() != CORPUS_VERSION:
    clear_claimed(cache_dir, OWNER)  # built by another jaxdata version: rebuild
  os.makedirs(raw_dir, exist_ok=True)
  with open(stamp, "w") as f:
    f.write(CORPUS_VERSION)
  sources = {"synthetic": _write_synthetic_jsonl, "code": _write_code_jsonl, "docs": _write_docs_jsonl}
  options = ConvertOptions(input_format="jsonl", shard_bytes=1 << 20)
  out = {}
  for name, write_raw in sources.items():
    directory = os.path.join(cache_dir, name)
    out[name] = directory
    if os.path.exists(os.path.join(directory, MANIFEST_NAME)):
      try:
        TokenDataset(directory).close()
      except DatasetError as e:
        raise DatasetError(f"{e}\n(the demo cache is damaged; remove {cache_dir} and run again)") from e
      log(f"reusing {name} dataset in {directory}")
      continue
    raw = os.path.join(raw_dir, f"{name}.jsonl")
    write_raw(raw)
    started = time.perf_counter()
    manifest = convert([raw], directory, name, options)
    log(
      f"converted {name}: {manifest.num_records} documents, {manifest.num_tokens:,} tokens, "
      f"{len(manifest.shards)} shards in {time.perf_counter() - started:.1f}s"
    )
  return out
