"""`convert`: JSONL / Parquet / text files -> a tokenized dataset directory.

Three phases keep the output independent of the worker count and of how
the inputs are cut::

    inputs (sorted, include / exclude)  a.jsonl (1 GB)               b.parquet     c.txt.zst
      plan units (tools/units.py)       |u0|u1|u2| ... line-aligned  |row groups|  |whole|
      tokenize units (processes)        -> tokens + lengths per unit, in scratch files; progress by bytes and documents
      write (in unit order)             -----------------------------------------> shards + manifest

A shard is the longest run of the next documents whose bytes fit in
`shard_bytes` (at least one): `plan_shards`, a function of the lengths
alone, which is what lets the Beam pipeline (`jaxdata.tools.convert_beam`)
write shards in parallel and still produce byte-identical files.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import multiprocessing
import os
import tempfile
from typing import Any, Callable, Sequence

import numpy as np

from jaxdata.sources.fileutil import check_name
from jaxdata.sources.manifest import MANIFEST_NAME, Manifest
from jaxdata.sources.writer import DatasetWriter
from jaxdata.tools.inputs import INPUT_FORMATS, TEXT_MODES, InvalidLog, detect_format, expand_inputs
from jaxdata.tools.tokenizers import Tokenizer, TokenizerSpec, dtype_for_vocab_size, load_tokenizer
from jaxdata.tools.units import WorkUnit, iter_unit_documents, plan_units

__all__ = ["ConvertOptions", "Progress", "UnitResult", "convert", "conversion_stats", "plan_shards", "tokenize_unit"]

# (phase, bytes done, bytes in all, documents so far); phase: "scan", "tokenize" or "write".
Progress = Callable[[str, int, int, int], None]
MIN_UNIT_BYTES = 1 << 20
MAX_UNIT_BYTES = 64 << 20


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
    include, exclude: globs a file (path or name) must / must not match.
    unit_bytes: input bytes per work unit; 0 = from the input size and workers.
  """

  tokenizer: TokenizerSpec = TokenizerSpec()
  input_format: str = "auto"
  field: str = "text"
  text_mode: str = "file"
  shard_bytes: int = 256 << 20
  workers: int = 0
  skip_invalid: bool = False
  batch_documents: int = 1024
  include: tuple[str, ...] = ()
  exclude: tuple[str, ...] = ()
  unit_bytes: int = 0

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
    if self.unit_bytes < 0:
      raise ValueError(f"unit_bytes: must be >= 0, got {self.unit_bytes}")
    object.__setattr__(self, "include", tuple(self.include))
    object.__setattr__(self, "exclude", tuple(self.exclude))


@dataclasses.dataclass(frozen=True)
class UnitResult:
  """What tokenizing one unit produced besides its tokens."""

  unit: int
  file_index: int
  documents: int
  tokens: int
  empty: int
  invalid: int
  invalid_examples: list[str]


_tokenizers: dict[TokenizerSpec, Tokenizer] = {}
_counters: tuple[Any, Any] | None = None  # shared (bytes, documents) of a worker process


def _cached_tokenizer(spec: TokenizerSpec) -> Tokenizer:
  # A worker process tokenizes many units; load the model once per process.
  if spec not in _tokenizers:
    _tokenizers[spec] = load_tokenizer(spec)
  return _tokenizers[spec]


def _share_counters(done_bytes: Any, done_documents: Any) -> None:
  """Pool initializer: where this worker adds its progress."""
  global _counters
  _counters = (done_bytes, done_documents)


def tokenize_unit(unit: WorkUnit, options: ConvertOptions,
                  on_progress: Callable[[int, int], None] = lambda b, d: None) -> tuple[np.ndarray, np.ndarray, UnitResult]:
  """(tokens, lengths of the non-empty documents, counts) of one unit; `on_progress(bytes, documents)`
  hears what was done since it last called."""
  tokenizer = _cached_tokenizer(options.tokenizer)
  dtype = dtype_for_vocab_size(tokenizer.vocab_size)
  invalid = InvalidLog(options.skip_invalid)
  pending = [0]
  tokens, lengths, empty = [], [], 0

  def consumed(count: int) -> None:
    pending[0] += count

  def flush(texts: list[str]) -> int:
    flat, found = tokenizer.encode_batch(texts)
    tokens.append(flat.astype(dtype))
    lengths.append(found[found > 0])
    on_progress(pending[0], len(texts))
    pending[0] = 0
    return int((found == 0).sum())

  batch: list[str] = []
  for text in iter_unit_documents(unit, options.field, options.text_mode, invalid, consumed):
    batch.append(text)
    if len(batch) == options.batch_documents:
      empty += flush(batch)
      batch = []
  if batch:
    empty += flush(batch)
  on_progress(pending[0], 0)
  all_tokens = np.concatenate(tokens) if tokens else np.zeros(0, dtype)
  all_lengths = np.concatenate(lengths).astype(np.int64) if lengths else np.zeros(0, np.int64)
  result = UnitResult(unit.index, unit.file_index, int(all_lengths.size), int(all_tokens.size), empty,
                      invalid.count, invalid.examples)
  return all_tokens, all_lengths, result


def _shared_progress(done_bytes: int, documents: int) -> None:
  """A worker's progress, added to the counters the parent polls."""
  if _counters is not None:
    for counter, value in zip(_counters, (done_bytes, documents)):
      with counter.get_lock():
        counter.value += value


def _tokenize_to_scratch(unit: WorkUnit, options: ConvertOptions, scratch: str,
                         on_progress: Callable[[int, int], None] = _shared_progress) -> UnitResult:
  tokens, lengths, result = tokenize_unit(unit, options, on_progress)
  tokens.tofile(os.path.join(scratch, f"{unit.index:07d}.tokens"))
  np.save(os.path.join(scratch, f"{unit.index:07d}.lengths.npy"), lengths)
  return result


def plan_shards(lengths: np.ndarray, itemsize: int, shard_bytes: int) -> np.ndarray:
  """End (exclusive document index) of every shard: each the longest run of the next
  documents whose bytes fit in shard_bytes, at least one document (what DatasetWriter does).

  >>> plan_shards(np.array([3, 3, 5, 1, 1]), itemsize=2, shard_bytes=12).tolist()
  [2, 3, 5]
  """
  ends = np.cumsum(np.asarray(lengths, np.int64)) * itemsize
  cuts, start = [], 0
  while start < ends.size:
    base = int(ends[start - 1]) if start else 0
    stop = max(int(np.searchsorted(ends, base + shard_bytes, side="right")), start + 1)
    cuts.append(stop)
    start = stop
  return np.asarray(cuts, np.int64)


def conversion_stats(files: Sequence[str], results: Sequence[UnitResult], options: ConvertOptions) -> dict[str, Any]:
  """The manifest's stats: totals, per input file, and the options that shape the output."""
  per_file = []
  for index, path in enumerate(files):
    mine = [r for r in results if r.file_index == index]
    per_file.append({"path": path, "documents": sum(r.documents for r in mine), "tokens": sum(r.tokens for r in mine),
                     "skipped_empty": sum(r.empty for r in mine), "skipped_invalid": sum(r.invalid for r in mine)})
  examples = [m for r in results for m in r.invalid_examples]
  return {
      "documents": sum(r.documents for r in results),
      "skipped_empty": sum(r.empty for r in results),
      "skipped_invalid": sum(r.invalid for r in results),
      "invalid_examples": examples[:20],
      "inputs": per_file,
      "options": {"input_format": options.input_format, "field": options.field, "text_mode": options.text_mode,
                  "shard_bytes": options.shard_bytes},
  }


def prepare_output(out_dir: str, overwrite: bool) -> None:
  """Refuses a directory that holds a dataset, unless `overwrite` (then only jaxdata's files leave)."""
  if not os.path.exists(os.path.join(out_dir, MANIFEST_NAME)):
    return
  if not overwrite:
    raise FileExistsError(f"{out_dir}: already holds a dataset ({MANIFEST_NAME}); pass --overwrite to replace it")
  manifest = Manifest.load(out_dir)
  os.remove(os.path.join(out_dir, MANIFEST_NAME))  # first: a half-removed dataset is never taken for whole
  for shard in manifest.shards:
    for name in (shard.path, shard.lengths_path):
      if os.path.exists(os.path.join(out_dir, name)):
        os.remove(os.path.join(out_dir, name))


def unit_size(total_bytes: int, workers: int, options: ConvertOptions) -> int:
  """Units small enough that every worker has several (and the first finishes in about a second)."""
  if options.unit_bytes:
    return options.unit_bytes
  return int(min(MAX_UNIT_BYTES, max(MIN_UNIT_BYTES, total_bytes // max(1, 4 * workers))))


def _tokenize_all(units: list[WorkUnit], options: ConvertOptions, workers: int, scratch: str, total: int,
                  progress: Progress) -> list[UnitResult]:
  if workers <= 1:
    done = [0, 0]

    def local(done_bytes: int, documents: int) -> None:
      done[0] += done_bytes
      done[1] += documents
      progress("tokenize", done[0], total, done[1])

    return [_tokenize_to_scratch(unit, options, scratch, local) for unit in units]
  # spawn: safe when the caller has threads (or JAX) running; fork is not.
  context = multiprocessing.get_context("spawn")
  done_bytes, done_documents = context.Value("q", 0), context.Value("q", 0)
  with concurrent.futures.ProcessPoolExecutor(workers, mp_context=context, initializer=_share_counters,
                                              initargs=(done_bytes, done_documents)) as pool:
    futures = [pool.submit(_tokenize_to_scratch, unit, options, scratch) for unit in units]
    try:
      pending = set(futures)
      while pending:
        finished, pending = concurrent.futures.wait(pending, timeout=0.2, return_when="FIRST_EXCEPTION")
        for future in finished:
          future.result()  # the first error, as soon as it happens
        progress("tokenize", done_bytes.value, total, done_documents.value)
      return [f.result() for f in futures]
    finally:
      # On an error, drop the units not yet started instead of tokenizing them.
      pool.shutdown(wait=True, cancel_futures=True)


def convert(
    inputs: Sequence[str],
    out_dir: str,
    name: str,
    options: ConvertOptions = ConvertOptions(),
    on_progress: Progress | None = None,
    overwrite: bool = False,
) -> Manifest:
  """Tokenizes `inputs` into a dataset directory `out_dir`; returns its manifest.

  Raises `InputFormatError` naming file and line (or row) for a malformed
  record (unless `options.skip_invalid`), `FileNotFoundError` for a missing
  input, `FileExistsError` if `out_dir` already holds a dataset (unless
  `overwrite`). Nothing is written to `out_dir` until every input has been
  tokenized without error.
  """
  progress = on_progress or (lambda phase, done, total, documents: None)
  check_name(name, "name")  # a file-name prefix: nothing may land outside out_dir
  if os.path.exists(os.path.join(out_dir, MANIFEST_NAME)) and not overwrite:
    raise FileExistsError(f"{out_dir}: already holds a dataset ({MANIFEST_NAME}); pass --overwrite to replace it")
  files = expand_inputs(inputs, options.include, options.exclude)
  if not files:
    raise FileNotFoundError(f"input: no files found in {list(inputs)} (include {list(options.include)}, "
                            f"exclude {list(options.exclude)})")
  formats = [detect_format(f, options.input_format) for f in files]
  tokenizer = load_tokenizer(options.tokenizer)
  dtype = dtype_for_vocab_size(tokenizer.vocab_size)
  total = sum(os.path.getsize(f) for f in files)
  workers = options.workers or os.cpu_count() or 1
  scanned = [0]

  def on_scan(count: int) -> None:
    scanned[0] += count
    progress("scan", scanned[0], total, 0)

  units = plan_units(files, formats, options.text_mode, unit_size(total, workers, options), on_scan)
  parent = os.path.dirname(os.path.abspath(out_dir))
  os.makedirs(parent, exist_ok=True)
  with tempfile.TemporaryDirectory(prefix=".jaxdata-convert-", dir=parent) as scratch:
    results = _tokenize_all(units, options, min(workers, len(units)), scratch, total, progress)
    prepare_output(out_dir, overwrite)
    writer = DatasetWriter(out_dir, name, dtype, tokenizer.identity(), options.shard_bytes)
    written, documents = 0, 0
    for unit, result in zip(units, results):
      lengths = np.load(os.path.join(scratch, f"{unit.index:07d}.lengths.npy"))
      if lengths.size:
        writer.write_documents(np.fromfile(os.path.join(scratch, f"{unit.index:07d}.tokens"), dtype), lengths)
      written += unit.size
      documents += result.documents
      progress("write", written, total, documents)
    return writer.finish(conversion_stats(files, results, options))
