"""`convert`: JSONL / Parquet / text files -> a tokenized dataset directory.

Three phases keep the output independent of the worker count and of how
the inputs are cut::

    inputs (sorted, include / exclude)  a.jsonl (1 GB)               b.parquet     c.txt.zst
      plan units (conversion/work_units.py)       |u0|u1|u2| ... line-aligned  |row groups|  |whole|
      tokenize units (processes)        -> tokens + lengths per unit, in scratch files; progress by bytes and documents
      plan shards (lengths only), write them (processes)  ------------------------> shards + manifest

A shard is the longest run of the next documents whose bytes fit in
`shard_bytes` (at least one): `plan_shards`, a function of the lengths
alone, so the shards are written in parallel too (`shard_jobs`), here by
the same processes and in the Beam pipeline (`jaxdata.conversion.beam_runner`)
by its workers, byte-identical either way.
"""

from __future__ import annotations

import concurrent.futures
import concurrent.futures.process
import contextlib
import multiprocessing
import os
import tempfile
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from jaxdata.conversion.options import ConvertOptions, Progress
from jaxdata.conversion.output import check_output, staging_directory, swap_in
from jaxdata.conversion.plan import ConversionPlan, conversion_plan
from jaxdata.conversion.shard_jobs import ShardJob, ShardTarget, plan_shard_jobs, record_sizes, write_shard
from jaxdata.conversion.tokenize_units import (
  UnitResult,
  tokenize_unit,
)
from jaxdata.conversion.vision_units import UnitImages, tokenize_vision_unit
from jaxdata.conversion.work_units import WorkUnit
from jaxdata.errors import WorkerStartError
from jaxdata.sources.columns import PAIR_COLUMNS, column_file_name
from jaxdata.sources.fileutil import check_name
from jaxdata.sources.manifest import MANIFEST_NAME, Manifest, ShardInfo
from jaxdata.sources.writer import shard_file_names

__all__ = ["convert", "process_pool", "run_jobs", "shard_jobs", "tokenize_batch", "unit_batches", "write_job"]

_counters: tuple[Any, Any] | None = None  # shared (bytes, documents) of a worker process


def _share_counters(done_bytes: Any, done_documents: Any) -> None:
  """Pool initializer: where this worker adds its progress."""
  global _counters
  _counters = (done_bytes, done_documents) if done_bytes is not None else None  # None: no worker processes


def _shared_progress(done_bytes: int, documents: int) -> None:
  """A worker's progress, added to the counters the parent polls."""
  if _counters is not None:
    for counter, value in zip(_counters, (done_bytes, documents)):
      with counter.get_lock():
        counter.value += value


def _tokenize_to_scratch(
  unit: WorkUnit, options: ConvertOptions, scratch: str, on_progress: Callable[[int, int], None] = _shared_progress
) -> UnitResult:
  stem = os.path.join(scratch, f"{unit.index:07d}")
  masks: np.ndarray | None
  if options.examples == "vision":
    tokens, lengths, masks, images, result = tokenize_vision_unit(unit, options, on_progress)
    images.blob.tofile(f"{stem}.images")
    np.save(f"{stem}.image_counts.npy", images.counts)
    np.save(f"{stem}.image_table.npy", images.table)
  else:
    tokens, lengths, masks, result = tokenize_unit(unit, options, on_progress)
  tokens.tofile(f"{stem}.tokens")
  np.save(f"{stem}.lengths.npy", lengths)
  if masks is not None:
    masks.tofile(f"{stem}.masks")
  return result


def tokenize_batch(
  units: list[WorkUnit],
  options: ConvertOptions,
  scratch: str,
  on_progress: Callable[[int, int], None] = _shared_progress,
) -> list[UnitResult]:
  """Several small units in one task (many small files would otherwise cost a task each)."""
  return [_tokenize_to_scratch(unit, options, scratch, on_progress) for unit in units]


def unit_batches(units: list[WorkUnit], unit_bytes: int) -> list[list[WorkUnit]]:
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


def process_pool(workers: int) -> concurrent.futures.ProcessPoolExecutor | None:
  """The worker processes (None: work in this process), each told where to add its progress."""
  if workers <= 1:
    _share_counters(None, None)
    return None
  # spawn: safe when the caller has threads (or JAX) running; fork is not.
  context = multiprocessing.get_context("spawn")
  counters = (context.Value("q", 0), context.Value("q", 0))
  pool = concurrent.futures.ProcessPoolExecutor(
    workers, mp_context=context, initializer=_share_counters, initargs=counters
  )
  pool.counters = counters  # type: ignore[attr-defined]
  return pool


def run_jobs(
  pool: concurrent.futures.Executor | None,
  function: Callable[..., Any],
  jobs: Sequence[Any],
  args: tuple[Any, ...],
  on_done: Callable[[int, Any], None],
) -> list[Any]:
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
    return [future.result() for future in sorted(futures, key=lambda future: futures[future])]
  except concurrent.futures.process.BrokenProcessPool as e:  # the processes are gone: nothing to wait for
    raise WorkerStartError(
      "a conversion worker process died before finishing its work (BrokenProcessPool). Worker processes start "
      "by importing the script that runs: a script that converts (a Pipeline whose datasets name `inputs:`, or "
      'jaxdata.conversion\'s convert) must keep its top-level code under `if __name__ == "__main__":`; else '
      "the process ran out of memory or was killed (fewer workers: `convert: {workers: N}`)"
    ) from e
  except BaseException:
    for future in futures:  # drop the jobs not yet started,
      future.cancel()
    concurrent.futures.wait(futures)  # and let the running ones end before their scratch files go
    raise


def _remove_shards(out_dir: str, name: str, indices: Sequence[int], created: bool) -> None:
  """Removes the shard files this conversion writes (finished or partial), and `out_dir` if it made it."""
  for index in indices:
    shard, lengths = shard_file_names(name, index)
    stem = shard.removesuffix(".array_record")
    columns = [column_file_name(stem, column) for column in PAIR_COLUMNS]  # a dataset of pairs' per-record columns
    for file_name in (shard, lengths, *columns):
      with contextlib.suppress(FileNotFoundError):
        os.remove(os.path.join(out_dir, file_name))
  if created:
    with contextlib.suppress(OSError):  # not empty: something else was put there meanwhile
      os.rmdir(out_dir)


def _load_tokens(scratch: str, dtype: str, kind: str = "tokens") -> Callable[[int], np.ndarray]:
  def load(unit: int) -> np.ndarray:
    path = os.path.join(scratch, f"{unit:07d}.{kind}")
    return np.memmap(path, dtype, "r") if os.path.getsize(path) else np.zeros(0, dtype)

  return load


def lengths_loader(scratch: str) -> Callable[[int], np.ndarray]:
  return lambda unit: np.load(os.path.join(scratch, f"{unit:07d}.lengths.npy"))


def shard_jobs(plan: ConversionPlan, scratch: str) -> list[ShardJob]:
  """Every shard's pieces of the units the tokenize phase left in `scratch`: a shard holds the records whose
  bytes fit in `shard_bytes` (ids and mask bytes; for vision examples their images too)."""

  def images(unit: int) -> UnitImages | None:
    return images_loader(scratch)(unit) if plan.options.examples == "vision" else None

  lengths = lengths_loader(scratch)
  sizes = [(u.index, record_sizes(lengths(u.index), plan.bytes_per_token, images(u.index))) for u in plan.units]
  return plan_shard_jobs(sizes, 1, plan.options.shard_bytes)


def write_job(job: ShardJob, target: ShardTarget) -> ShardInfo:
  """Shard `job` written into `target.out_dir` from the tokenize phase's files (in a worker process)."""
  return write_shard(
    job,
    target.out_dir,
    target.name,
    target.dtype,
    _load_tokens(target.scratch, target.dtype),
    lengths_loader(target.scratch),
    compression=target.compression,
    masks_of=_load_tokens(target.scratch, "uint8", "masks") if target.masks else None,
    pairs=target.pairs,
    images_of=images_loader(target.scratch) if target.images else None,
  )


def images_loader(scratch: str) -> Callable[[int], UnitImages]:
  """A unit's images as the tokenize phase left them in `scratch` (the bytes memory-mapped)."""

  def load(unit: int) -> UnitImages:
    stem = os.path.join(scratch, f"{unit:07d}")
    blob = _load_tokens(scratch, "uint8", "images")(unit)
    return UnitImages(np.load(f"{stem}.image_counts.npy"), np.load(f"{stem}.image_table.npy"), blob)

  return load


def _tokenize_all(
  pool: concurrent.futures.Executor | None,
  batches: list[list[WorkUnit]],
  options: ConvertOptions,
  scratch: str,
  progress: Progress,
) -> list[UnitResult]:
  """The tokenize phase: every batch of units into `scratch`, in processes (or here without a pool),
  reporting its progress in input bytes."""
  unit_total = sum(u.size for batch in batches for u in batch)  # the bar's total: each unit reports its size
  done = [0, 0]

  def tokenized(i: int, result: list[UnitResult] | None) -> None:
    counters = getattr(pool, "counters", None)  # worker processes add their progress to shared counters
    if counters is not None:
      done[:] = [counters[0].value, counters[1].value]
    progress("tokenize", done[0], unit_total, done[1])

  def here(done_bytes: int, documents: int) -> None:  # no pool: progress straight from tokenize_unit
    done[0] += done_bytes
    done[1] += documents
    progress("tokenize", done[0], unit_total, done[1])

  token_args = (options, scratch) if pool is not None else (options, scratch, here)
  results = [r for batch in run_jobs(pool, tokenize_batch, batches, token_args, tokenized) for r in batch]
  return results


def _write_all(
  pool: concurrent.futures.Executor | None,
  plan: ConversionPlan,
  jobs: list[ShardJob],
  results: list[UnitResult],
  *,
  name: str,
  out_dir: str,
  scratch: str,
  overwrite: bool,
  progress: Progress,
) -> Manifest:
  """The write phase: every shard job, then the manifest that seals the dataset; a failure leaves no
  partial shard (and a dataset being replaced whole)."""
  # Replacing a dataset: written beside it and swapped in once sealed, so that an interruption,
  # a full disk or a failed write leave the old one whole.
  replacing = overwrite and os.path.exists(os.path.join(out_dir, MANIFEST_NAME))
  target = staging_directory(out_dir) if replacing else out_dir
  created = not os.path.isdir(target) or replacing
  os.makedirs(target, exist_ok=True)
  written = [0]

  def shard_done(i: int, info: ShardInfo | None) -> None:
    if info is not None:
      written[0] += info.num_records
    progress("write", written[0], sum(r.documents for r in results), written[0])

  try:
    infos = run_jobs(pool, write_job, jobs, (plan.shard_target(target, name, scratch),), shard_done)
    manifest = plan.manifest(name, infos, results)
    manifest.save(target)
  except BaseException:  # Ctrl-C or a failed write: no partial shard stays (re-raised)
    _remove_shards(target, name, [job[0] for job in jobs], created)
    raise
  if replacing:
    swap_in(target, out_dir)
  return manifest


def convert(
  inputs: Sequence[str],
  out_dir: str,
  name: str,
  options: ConvertOptions = ConvertOptions(),
  on_progress: Progress | None = None,
  overwrite: bool = False,
  *,
  executor: concurrent.futures.Executor | None = None,
) -> Manifest:
  """Tokenizes JSONL, Parquet or text files into a dataset directory (`jaxdata convert`). The output does
  not depend on `options.workers` or on how the inputs are cut into units (module docstring).

  Args:
    inputs: files, directories or globs (local, or gs:// / s3:// through Beam's file systems); `.gz` and
      `.zst` are decompressed.
    out_dir, name: the dataset directory to write, and its name (a file-name prefix of its shards).
    options: tokenizer, format, field, shard size, workers, ... (`ConvertOptions`).
    on_progress: `(phase, done, total, documents)`: "scan" and "tokenize" count input bytes, "write"
      documents.
    overwrite: replace a dataset already in `out_dir` (only jaxdata's files).
    executor: where the units are tokenized and the shards written (`ray_runner` gives Ray's); None:
      processes on this machine. The output is the same.

  Returns the new dataset's `Manifest` (its `stats` count skipped documents, per input file too). Raises
  `InputFormatError` naming file and line (or row) unless `options.skip_invalid`, `FileNotFoundError` (no
  input, no tokenizer model), `FileExistsError` (a dataset in `out_dir`, no `overwrite`). Nothing is
  written to `out_dir` until every input has been tokenized without error.

  >>> import json, os, tempfile
  >>> root = tempfile.mkdtemp()
  >>> with open(os.path.join(root, "web.jsonl"), "w") as f:
  ...   _ = f.write(json.dumps({"text": "hello"}) + "\\n" + json.dumps({"text": "world!"}) + "\\n")
  >>> manifest = convert([os.path.join(root, "web.jsonl")], os.path.join(root, "web"), "web",
  ...                    ConvertOptions(workers=1))
  >>> manifest.num_records, manifest.num_tokens, manifest.dtype
  (2, 11, 'uint16')
  """
  progress = on_progress or (lambda phase, done, total, documents: None)
  check_name(name, "name")  # a file-name prefix: nothing may land outside out_dir
  check_output(out_dir, inputs, overwrite)  # before any tokenizing
  workers = options.workers or os.cpu_count() or 1
  plan = conversion_plan(inputs, options, workers, lambda done, total: progress("scan", done, total, 0))
  units = plan.units
  batches = unit_batches(list(units), plan.unit_bytes)
  parent = os.path.dirname(os.path.abspath(out_dir))
  os.makedirs(parent, exist_ok=True)
  pool = executor if executor is not None else process_pool(min(workers, len(batches)))
  try:
    with tempfile.TemporaryDirectory(prefix=".jaxdata-convert-", dir=parent) as scratch:
      results = _tokenize_all(pool, batches, options, scratch, progress)
      jobs = shard_jobs(plan, scratch)
      return _write_all(
        pool, plan, jobs, results, name=name, out_dir=out_dir, scratch=scratch, overwrite=overwrite, progress=progress
      )
  finally:
    if pool is not None and executor is None:
      pool.shutdown(wait=True, cancel_futures=True)
