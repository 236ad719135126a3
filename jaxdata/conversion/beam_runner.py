"""Conversion as an Apache Beam pipeline: the local converter's output, at corpus scale.

The same three phases as `jaxdata.conversion.local_runner`, each a Beam stage::

    Create(units) -> Reshuffle -> Tokenize (parallel)          tokens + lengths of each unit -> scratch
      -> ToList -> PlanShards (one worker: lengths only)        shard_jobs.plan_shard_jobs, in unit order
      -> Reshuffle -> WriteShards (parallel)                    shard_jobs.write_shard from its units' tokens
      -> ToList -> Manifest                                     stats from every unit's counts

Shard boundaries are `plan_shards` of the lengths (a function of the
documents alone) and a shard's bytes come from `finish_shard` and the same
ArrayRecord options, so the output is byte-identical to `convert` for the
same inputs and options, whatever the runner, its parallelism or how units
are cut. Scratch and output go through Beam's `FileSystems` (local paths,
or `gs://` / `s3://` on a cluster); `pip install 'jaxdata[beam]'`.

>>> # jaxdata convert corpus/ --out data/web --name web --runner beam --beam-options="--direct_num_workers=2"
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import re
import shutil
import sys
import tempfile
import threading
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from jaxdata.conversion.options import ConvertOptions
from jaxdata.conversion.output import check_output, prepare_output, staging_directory, swap_in
from jaxdata.conversion.plan import ConversionPlan, conversion_plan
from jaxdata.conversion.remote_inputs import set_options
from jaxdata.conversion.shard_jobs import ShardJob, ShardTarget, plan_shard_jobs, record_sizes, write_shard
from jaxdata.conversion.tokenize_units import (
  UnitResult,
  tokenize_unit,
)
from jaxdata.conversion.vision_units import UnitImages, tokenize_vision_unit
from jaxdata.conversion.work_units import WorkUnit
from jaxdata.errors import ConfigError, DatasetError, Error, InputFormatError, optional_module
from jaxdata.sources.manifest import MANIFEST_NAME, Manifest, ShardInfo
from jaxdata.sources.stores import is_remote

__all__ = ["convert_with_beam"]

BEAM_UNIT_WORKERS = 16  # units are cut as if for this many workers (a cluster has more than a laptop)


_PURPOSE = "the Beam converter"


def _beam() -> Any:
  # Importing Beam warns on the root logger that BigQuery's clients are missing: nothing jaxdata uses.
  root = logging.getLogger()
  level = root.level
  root.setLevel(max(level, logging.ERROR))
  try:
    return optional_module("apache_beam", "beam", _PURPOSE)
  finally:
    root.setLevel(level)


def _filesystems() -> Any:
  return optional_module("apache_beam.io.filesystems", "beam", _PURPOSE).FileSystems


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
  masks: np.ndarray | None
  if options.examples == "vision":
    tokens, lengths, masks, images, result = tokenize_vision_unit(unit, options)
    for kind, values in (("images", images.blob), ("image_counts", images.counts), ("image_table", images.table)):
      _put(_join(scratch, f"{unit.index:07d}.{kind}.npy"), _npy(values))
  else:
    tokens, lengths, masks, result = tokenize_unit(unit, options)
  _put(_join(scratch, f"{unit.index:07d}.tokens.npy"), _npy(tokens))
  _put(_join(scratch, f"{unit.index:07d}.lengths.npy"), _npy(lengths))
  if masks is not None:
    _put(_join(scratch, f"{unit.index:07d}.masks.npy"), _npy(masks))
  return result


def _unit_lengths(results: list[UnitResult], scratch: str, plan: ConversionPlan) -> list[ShardJob]:
  """The shard jobs, planned from every unit's record sizes (read from scratch) in unit order."""
  vision = plan.options.examples == "vision"
  sizes = [
    (
      u,
      record_sizes(
        _array(_join(scratch, f"{u:07d}.lengths.npy")), plan.bytes_per_token, _images(scratch, u) if vision else None
      ),
    )
    for u in sorted(r.unit for r in results)
  ]
  return plan_shard_jobs(sizes, 1, plan.options.shard_bytes)


def _images(scratch: str, unit: int) -> UnitImages:
  """A unit's images as its tokenize task left them in scratch."""
  kinds = ("image_counts", "image_table", "images")
  counts, table, blob = (_array(_join(scratch, f"{unit:07d}.{kind}.npy")) for kind in kinds)
  return UnitImages(counts, table, blob)


def _array(path: str) -> np.ndarray:
  return np.load(io.BytesIO(_get(path)), allow_pickle=False)


def _write_shard(job: ShardJob, target: ShardTarget) -> ShardInfo:
  """A shard written locally (into out_dir, or a temporary directory first for a bucket)."""
  out_dir, scratch = target.out_dir, target.scratch
  local_dir = out_dir if not is_remote(out_dir) else tempfile.mkdtemp(prefix="jaxdata-shard-")
  info = write_shard(
    job,
    local_dir,
    target.name,
    target.dtype,
    lambda u: _array(_join(scratch, f"{u:07d}.tokens.npy")),
    lambda u: _array(_join(scratch, f"{u:07d}.lengths.npy")),
    compression=target.compression,
    masks_of=(lambda u: _array(_join(scratch, f"{u:07d}.masks.npy"))) if target.masks else None,
    pairs=target.pairs,
    images_of=(lambda u: _images(scratch, u)) if target.images else None,
  )
  if local_dir != out_dir:
    for file_name in info.files():
      with open(os.path.join(local_dir, file_name), "rb") as f:
        _put(_join(out_dir, file_name), f.read())
  return info


def _write_manifest(
  infos: list[ShardInfo], results: list[UnitResult], target: ShardTarget, plan: ConversionPlan
) -> None:
  out_dir = target.out_dir
  results = sorted(results, key=lambda r: r.unit)
  shards = tuple(sorted(infos, key=lambda info: info.path))  # names carry the index, zero-padded
  manifest = plan.manifest(target.name, shards, results)
  if is_remote(out_dir):
    local = tempfile.mkdtemp(prefix="jaxdata-manifest-")
    with open(manifest.save(local), "rb") as f:
      _put(_join(out_dir, MANIFEST_NAME), f.read())
  else:
    manifest.save(out_dir)


LOCAL_RUNNERS = ("DirectRunner", "PrismRunner", "InteractiveRunner", "BundleBasedDirectRunner", "SwitchingDirectRunner")


def _check_shared_storage(runner: Any, out_dir: str, scratch: str | None) -> None:
  """On a cluster runner every worker must reach the output and the scratch: refuse local paths."""
  name = runner if isinstance(runner, str) else type(runner).__name__
  if name.split(".")[-1] in LOCAL_RUNNERS:
    return
  if not is_remote(out_dir):
    raise ValueError(
      f"out_dir: {out_dir!r} is a local path, but the {name} runs on other machines: give a gs:// or s3:// output"
    )
  if scratch is None or not is_remote(scratch):
    raise ValueError(
      f"scratch: {scratch or 'a local temporary directory'!r} is not shared storage, but the {name} "
      "runs on other machines: give --temp_location (or --gcp_temp_location) gs://... or s3://..."
    )


def _remove_scratch(scratch: str) -> None:
  """Deletes this run's scratch folder and everything in it (local or in a bucket)."""
  if not is_remote(scratch):
    shutil.rmtree(scratch, ignore_errors=True)
    return
  filesystems = _filesystems()
  found = filesystems.match([_join(scratch, "*")])[0].metadata_list
  if found:
    filesystems.delete([entry.path for entry in found])


# The errors a worker's traceback may end with, raised again here by name (the rest stay Beam's).
_RAISED_AGAIN: dict[str, type[Exception]] = {
  **{f"jaxdata.errors.{kind.__name__}": kind for kind in (DatasetError, InputFormatError, ConfigError)},
  **{kind.__name__: kind for kind in (FileNotFoundError, PermissionError, IsADirectoryError, UnicodeError)},
  "ValueError": ValueError,
}
_FINAL_ERROR = re.compile(r"^([\w.]+): (.*?)(?: \[while running '[^']*'\])?$", re.MULTILINE)


class _QuietStderr:
  """fd 2 pointed at one log file, and Beam's loggers at CRITICAL, while any quiet Beam run of this
  process is under way (runs in threads share them); restored when the last one ends, the file kept
  if any of them failed."""

  def __init__(self) -> None:
    self.lock = threading.Lock()
    self.runs = 0
    self.failed = False
    self.saved = -1
    self.log = ""
    self.level = logging.NOTSET

  def enter(self) -> str:
    with self.lock:
      if self.runs == 0:
        handle, self.log = tempfile.mkstemp(prefix="jaxdata-beam-", suffix=".log")
        sys.stderr.flush()
        self.saved, self.failed = os.dup(2), False
        os.dup2(handle, 2)
        os.close(handle)
        beam_logger = logging.getLogger("apache_beam")
        self.level = beam_logger.level
        beam_logger.setLevel(logging.CRITICAL)
      self.runs += 1
      return self.log

  def leave(self, failed: bool) -> None:
    with self.lock:
      self.runs -= 1
      self.failed = self.failed or failed
      if self.runs == 0:
        logging.getLogger("apache_beam").setLevel(self.level)
        sys.stderr.flush()
        os.dup2(self.saved, 2)
        os.close(self.saved)
        if not self.failed:
          os.remove(self.log)


_QUIET_STDERR = _QuietStderr()


@contextlib.contextmanager
def _beam_logs_quiet(quiet: bool) -> Iterator[str | None]:
  """Beam's own lines go to a log file for the run (yields its path; None when not quiet).

  Beam's loggers here are set to CRITICAL (the job service relays every worker line), and this
  process's stderr (fd 2, which Beam's worker processes inherit: they print their imports'
  warnings and each failure's traceback there) points at the file. It is removed after a
  success and kept after a failure, whose error names it: nothing Beam said is lost.
  """
  if not quiet:
    yield None
    return
  log = _QUIET_STDERR.enter()
  failed = True
  try:
    yield log
    failed = False
  finally:
    _QUIET_STDERR.leave(failed)


@contextlib.contextmanager
def _named_errors(log: str | None) -> Iterator[None]:
  """A worker's failure as the error it raised (one line, its own type), not Beam's wrapping of it:
  in process Beam appends "[while running 'Step']"; from worker processes it is a RuntimeError
  holding the worker's traceback text. The message names Beam's log file when there is one."""
  suffix = f" (Beam's log: {log})" if log else ""
  try:
    yield
  except Error as e:  # raised in this process (the DirectRunner's in-process path): its own type
    raise type(e)(_FINAL_ERROR.sub(r"\2", f"{type(e).__name__}: {e}").strip() + suffix) from None
  except (RuntimeError, ValueError, OSError) as e:
    found = [(kind, message) for kind, message in _FINAL_ERROR.findall(str(e)) if kind in _RAISED_AGAIN]
    if not found:
      raise
    kind, message = found[-1]
    raise _RAISED_AGAIN[kind](message + suffix) from None


def _pipeline_options(beam_args: Sequence[str]) -> tuple[Any, str, str | None, bool]:
  """Beam's options from `beam_args`: (the options, the runner's name, the temp location, whether the
  workers' logs are quieted)."""
  _beam()  # first: importing Beam quietly
  pipeline_options = optional_module("apache_beam.options.pipeline_options", "beam", _PURPOSE)
  beam_args = list(beam_args)
  quiet = not any(arg.startswith("--default_sdk_harness_log_level") for arg in beam_args)
  if quiet:  # workers log every bundle and relay each error's traceback; a failure is raised here, named
    beam_args.append("--default_sdk_harness_log_level=CRITICAL")
  options_obj = pipeline_options.PipelineOptions(beam_args)
  set_options(options_obj)  # gs:// / s3:// inputs are listed here with the pipeline's settings
  # --gcp_temp_location is the Java SDK's (and Dataflow's docs') name: Beam's Python options drop it as unknown.
  temp_location = options_obj.view_as(pipeline_options.GoogleCloudOptions).temp_location or options_obj.get_all_options(
    retain_unknown_options=True
  ).get("gcp_temp_location")
  runner = options_obj.view_as(pipeline_options.StandardOptions).runner or "DirectRunner"
  return options_obj, runner, temp_location, quiet


def _build_graph(pipeline: Any, plan: ConversionPlan, shards: ShardTarget) -> None:
  """The plan's tasks on `pipeline`: tokenize the units, plan and write the shards, then the manifest."""
  beam = _beam()
  scratch, options = shards.scratch, plan.options
  results = (
    pipeline
    | "Units" >> beam.Create(list(plan.units))
    | "SpreadUnits" >> beam.Reshuffle()
    | "Tokenize" >> beam.Map(_tokenize, options, scratch)
  )
  every_result = results | "AllUnits" >> beam.combiners.ToList()
  infos = (
    every_result
    | "PlanShards" >> beam.FlatMap(_unit_lengths, scratch, plan)
    | "SpreadShards" >> beam.Reshuffle()
    | "WriteShards" >> beam.Map(_write_shard, shards)
    | "AllShards" >> beam.combiners.ToList()
  )
  _ = infos | "Manifest" >> beam.Map(_write_manifest, beam.pvalue.AsSingleton(every_result), shards, plan)


def convert_with_beam(
  inputs: Sequence[str],
  out_dir: str,
  name: str,
  options: ConvertOptions = ConvertOptions(),
  beam_args: Sequence[str] = (),
  overwrite: bool = False,
  *,
  scratch: str | None = None,
) -> Manifest:
  """`convert` as a Beam pipeline (options from `beam_args`, e.g. ``--runner=DataflowRunner``).

  `scratch` (default: `--temp_location`'s, else `--gcp_temp_location`'s ``jaxdata-scratch``, else a local
  temporary directory) holds the tokenized units between stages, in a folder of this run's own (a random
  name), so conversions that share a temp location never see each other's units; the folder is removed
  when the run ends, whether it succeeded or not. On a cluster runner (anything but the local Direct /
  Prism runners) scratch and `out_dir` must be shared storage (gs://, s3://): a local path there is a
  `ValueError` before anything runs. Returns the manifest (read back when `out_dir` is local).
  """
  options_obj, runner, temp_location, quiet = _pipeline_options(beam_args)
  root = scratch or (_join(temp_location, "jaxdata-scratch") if temp_location else None)
  _check_shared_storage(runner, out_dir, root)
  plan = conversion_plan(inputs, options, BEAM_UNIT_WORKERS)  # units sized alike on any cluster
  target = out_dir  # where the shards go: beside a local dataset being replaced, swapped in when sealed
  if not is_remote(out_dir):
    check_output(out_dir, inputs, overwrite)
    if overwrite and os.path.exists(os.path.join(out_dir, MANIFEST_NAME)):
      target = staging_directory(out_dir)
    created = not os.path.exists(target)
    os.makedirs(target, exist_ok=True)
  else:
    created = False
    prepare_output(out_dir, overwrite)  # (a bucket has no atomic swap: a remote dataset is replaced in place)
  if root is None:  # a local run: a fresh temporary directory is this run's alone
    scratch = tempfile.mkdtemp(
      prefix=".jaxdata-beam-", dir=os.path.dirname(os.path.abspath(out_dir)) if not is_remote(out_dir) else None
    )
  else:  # runs that share a temp location each get a folder of their own
    scratch = _join(root, uuid.uuid4().hex)
  try:
    with _beam_logs_quiet(quiet) as log, _named_errors(log), _beam().Pipeline(options=options_obj) as pipeline:
      _build_graph(pipeline, plan, plan.shard_target(target, name, scratch))
  except BaseException:  # re-raised: a failed replacement leaves the old dataset as it was, a new --out is removed
    if target != out_dir or created:
      shutil.rmtree(target, ignore_errors=True)
    raise
  finally:
    _remove_scratch(scratch)
  if target != out_dir:
    swap_in(target, out_dir)
  return Manifest.parse(_get(_join(out_dir, MANIFEST_NAME)), _join(out_dir, MANIFEST_NAME))
