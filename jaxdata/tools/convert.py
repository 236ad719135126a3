"""`convert`: JSONL / Parquet / text files -> a tokenized dataset directory.

Two phases keep the output independent of the worker count::

    input files (sorted)   a.jsonl      b.jsonl      c.parquet
      tokenize (processes)  -> a.tokens  -> b.tokens  -> c.tokens     + lengths, counts
      write (in file order) ----------------------------------------> shards + manifest

Workers only tokenize, one input file each, into scratch files; the shards
are then written in input order by one `DatasetWriter`, so the same inputs
and options give byte-identical shards for any number of workers.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import multiprocessing
import os
import tempfile
from typing import Any, Callable, Sequence

import numpy as np

from jaxdata.tools.inputs import (
    INPUT_FORMATS,
    TEXT_MODES,
    InvalidLog,
    detect_format,
    expand_inputs,
    iter_documents,
)
from jaxdata.sources.fileutil import check_name
from jaxdata.sources.manifest import MANIFEST_NAME, Manifest
from jaxdata.sources.writer import DatasetWriter
from jaxdata.tools.tokenizers import Tokenizer, TokenizerSpec, dtype_for_vocab_size, load_tokenizer

__all__ = ["ConvertOptions", "convert"]

# (phase, done, total): phase is "tokenize" (files) or "write" (files).
ProgressCallback = Callable[[str, int, int], None]


@dataclasses.dataclass(frozen=True)
class ConvertOptions:
  """Options of `convert` (and the `jaxdata convert` flags of the same names).

  Attributes:
    tokenizer: which tokenizer; the byte-level one by default.
    input_format: "auto" (from each file's suffix), "jsonl", "parquet", "text".
    field: JSONL field / Parquet column holding the text.
    text_mode: plain text: one document per "file", "line" or "paragraph".
    shard_bytes: a shard is closed before it would exceed this many bytes.
    workers: tokenizer processes; 0 = one per available core.
    skip_invalid: count and skip malformed records instead of failing.
    batch_documents: documents per tokenizer call.
  """

  tokenizer: TokenizerSpec = TokenizerSpec()
  input_format: str = "auto"
  field: str = "text"
  text_mode: str = "file"
  shard_bytes: int = 256 << 20
  workers: int = 0
  skip_invalid: bool = False
  batch_documents: int = 1024

  def __post_init__(self) -> None:
    if self.input_format != "auto" and self.input_format not in INPUT_FORMATS:
      raise ValueError(
          f"input_format: {self.input_format!r} is not 'auto' or one of {INPUT_FORMATS}"
      )
    if self.text_mode not in TEXT_MODES:
      raise ValueError(f"text_mode: {self.text_mode!r} is not one of {TEXT_MODES}")
    if not self.field:
      raise ValueError("field: must be a non-empty name")
    if self.shard_bytes <= 0:
      raise ValueError(f"shard_bytes: must be positive, got {self.shard_bytes}")
    if self.workers < 0:
      raise ValueError(f"workers: must be >= 0, got {self.workers}")
    if self.batch_documents < 1:
      raise ValueError(f"batch_documents: must be >= 1, got {self.batch_documents}")


@dataclasses.dataclass(frozen=True)
class _FileResult:
  """What tokenizing one input file produced (scratch files + counts)."""

  path: str
  tokens_path: str
  lengths_path: str
  documents: int
  tokens: int
  empty: int
  invalid: int
  invalid_examples: list[str]


_tokenizer_cache: dict[TokenizerSpec, Tokenizer] = {}


def _cached_tokenizer(spec: TokenizerSpec) -> Tokenizer:
  # A worker process tokenizes many files; load the model once per process.
  if spec not in _tokenizer_cache:
    _tokenizer_cache[spec] = load_tokenizer(spec)
  return _tokenizer_cache[spec]


def _tokenize_file(
    index: int, path: str, fmt: str, options: ConvertOptions, scratch: str
) -> _FileResult:
  tokenizer = _cached_tokenizer(options.tokenizer)
  dtype = dtype_for_vocab_size(tokenizer.vocab_size)
  invalid = InvalidLog(options.skip_invalid)
  tokens_path = os.path.join(scratch, f"{index:06d}.tokens")
  all_lengths: list[np.ndarray] = []
  empty = 0

  def flush(texts: list[str], out: Any) -> int:
    flat, lengths = tokenizer.encode_batch(texts)
    flat.astype(dtype).tofile(out)
    kept = lengths[lengths > 0]
    all_lengths.append(kept)
    return int(lengths.size - kept.size)

  with open(tokens_path, "wb") as out:
    batch: list[str] = []
    for text in iter_documents(path, fmt, options.field, options.text_mode, invalid):
      batch.append(text)
      if len(batch) == options.batch_documents:
        empty += flush(batch, out)
        batch = []
    if batch:
      empty += flush(batch, out)
  lengths = np.concatenate(all_lengths) if all_lengths else np.zeros(0, np.int64)
  lengths_path = os.path.join(scratch, f"{index:06d}.lengths.npy")
  np.save(lengths_path, lengths)
  return _FileResult(
      path=path,
      tokens_path=tokens_path,
      lengths_path=lengths_path,
      documents=int(lengths.size),
      tokens=int(lengths.sum()),
      empty=empty,
      invalid=invalid.count,
      invalid_examples=invalid.examples,
  )


def _tokenize_all(
    files: list[str],
    formats: list[str],
    options: ConvertOptions,
    scratch: str,
    on_progress: ProgressCallback,
) -> list[_FileResult]:
  workers = min(options.workers or os.cpu_count() or 1, len(files))
  if workers <= 1:
    results = []
    for i, (path, fmt) in enumerate(zip(files, formats)):
      results.append(_tokenize_file(i, path, fmt, options, scratch))
      on_progress("tokenize", i + 1, len(files))
    return results
  # spawn: safe when the caller has threads (or JAX) running; fork is not.
  context = multiprocessing.get_context("spawn")
  with concurrent.futures.ProcessPoolExecutor(workers, mp_context=context) as pool:
    futures = [
        pool.submit(_tokenize_file, i, path, fmt, options, scratch)
        for i, (path, fmt) in enumerate(zip(files, formats))
    ]
    try:
      for done, _ in enumerate(concurrent.futures.as_completed(futures), start=1):
        on_progress("tokenize", done, len(files))
      return [f.result() for f in futures]
    finally:
      # On an error, drop the files not yet started instead of tokenizing them.
      pool.shutdown(wait=True, cancel_futures=True)


def _write_tokens(
    writer: DatasetWriter, result: _FileResult, dtype: np.dtype, chunk_tokens: int
) -> None:
  lengths = np.load(result.lengths_path)
  if lengths.size == 0:
    return
  tokens = np.memmap(result.tokens_path, dtype=dtype, mode="r")
  ends = np.cumsum(lengths)
  start_doc = 0
  while start_doc < lengths.size:
    start_token = int(ends[start_doc - 1]) if start_doc else 0
    stop_doc = int(np.searchsorted(ends, start_token + chunk_tokens, side="right"))
    stop_doc = max(stop_doc, start_doc + 1)
    stop_token = int(ends[stop_doc - 1])
    writer.write_documents(tokens[start_token:stop_token], lengths[start_doc:stop_doc])
    start_doc = stop_doc
  del tokens


def convert(
    inputs: Sequence[str],
    out_dir: str,
    name: str,
    options: ConvertOptions = ConvertOptions(),
    on_progress: ProgressCallback | None = None,
) -> Manifest:
  """Tokenizes `inputs` into a dataset directory `out_dir`; returns its manifest.

  Raises `InputFormatError` naming file and line for a malformed record
  (unless `options.skip_invalid`), `FileNotFoundError` for a missing input,
  `FileExistsError` if `out_dir` already holds a dataset. Nothing is written
  to `out_dir` until every input has been tokenized without error.
  """
  progress = on_progress or (lambda phase, done, total: None)
  check_name(name, "name")  # a file-name prefix: nothing may land outside out_dir
  if os.path.exists(os.path.join(out_dir, MANIFEST_NAME)):
    raise FileExistsError(f"{out_dir}: already holds a dataset ({MANIFEST_NAME})")
  files = expand_inputs(inputs)
  if not files:
    raise FileNotFoundError(f"input: no files found in {list(inputs)}")
  formats = [detect_format(f, options.input_format) for f in files]
  tokenizer = load_tokenizer(options.tokenizer)
  dtype = dtype_for_vocab_size(tokenizer.vocab_size)
  parent = os.path.dirname(os.path.abspath(out_dir))
  os.makedirs(parent, exist_ok=True)
  with tempfile.TemporaryDirectory(prefix=".jaxdata-convert-", dir=parent) as scratch:
    results = _tokenize_all(files, formats, options, scratch, progress)
    writer = DatasetWriter(out_dir, name, dtype, tokenizer.identity(), options.shard_bytes)
    chunk_tokens = max(options.shard_bytes // dtype.itemsize, 1)
    for done, result in enumerate(results, start=1):
      _write_tokens(writer, result, dtype, chunk_tokens)
      progress("write", done, len(results))
    examples = [m for r in results for m in r.invalid_examples]
    stats = {
        "documents": sum(r.documents for r in results),
        "skipped_empty": sum(r.empty for r in results),
        "skipped_invalid": sum(r.invalid for r in results),
        "invalid_examples": examples[:20],
        "inputs": [
            {
                "path": r.path,
                "documents": r.documents,
                "tokens": r.tokens,
                "skipped_empty": r.empty,
                "skipped_invalid": r.invalid,
            }
            for r in results
        ],
        "options": {
            "input_format": options.input_format,
            "field": options.field,
            "text_mode": options.text_mode,
            "shard_bytes": options.shard_bytes,
        },
    }
    return writer.finish(stats)
