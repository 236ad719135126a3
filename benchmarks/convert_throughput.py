"""The converter: documents/s and MB/s with 1 and 2 workers, one large file and many small ones; Beam's local runner.

    python -m benchmarks.convert_throughput [--out /tmp/jaxdata-convert-bench] [--large-mb 1024] [--small-files 2000]

Inputs (written once, reused): one large JSONL file (`--large-mb`, default
1 GB) and `--small-files` JSONL files of about 50 KB; documents of 200-4,000
characters of English-like words. Byte-level tokenizer, 256 MiB shards.
Printed per run: wall time, documents/s, input MB/s, the seconds until the
first progress report (the scan that cuts a large file counts) and until the
first one of tokenized bytes, and the CPU time of the process and
its workers over the wall time (2.0 = both cores busy). The Beam runs use
the DirectRunner in multi-processing mode with 2 workers, on the small
files and on the large file, and are checked byte-identical to the local
output. Ray runs the same units as tasks on a Ray started for the run (2
CPUs), checked byte-identical too. Grain has no converter to compare with.

The in-pipeline build: a config naming the large file as raw inputs
(`datasets[].inputs`), opened by a `Pipeline` with an empty cache: the
seconds to the first batch (the build included), and MB/s per core against
`jaxdata convert`'s in the same run. Then the second run's first batch (the
cache found by its key: the file's stat and sampled hash) against the same
config pointed at the converted dataset: medians of 3.
"""

from __future__ import annotations

import argparse
import filecmp
import json
import os
import resource
import shutil
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from jaxdata.config.pipeline_config import PipelineConfig
from jaxdata.conversion.beam_runner import convert_with_beam
from jaxdata.conversion.local_runner import convert
from jaxdata.conversion.options import ConvertOptions
from jaxdata.conversion.ray_runner import convert_with_ray
from jaxdata.pipeline.pipeline import Pipeline

WORDS = np.array(
  "the of and to in is was for on that with as by at from his her it an were are which this be or "
  "had not but first one their its new after who they have two has been other when there all during "
  "into school time may years more most only over city some world would where later up such used many "
  "can state about national out known university united then made".split()
)


def write_jsonl(path: str, megabytes: float, seed: int) -> int:
  """Documents of 200-4,000 characters until the file reaches `megabytes`; returns the document count."""
  rng = np.random.default_rng(seed)
  target, written, documents = int(megabytes * 1e6), 0, 0
  with open(path, "w") as f:
    while written < target:
      words = WORDS[rng.integers(0, WORDS.size, 400_000)]
      lengths = rng.integers(40, 700, int(min(2_000, max(8, (target - written) / 2_000))))
      starts = np.concatenate([[0], np.cumsum(lengths)])[:-1] % (words.size - 700)
      lines = "".join(json.dumps({"text": " ".join(words[s : s + n])}) + "\n" for s, n in zip(starts, lengths))
      f.write(lines)
      written += len(lines)
      documents += lengths.size
  return documents


def cpu_seconds() -> float:
  own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
  return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def measure(label: str, run: Callable[[Callable], Any], size: int) -> str:
  first, tokenizing = [None], [None]
  started = time.perf_counter()

  def progress(phase: str, done: int, total: int, documents: int) -> None:
    if done and first[0] is None:
      first[0] = time.perf_counter() - started
    if phase == "tokenize" and done and tokenizing[0] is None:
      tokenizing[0] = time.perf_counter() - started

  cpu = cpu_seconds()
  manifest = run(progress)
  wall = time.perf_counter() - started
  used = (cpu_seconds() - cpu) / wall
  reports = "/".join(f"{t:.2f}" if t is not None else "-" for t in (first[0], tokenizing[0]))
  return (
    f"{label:34s} {wall:6.1f} s {manifest.num_records / wall / 1e3:6.1f}k docs/s {size / wall / 1e6:6.1f} MB/s  "
    f"first progress / tokenized bytes {reports} s  CPU {used:4.2f} cores"
  )


def same_files(a: str, b: str) -> bool:
  names = sorted(os.listdir(a))
  return names == sorted(os.listdir(b)) and all(
    filecmp.cmp(os.path.join(a, n), os.path.join(b, n), shallow=False) for n in names
  )


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--out", default="/tmp/jaxdata-convert-bench")
  parser.add_argument("--large-mb", type=float, default=1024)
  parser.add_argument("--small-files", type=int, default=2000)
  args = parser.parse_args()
  inputs = os.path.join(args.out, "inputs")
  large, small = os.path.join(inputs, "large", "all.jsonl"), os.path.join(inputs, "small")
  if not os.path.exists(large) or abs(os.path.getsize(large) - args.large_mb * 1e6) > 5e6:
    os.makedirs(os.path.dirname(large), exist_ok=True)
    write_jsonl(large, args.large_mb, 0)
  if not os.path.isdir(small) or len(os.listdir(small)) != args.small_files:
    shutil.rmtree(small, ignore_errors=True)
    os.makedirs(small)
    for i in range(args.small_files):
      write_jsonl(os.path.join(small, f"part-{i:05d}.jsonl"), 0.05, i + 1)
  sizes = {
    "large": os.path.getsize(large),
    "small": sum(os.path.getsize(os.path.join(small, f)) for f in os.listdir(small)),
  }
  print(
    f"inputs: one file of {sizes['large'] / 1e6:.0f} MB; {args.small_files} files, {sizes['small'] / 1e6:.0f} MB "
    f"in all; {os.cpu_count()} cores"
  )
  outputs = os.path.join(args.out, "outputs")
  shutil.rmtree(outputs, ignore_errors=True)
  beam_args = ["--direct_num_workers=2", "--direct_running_mode=multi_processing"]
  for kind, source in (("large", large), ("small", small)):
    for workers in (1, 2):
      out = os.path.join(outputs, f"{kind}-local-{workers}")
      options = ConvertOptions(workers=workers)
      print(
        measure(
          f"{kind} file(s), local, {workers} worker(s)",
          lambda progress, source=source, out=out, options=options: convert([source], out, "bench", options, progress),
          sizes[kind],
        ),
        flush=True,
      )
    out = os.path.join(outputs, f"{kind}-beam")
    print(
      measure(
        f"{kind} file(s), Beam DirectRunner x2",
        lambda progress, source=source, out=out: convert_with_beam([source], out, "bench", ConvertOptions(), beam_args),
        sizes[kind],
      ),
      flush=True,
    )
    print(
      f"   Beam output byte-identical to the local one: {same_files(out, os.path.join(outputs, f'{kind}-local-2'))}"
    )
    out = os.path.join(outputs, f"{kind}-ray")
    print(
      measure(
        f"{kind} file(s), Ray x2",
        lambda progress, source=source, out=out: convert_with_ray(
          [source], out, "bench", ConvertOptions(), None, progress
        ),
        sizes[kind],
      ),
      flush=True,
    )
    print(f"   Ray output byte-identical to the local one: {same_files(out, os.path.join(outputs, f'{kind}-local-2'))}")
  in_pipeline(large, sizes["large"], outputs)


def first_batch_s(cfg: PipelineConfig) -> float:
  """Seconds from opening a pipeline on `cfg` to its first batch."""
  started = time.perf_counter()
  with Pipeline(cfg, prefetch=0) as pipe:
    next(pipe)
  return time.perf_counter() - started


def in_pipeline(large: str, size: int, outputs: str) -> None:
  """The raw-inputs path: the first run builds the cache, the next ones find it (see the module docstring)."""

  def config(entry: dict[str, Any]) -> PipelineConfig:
    return PipelineConfig.from_dict(
      {
        "datasets": [{"name": "bench", **entry}],
        "mixture": {"weights": {"bench": 1}},
        "packing": {"seq_len": 2048},
        "batch": {"global_batch_size": 16},
        "cache_dir": os.path.join(outputs, "cache"),
      }
    )

  raw = config({"inputs": [large], "tokenizer": "byte"})
  converted = config({"path": os.path.join(outputs, "large-local-2")})
  cpu = cpu_seconds()
  build = first_batch_s(raw)
  cores = (cpu_seconds() - cpu) / build
  print(
    f"in-pipeline build (raw inputs, empty cache): first batch after {build:.1f} s, {size / build / 1e6:.1f} MB/s, "
    f"{size / build / 1e6 / max(cores, 1e-9):.1f} MB/s per core busy ({cores:.2f} cores)"
  )
  again = sorted(first_batch_s(raw) for _ in range(3))[1]
  direct = sorted(first_batch_s(converted) for _ in range(3))[1]
  print(
    f"second run, first batch: {again:.2f} s with the cache found by its key, {direct:.2f} s on the converted "
    f"dataset ({again / direct:.2f}x)"
  )


if __name__ == "__main__":
  main()
