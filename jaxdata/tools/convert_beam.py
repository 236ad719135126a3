"""Conversion as an Apache Beam pipeline: the local converter's output, at corpus scale.

The same three phases as `jaxdata.tools.convert`, each a Beam stage::

    Create(units) -> Reshuffle -> Tokenize (parallel)          tokens + lengths of each unit -> scratch
      -> ToList -> PlanShards (one worker: lengths only)        plan_shards over all lengths, in unit order
      -> Reshuffle -> WriteShards (parallel)                    each shard from its units' scratch tokens
      -> ToList -> Manifest                                     stats from every unit's counts

Shard boundaries are `plan_shards` of the lengths (a function of the
documents alone) and a shard's bytes come from `finish_shard` and the same
ArrayRecord options, so the output is byte-identical to `convert` for the
same inputs and options, whatever the runner, its parallelism or how units
are cut. Scratch and output go through Beam's `FileSystems` (local paths,
or `gs://` / `s3://` on a cluster); `pip install 'jaxdata[beam]'`.

>>> # jaxdata convert corpus/ --out data/web --name web --runner beam --beam-options "--direct_num_workers=2"
"""

from __future__ import annotations

import importlib
import io
import os
import tempfile
from typing import Any, Sequence

import numpy as np
from array_record.python.array_record_module import ArrayRecordWriter

from jaxdata.sources.manifest import MANIFEST_NAME, Manifest, ShardInfo
from jaxdata.sources.stores import is_remote
from jaxdata.sources.writer import WRITER_OPTIONS, finish_shard, shard_file_names
from jaxdata.tools.convert import (
    ConvertOptions, UnitResult, conversion_stats, plan_shards, prepare_output, tokenize_unit, unit_size,
)
from jaxdata.tools.inputs import detect_format, expand_inputs
from jaxdata.tools.tokenizers import dtype_for_vocab_size, load_tokenizer
from jaxdata.tools.units import WorkUnit, plan_units

__all__ = ["ShardJob", "convert_with_beam", "plan_shard_jobs"]

ShardJob = tuple[int, list[tuple[int, int, int]]]  # (shard index, [(unit, first document, end document)])
BEAM_UNIT_WORKERS = 16  # units are cut as if for this many workers (a cluster has more than a laptop)


def _beam() -> Any:
  try:
    return importlib.import_module("apache_beam")
  except ImportError as e:
    raise ImportError(f"--runner beam needs Apache Beam: pip install 'jaxdata[beam]' ({e})") from e


def _filesystems() -> Any:
  return importlib.import_module("apache_beam.io.filesystems").FileSystems


def _join(root: str, name: str) -> str:
  return f"{root.rstrip('/')}/{name}" if "://" in root else os.path.join(root, name)


def _put(path: str, blob: bytes) -> None:
  with _filesystems().create(path) as f:
    f.write(blob)


def _get(path: str) -> bytes:
  with _filesystems().open(path) as f:
    return f.read()


def _npy(values: np.ndarray) -> bytes:
  buffer = io.BytesIO()
  np.save(buffer, values, allow_pickle=False)
  return buffer.getvalue()


def _tokenize(unit: WorkUnit, options: ConvertOptions, scratch: str) -> UnitResult:
  tokens, lengths, result = tokenize_unit(unit, options)
  _put(_join(scratch, f"{unit.index:07d}.tokens.npy"), _npy(tokens))
  _put(_join(scratch, f"{unit.index:07d}.lengths.npy"), _npy(lengths))
  return result


def plan_shard_jobs(results: list[UnitResult], scratch: str, itemsize: int, shard_bytes: int) -> list[ShardJob]:
  """Every shard's pieces of units, from all units' lengths in unit order."""
  results = sorted(results, key=lambda r: r.unit)
  lengths = [np.load(io.BytesIO(_get(_join(scratch, f"{r.unit:07d}.lengths.npy")))) for r in results]
  unit_starts = np.concatenate([[0], np.cumsum([part.size for part in lengths])])
  ends = plan_shards(np.concatenate(lengths + [np.zeros(0, np.int64)]), itemsize, shard_bytes)
  jobs, begin = [], 0
  for index, end in enumerate(ends.tolist()):
    pieces = []
    for position, result in enumerate(results):
      first, last = max(begin, int(unit_starts[position])), min(end, int(unit_starts[position + 1]))
      if first < last:
        pieces.append((result.unit, first - int(unit_starts[position]), last - int(unit_starts[position])))
    jobs.append((index, pieces))
    begin = end
  return jobs


def _write_shard(job: ShardJob, out_dir: str, name: str, dtype: str, scratch: str) -> ShardInfo:
  index, pieces = job
  np_dtype = np.dtype(dtype).newbyteorder("<")
  local_dir = out_dir if not is_remote(out_dir) else tempfile.mkdtemp(prefix="jaxdata-shard-")
  shard_name, lengths_name = shard_file_names(name, index)
  writer = ArrayRecordWriter(os.path.join(local_dir, shard_name), WRITER_OPTIONS)
  all_lengths = []
  for unit, first, last in pieces:
    tokens = np.load(io.BytesIO(_get(_join(scratch, f"{unit:07d}.tokens.npy"))))
    lengths = np.load(io.BytesIO(_get(_join(scratch, f"{unit:07d}.lengths.npy"))))
    starts = np.concatenate([[0], np.cumsum(lengths)])
    payload = tokens[starts[first] : starts[last]].astype(np_dtype, copy=False).tobytes()
    offsets = (starts[first : last + 1] - starts[first]) * np_dtype.itemsize
    for begin, end in zip(offsets[:-1].tolist(), offsets[1:].tolist()):
      writer.write(payload[begin:end])
    all_lengths.append(lengths[first:last])
  writer.close()
  info = finish_shard(local_dir, name, index, np.concatenate(all_lengths))
  if local_dir != out_dir:
    for file_name in (shard_name, lengths_name):
      with open(os.path.join(local_dir, file_name), "rb") as f:
        _put(_join(out_dir, file_name), f.read())
  return info


def _write_manifest(infos: list[ShardInfo], results: list[UnitResult], out_dir: str, name: str, dtype: str,
                    tokenizer: dict[str, Any], files: list[str], options: ConvertOptions) -> None:
  results = sorted(results, key=lambda r: r.unit)
  shards = tuple(sorted(infos, key=lambda info: info.path))  # names carry the index, zero-padded
  manifest = Manifest(name=name, dtype=dtype, tokenizer=tokenizer, shards=shards,
                      stats=conversion_stats(files, results, options))
  if is_remote(out_dir):
    local = tempfile.mkdtemp(prefix="jaxdata-manifest-")
    with open(manifest.save(local), "rb") as f:
      _put(_join(out_dir, MANIFEST_NAME), f.read())
  else:
    manifest.save(out_dir)


def convert_with_beam(
    inputs: Sequence[str],
    out_dir: str,
    name: str,
    options: ConvertOptions = ConvertOptions(),
    beam_args: Sequence[str] = (),
    overwrite: bool = False,
    scratch: str | None = None,
) -> Manifest:
  """`convert` as a Beam pipeline (options from `beam_args`, e.g. ``--runner=DataflowRunner``).

  `scratch` (default: `--temp_location`'s ``jaxdata-scratch``, else a
  local temporary directory) holds the tokenized units between stages: on a
  cluster it must be shared storage (gs://, s3://). Returns the manifest
  (read back when `out_dir` is local).
  """
  beam = _beam()
  pipeline_options = importlib.import_module("apache_beam.options.pipeline_options")
  files = expand_inputs(inputs, options.include, options.exclude)
  if not files:
    raise FileNotFoundError(f"input: no files found in {list(inputs)}")
  formats = [detect_format(f, options.input_format) for f in files]
  tokenizer = load_tokenizer(options.tokenizer)
  dtype = dtype_for_vocab_size(tokenizer.vocab_size)
  if not is_remote(out_dir):
    if os.path.exists(os.path.join(out_dir, MANIFEST_NAME)) and not overwrite:
      raise FileExistsError(f"{out_dir}: already holds a dataset ({MANIFEST_NAME}); pass --overwrite to replace it")
    prepare_output(out_dir, overwrite)
    os.makedirs(out_dir, exist_ok=True)
  total = sum(os.path.getsize(f) for f in files)
  units = plan_units(files, formats, options.text_mode, unit_size(total, BEAM_UNIT_WORKERS, options))
  options_obj = pipeline_options.PipelineOptions(list(beam_args))
  temp_location = options_obj.view_as(pipeline_options.GoogleCloudOptions).temp_location
  owned = scratch is None and not temp_location
  scratch = scratch or (_join(temp_location, "jaxdata-scratch") if temp_location else tempfile.mkdtemp(
      prefix=".jaxdata-beam-", dir=os.path.dirname(os.path.abspath(out_dir)) if not is_remote(out_dir) else None))
  try:
    with beam.Pipeline(options=options_obj) as pipeline:
      results = (pipeline | "Units" >> beam.Create(units) | "SpreadUnits" >> beam.Reshuffle()
                 | "Tokenize" >> beam.Map(_tokenize, options, scratch))
      every_result = results | "AllUnits" >> beam.combiners.ToList()
      infos = (every_result
               | "PlanShards" >> beam.FlatMap(plan_shard_jobs, scratch, dtype.itemsize, options.shard_bytes)
               | "SpreadShards" >> beam.Reshuffle()
               | "WriteShards" >> beam.Map(_write_shard, out_dir, name, dtype.name, scratch)
               | "AllShards" >> beam.combiners.ToList())
      _ = infos | "Manifest" >> beam.Map(_write_manifest, beam.pvalue.AsSingleton(every_result), out_dir, name,
                                         dtype.name, tokenizer.identity(), files, options)
  finally:
    if owned:
      for entry in os.listdir(scratch):
        os.remove(os.path.join(scratch, entry))
      os.rmdir(scratch)
  return Manifest.parse(_get(_join(out_dir, MANIFEST_NAME)), _join(out_dir, MANIFEST_NAME))
