"""`convert`: JSONL / Parquet / text files -> a tokenized dataset directory.

Three phases keep the output independent of the worker count and of how
the inputs are cut::

    inputs (sorted, include / exclude)  a.jsonl (1 GB)               b.parquet     c.txt.zst
      plan units (tools/units.py)       |u0|u1|u2| ... line-aligned  |row groups|  |whole|
      tokenize units (processes)        -> tokens + lengths per unit, in scratch files; progress by bytes and documents
      plan shards (lengths only), write them (processes)  ------------------------> shards + manifest

A shard is the longest run of the next documents whose bytes fit in
`shard_bytes` (at least one): `plan_shards`, a function of the lengths
alone, so the shards are written in parallel too (`shard_jobs`), here by
the same processes and in the Beam pipeline (`jaxdata.tools.convert_beam`)
by its workers, byte-identical either way.
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
from jaxdata.sources.manifest import MANIFEST_NAME, Manifest, ShardInfo
from jaxdata.tools.inputs import INPUT_FORMATS, TEXT_MODES, InvalidLog, detect_format, expand_inputs, file_sizes
from jaxdata.tools.tokenizers import Tokenizer, TokenizerSpec, dtype_for_vocab_size, load_tokenizer
from jaxdata.tools.shard_jobs import ShardJob, plan_shard_jobs, write_shard
from jaxdata.tools.units import WorkUnit, iter_unit_documents, plan_units

__all__ = ["ConvertOptions", "Progress", "UnitResult", "convert", "conversion_stats", "prepare_output", "tokenize_unit",
           "unit_size"]

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


def _tokenize_batch(units: list[WorkUnit], options: ConvertOptions, scratch: str,
                    on_progress: Callable[[int, int], None] = _shared_progress) -> list[UnitResult]:
  """Several small units in one task (many small files would otherwise cost a task each)."""
  return [_tokenize_to_scratch(unit, options, scratch, on_progress) for unit in units]


def _batches(units: list[WorkUnit], unit_bytes: int) -> list[list[WorkUnit]]:
  """Consecutive units grouped until each group holds about unit_bytes of input."""
  groups: list[list[WorkUnit]] = [[]]
  size = 0
  for unit in units:
    if groups[-1] and size + unit.size > unit_bytes:
      groups.append([])
      size = 0
    groups[-1].append(unit)
    size += unit.size
  return groups


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


def refuse_existing(out_dir: str, overwrite: bool) -> None:
  """Raises `FileExistsError` if `out_dir` holds a dataset and `overwrite` is not set."""
  if not overwrite and os.path.exists(os.path.join(out_dir, MANIFEST_NAME)):
    raise FileExistsError(f"{out_dir}: already holds a dataset ({MANIFEST_NAME}); pass --overwrite to replace it")


def prepare_output(out_dir: str, overwrite: bool) -> None:
  """Refuses a directory that holds a dataset, unless `overwrite` (then only jaxdata's files leave)."""
  if not os.path.exists(os.path.join(out_dir, MANIFEST_NAME)):
    return
  refuse_existing(out_dir, overwrite)
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


def _executor(workers: int) -> concurrent.futures.ProcessPoolExecutor | None:
  """The worker processes (None: work in this process), each told where to add its progress."""
  if workers <= 1:
    _share_counters(None, None)
    return None
  # spawn: safe when the caller has threads (or JAX) running; fork is not.
  context = multiprocessing.get_context("spawn")
  counters = (context.Value("q", 0), context.Value("q", 0))
  pool = concurrent.futures.ProcessPoolExecutor(workers, mp_context=context, initializer=_share_counters,
                                                initargs=counters)
  pool.counters = counters  # type: ignore[attr-defined]
  return pool


def _run(pool: concurrent.futures.ProcessPoolExecutor | None, function: Callable[..., Any], jobs: Sequence[Any],
         args: tuple[Any, ...], on_done: Callable[[int, Any], None]) -> list[Any]:
  """`function(job, *args)` for every job, in the pool or here, results in job order; `on_done(i, result)`
  as each finishes (and every 0.2 s with i = -1 while waiting); the first error is raised at once."""
  if pool is None:
    results = []
    for i, job in enumerate(jobs):
      results.append(function(job, *args))
      on_done(i, results[-1])
    return results
  futures = {pool.submit(function, job, *args): i for i, job in enumerate(jobs)}
  try:
    pending = set(futures)
    while pending:
      finished, pending = concurrent.futures.wait(pending, timeout=0.2, return_when="FIRST_EXCEPTION")
      for future in finished:
        on_done(futures[future], future.result())  # the first error, as soon as it happens
      on_done(-1, None)
    return [future.result() for future in sorted(futures, key=futures.get)]
  except BaseException:
    for future in futures:  # drop the jobs not yet started,
      future.cancel()
    concurrent.futures.wait(futures)  # and let the running ones end before their scratch files go
    raise


def _load_tokens(scratch: str, dtype: str) -> Callable[[int], np.ndarray]:
  return lambda unit: np.memmap(os.path.join(scratch, f"{unit:07d}.tokens"), dtype, "r")


def _load_lengths(scratch: str) -> Callable[[int], np.ndarray]:
  return lambda unit: np.load(os.path.join(scratch, f"{unit:07d}.lengths.npy"))


def _write_job(job: ShardJob, out_dir: str, name: str, dtype: str, scratch: str) -> ShardInfo:
  return write_shard(job, out_dir, name, dtype, _load_tokens(scratch, dtype), _load_lengths(scratch))


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
  refuse_existing(out_dir, overwrite)  # before any tokenizing
  files = expand_inputs(inputs, options.include, options.exclude)
  if not files:
    raise FileNotFoundError(f"input: no files found in {list(inputs)} (include {list(options.include)}, "
                            f"exclude {list(options.exclude)})")
  formats = [detect_format(f, options.input_format) for f in files]
  tokenizer = load_tokenizer(options.tokenizer)
  dtype = dtype_for_vocab_size(tokenizer.vocab_size)
  sizes = file_sizes(files)
  total = sum(sizes)
  workers = options.workers or os.cpu_count() or 1
  scanned = [0]

  def on_scan(count: int) -> None:
    scanned[0] += count
    progress("scan", scanned[0], total, 0)

  unit_bytes = unit_size(total, workers, options)
  units = plan_units(files, formats, options.text_mode, unit_bytes, on_scan, sizes)
  batches = _batches(units, unit_bytes)
  parent = os.path.dirname(os.path.abspath(out_dir))
  os.makedirs(parent, exist_ok=True)
  pool = _executor(min(workers, len(batches)))
  try:
    with tempfile.TemporaryDirectory(prefix=".jaxdata-convert-", dir=parent) as scratch:
      done = [0, 0]

      def tokenized(i: int, result: list[UnitResult] | None) -> None:
        if pool is not None:
          done[:] = [pool.counters[0].value, pool.counters[1].value]  # type: ignore[attr-defined]
        progress("tokenize", done[0], total, done[1])

      def here(done_bytes: int, documents: int) -> None:  # no pool: progress straight from tokenize_unit
        done[0] += done_bytes
        done[1] += documents
        progress("tokenize", done[0], total, done[1])

      token_args = (options, scratch) if pool is not None else (options, scratch, here)
      results = [r for batch in _run(pool, _tokenize_batch, batches, token_args, tokenized) for r in batch]
      jobs = plan_shard_jobs([(u.index, _load_lengths(scratch)(u.index)) for u in units], dtype.itemsize,
                             options.shard_bytes)
      prepare_output(out_dir, overwrite)
      os.makedirs(out_dir, exist_ok=True)
      written = [0]

      def shard_done(i: int, info: ShardInfo | None) -> None:
        if info is not None:
          written[0] += info.num_records
        progress("write", written[0], sum(r.documents for r in results), written[0])

      infos = _run(pool, _write_job, jobs, (out_dir, name, dtype.name, scratch), shard_done)
      manifest = Manifest(name=name, dtype=dtype.name, tokenizer=tokenizer.identity(), shards=tuple(infos),
                          stats=conversion_stats(files, results, options))
      manifest.save(out_dir)
      return manifest
  finally:
    if pool is not None:
      pool.shutdown(wait=True, cancel_futures=True)
