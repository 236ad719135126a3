"""End-to-end packed batches: jaxdata vs Grain on the same files, in one run.

    python benchmarks/make_corpus.py --out /tmp/jaxdata-bench
    python -m benchmarks.pipeline_throughput --corpus /tmp/jaxdata-bench

Both id widths by default: the corpus at --corpus (uint16, vocab 50,257) and
its uint32 twin (vocab 128,256, `<corpus>-u32`), each with every kind, then a
side-by-side table. `--widths uint32 --compression none` measures the uint32
corpus written without record compression; `--kinds` picks configurations.

Workload: the 4-dataset benchmark corpus; token shares web .62, code .18,
books .12, curated .08; a global shuffle per dataset; first_fit packing,
seq_len 2048, 32 rows per step; one host.

Grain: per dataset MapDataset.source(ArrayRecordDataSource).shuffle().repeat(),
decoded to int32, documents split to <= 2048 tokens (FlatMap), mixed with
per-piece weights that give the same token shares, FirstFitPackIterDataset
with 32 bins, batch 32; run single-process and with mp_prefetch(2).
jaxdata: in process (`making="here"`), with the planner in a process of its own
(`making="process"`, the default with a mesh on >= 4 cores) and with reader
processes (`StepMaking("process", reader_processes=n)`), NumPy output and `jax.Array` output on an 8-device CPU mesh;
`jaxdata-mesh8-stored-order` the mesh defaults with `shuffle_block_size: null`
(shards only: what the default global shuffle costs against stored order) and
`jaxdata-mesh8-auto-blocks` with `auto` blocks (8 x the largest shard);
`jaxdata-mesh8-loop-features` the mesh defaults with `batch.features` of a loop
that reads no source_ids or positions; `jaxdata-mesh8-no-C`
runs the mesh defaults with JAXDATA_NATIVE=0 (assembly, first-fit and the
exact interleave's picks in NumPy and Python instead of C), for what the C
loops bring.

The package's bytecode is compiled first (as a pip install leaves it), so a
fresh process's first batch counts its imports but no compiling. Every
configuration runs in its own subprocess (its peak RSS is that of its
whole process tree, workers included, sampled every 50 ms); all of them run
`--repetitions` times, interleaved, and the median is printed. Each run takes
WARMUP steps, measures STEPS, goes on to step RESTORE_AT, saves the state,
and times a new pipeline's restore + first batch (checked equal to the
original's next batch). Both sides print the token shares they realised
(mesh rows count from the pipeline's per-step stats and copy every 10th
batch back to check them: a training loop never copies its batches back).
Every row also prints the CPU time its whole process tree spent per 65,536
non-padding tokens and the cores it kept busy, and the ceiling's; from them,
the CPU a 0.6 share of the ceiling would allow on this machine's cores.
`--baseline CHECKOUT` runs every jaxdata kind also from another checkout
(its own library and this benchmark as it stands there, e.g. the commit
before a change, in a `git worktree` with its extensions built), interleaved
with this one's runs, and prints both side by side as ratios.
Also printed: the raw read ceiling, the per-host spread of documents read on
a v5p-128 slice (1024 x 4096), and how much a Python-bound "training loop"
thread slows down while a pipeline feeds it 2M tokens/s.
"""

from __future__ import annotations

import argparse
import compileall
import functools
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

import numpy as np

from benchmarks.make_corpus import CORPORA, VOCABS, corpus_dir, make_corpus
from jaxdata.sources.manifest import COMPRESSIONS

TOKEN_SHARES = {"web": 0.62, "code": 0.18, "books": 0.12, "curated": 0.08}
SEQ_LEN = 2048
ROWS = 32
WARMUP, STEPS, RESTORE_AT = 150, 300, 1000
CHECK_EVERY = 10  # mesh rows: every 10th batch is copied back to the host and counted
FEED_TOKENS_PER_S = 2_000_000  # the training-thread check's feeding rate
LOOP_FEATURES = ["tokens", "targets", "segment_ids", "loss_mask"]  # `features` below: batch.features
JAXDATA_KINDS: dict[str, tuple[int, dict[str, Any]]] = {  # name: (mesh devices, Pipeline arguments)
  "jaxdata": (0, {}),  # the defaults: NumPy output plans in process
  "jaxdata-planner": (0, {"making": ("process", 0)}),
  "jaxdata-mesh8": (8, {}),  # the defaults with a mesh: on < 4 cores, planned in process
  "jaxdata-mesh8-planner": (8, {"making": ("process", 0)}),  # the default on >= 4 cores
  "jaxdata-mesh8-loop-features": (8, {"features": LOOP_FEATURES}),  # the defaults, no source_ids / positions
  # the mesh defaults with shards only (stored order inside each shard): what the default global shuffle costs
  "jaxdata-mesh8-stored-order": (8, {"shuffle_block_size": None}),
  "jaxdata-mesh8-auto-blocks": (8, {"shuffle_block_size": "auto"}),  # blocks of 8 shards' records
  "jaxdata-mesh8-interval-1ms": (8, {"switch_interval_s": 0.001}),  # the GIL switch interval lowered to 1 ms
  "jaxdata-mesh8-no-C": (8, {}),  # the defaults with JAXDATA_NATIVE=0: the Python / NumPy loops (see NO_C)
  "jaxdata-readers1": (0, {"making": ("process", 1)}),  # one reader process
  "jaxdata-mesh8-readers1": (8, {"making": ("process", 1)}),
  "jaxdata-mesh8-readers2": (8, {"making": ("process", 2)}),
}
TRAINING_KINDS: dict[str, tuple[int, dict[str, Any]]] = {  # the training-thread check: (mesh devices, arguments)
  "training-thread-in-process": (0, {"making": ("here", 0)}),
  "training-thread-planner": (0, {"making": ("process", 0)}),
  "training-thread-readers1": (0, {"making": ("process", 1)}),
  "training-thread-mesh8": (8, {}),  # the defaults with a mesh (on < 4 cores: planned in process)
  "training-thread-mesh8-planner": (8, {"making": ("process", 0)}),
  "training-thread-mesh8-interval-1ms": (8, {"switch_interval_s": 0.001}),  # the GIL switch interval at 1 ms
}
GRAIN_KINDS = {"grain": 0, "grain-mp": 2}
BASELINE = "@baseline"  # a kind named with this suffix runs from the --baseline checkout
NO_C = "-no-C"  # a kind named with this suffix runs with JAXDATA_NATIVE=0 (jaxdata._native_switch)


def jaxdata_config(corpus: str, features: list[str] | None = None, block_size: Any = "global") -> Any:
  """The benchmark workload as a jaxdata PipelineConfig (with `features`: only those arrays;
  `block_size`: the shuffle_block_size, global as by default)."""
  import jaxdata  # noqa: PLC0415 -- imported in the measuring subprocess only

  batch: dict[str, Any] = {"global_batch_size": ROWS}
  if features is not None:
    batch["features"] = features
  return jaxdata.PipelineConfig.from_dict(
    {
      "datasets": [{"name": n, "path": os.path.join(corpus, n)} for n in TOKEN_SHARES],
      "mixture": {"weights": TOKEN_SHARES, "unit": "tokens"},
      "shuffle_block_size": block_size,
      "exhausted_policy": "repeat",
      "packing": {"mode": "first_fit", "seq_len": SEQ_LEN},
      "batch": batch,
    }
  )


def _mesh(devices: int) -> Any:
  import jax  # noqa: PLC0415 -- after XLA_FLAGS

  if not devices:
    return None
  return jax.make_mesh((devices,), ("data",), axis_types=(jax.sharding.AxisType.Auto,))


def _count(batch: dict[str, Any], source_key: str, valid: np.ndarray | None = None) -> tuple[int, np.ndarray]:
  sources = np.asarray(batch[source_key])
  valid = sources >= 0 if valid is None else valid
  return int(valid.sum()), np.bincount(sources[valid], minlength=len(TOKEN_SHARES))


def _digest(batch: dict[str, Any]) -> list[bytes]:
  return [np.asarray(batch[k]).tobytes() for k in sorted(batch)]


def _measured(take: Any, source_key: str, valid_key: str | None, stated: Any = None) -> dict[str, Any]:
  """Warm up, then measure STEPS batches from `take()`, counting each batch's
  tokens per source. With `stated` (a function giving the pipeline's own
  per-source counts of the step just taken), device batches are counted from
  it and every CHECK_EVERY-th batch is copied back to the host and checked
  against it: a training loop never copies its batches back."""
  for _ in range(WARMUP):
    take()
  real, per_source = 0, np.zeros(len(TOKEN_SHARES))
  cpu_started, own_started, started = _tree_cpu_s(os.getpid()), _cpu_s(os.getpid()), time.perf_counter()
  for step in range(STEPS):
    batch = take()
    if stated is not None and step % CHECK_EVERY:
      sources = stated()
      count = int(sources.sum())
    elif source_key not in batch:  # a batch without source ids (batch.features): its tokens, checked
      sources = stated()
      count = int(sources.sum())
      if int((np.asarray(batch["segment_ids"]) > 0).sum()) != count:
        raise AssertionError(f"step {step}: the batch's tokens differ from the stats' {count}")
    else:
      valid = None if valid_key is None else np.asarray(batch[valid_key]) > 0
      count, sources = _count(batch, source_key, valid)
      if stated is not None and not np.array_equal(sources, stated()):
        raise AssertionError(f"step {step}: the batch's tokens per source {sources} differ from the stats")
    real += count
    per_source += sources
  seconds = time.perf_counter() - started
  cpu, own = _tree_cpu_s(os.getpid()) - cpu_started, _cpu_s(os.getpid()) - own_started
  return {
    "tokens_per_s": real / seconds,
    "efficiency": real / (STEPS * ROWS * SEQ_LEN),
    "shares": (per_source / real).tolist(),
    **_cpu_figures(cpu, seconds, real),
    "own_cpu_ms_per_64k": 1e3 * own * 65_536 / real,
    "others_cpu_ms_per_64k": 1e3 * (cpu - own) * 65_536 / real,
  }


def _cpu_figures(cpu_s: float, seconds: float, tokens: int) -> dict[str, float]:
  """CPU time (the whole process tree) per 65,536 tokens, and the cores it kept busy."""
  return {"cpu_ms_per_64k": 1e3 * cpu_s * 65_536 / tokens, "cores": cpu_s / seconds}


def _tree_cpu_s(pid: int) -> float:
  """User + system CPU seconds of a process and its live descendants."""
  return sum(_cpu_s(current) for current in tree_pids(pid))


def _cpu_s(pid: int) -> float:
  """User + system CPU seconds of one process, every thread (0 if it ended)."""
  try:
    with open(f"/proc/{pid}/stat") as f:
      fields = f.read().rsplit(")", 1)[1].split()
  except OSError:  # the process ended meanwhile
    return 0.0
  return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


def pipeline_arguments(arguments: dict[str, Any]) -> dict[str, Any]:
  """A kind's Pipeline arguments, with its ("planning", reader processes) as the `making=` of the
  jaxdata this process runs."""
  import jaxdata  # noqa: PLC0415

  arguments = dict(arguments)
  if "making" in arguments:
    planning, readers = arguments.pop("making")
    arguments["making"] = jaxdata.StepMaking(planning, reader_processes=readers)
  return arguments


def run_jaxdata(corpus: str, mesh_devices: int, arguments: dict[str, Any]) -> dict[str, Any]:
  import jaxdata  # noqa: PLC0415

  arguments = pipeline_arguments(arguments)
  features = arguments.pop("features", None)
  cfg = jaxdata_config(corpus, features, arguments.pop("shuffle_block_size", "global"))
  mesh = _mesh(mesh_devices)
  # A fresh process: the first batch's time includes the pipeline modules' first import (jaxdata
  # loads them lazily, at `jaxdata.Pipeline`), as a training script that restarts pays it.
  started = time.perf_counter()
  pipeline_class = jaxdata.Pipeline
  pipe = pipeline_class(cfg, mesh=mesh, prefetch=2, **arguments)
  next(pipe)
  first = time.perf_counter() - started
  stated = None
  if mesh_devices:
    stated = lambda: np.array(list(pipe.stats()["tokens_per_source"].values()))
  result = _measured(lambda: next(pipe), "source_ids", None, stated)
  for _ in range(RESTORE_AT - 1 - WARMUP - STEPS):
    next(pipe)
  state = json.loads(json.dumps(pipe.get_state()))
  expected = _digest(next(pipe))
  pipe.close()
  started = time.perf_counter()
  restored = pipeline_class(cfg, mesh=mesh, prefetch=2, **arguments)
  restored.set_state(state)
  batch = next(restored)
  restore = time.perf_counter() - started
  identical = _digest(batch) == expected
  restored.close()
  return {**result, "first_batch_s": first, "restore_s": restore, "restore_identical": identical}


def _decode(raw: bytes, source: int, dtype: str) -> dict[str, np.ndarray]:
  tokens = np.frombuffer(raw, dtype=dtype).astype(np.int32)
  return {"tokens": tokens, "source": np.full(tokens.size, source, np.int32)}


class _SplitDocument:
  """Grain FlatMap: a document -> pieces of at most SEQ_LEN tokens."""

  max_fan_out = 64  # the corpus caps documents at 65,536 tokens = 32 pieces

  def flat_map(self, element: dict[str, np.ndarray]) -> list[dict[str, np.ndarray]]:
    tokens, source = element["tokens"], element["source"]
    return [
      {"tokens": tokens[i : i + SEQ_LEN], "source": source[i : i + SEQ_LEN]}
      for i in range(0, max(len(tokens), 1), SEQ_LEN)
    ]


def grain_dataset(corpus: str, workers: int) -> Any:
  """The benchmark workload as a Grain IterDataset (see the module docstring)."""
  import grain  # noqa: PLC0415
  from absl import flags  # noqa: PLC0415

  import jaxdata  # noqa: PLC0415

  flags.FLAGS.mark_as_parsed()  # Grain reads absl flags; we are outside absl.app.run
  split_cls = type("SplitDocument", (grain.experimental.FlatMapTransform,), dict(_SplitDocument.__dict__))
  datasets, weights = [], []
  for i, name in enumerate(TOKEN_SHARES):
    local = jaxdata.sources.TokenDataset(os.path.join(corpus, name))
    paths = [local.shard_path(s) for s in range(local.num_shards)]
    pieces = np.maximum(1, -(-np.asarray(local.lengths, dtype=np.int64) // SEQ_LEN))
    mean_piece = local.lengths.sum() / pieces.sum()
    dtype = np.dtype(local.dtype).newbyteorder("<").str  # the ids' stored width
    local.close()
    source = grain.sources.ArrayRecordDataSource(paths)
    dataset = (
      grain.MapDataset.source(source)
      .shuffle(seed=i)
      .repeat()
      .map(functools.partial(_decode, source=i, dtype=dtype))
      .to_iter_dataset(grain.ReadOptions(num_threads=0))
    )
    datasets.append(grain.experimental.FlatMapIterDataset(dataset, split_cls()))
    weights.append(TOKEN_SHARES[name] / mean_piece)  # pieces drawn so that tokens follow the shares
  mixed = grain.IterDataset.mix(datasets, [w / sum(weights) for w in weights])
  packed = grain.experimental.FirstFitPackIterDataset(
    mixed, length_struct={"tokens": SEQ_LEN, "source": SEQ_LEN}, num_packing_bins=ROWS
  ).batch(ROWS)
  if workers:
    packed = packed.mp_prefetch(grain.MultiprocessingOptions(num_workers=workers))
  return packed


def run_grain(corpus: str, workers: int) -> dict[str, Any]:
  grain_dataset(corpus, workers)  # imports grain, outside the timed start
  started = time.perf_counter()
  iterator = iter(grain_dataset(corpus, workers))
  next(iterator)
  first = time.perf_counter() - started
  result = _measured(lambda: next(iterator), "source", "tokens_segment_ids")
  for _ in range(RESTORE_AT - 1 - WARMUP - STEPS):
    next(iterator)
  state = iterator.get_state()
  expected = _digest(next(iterator))
  iterator = None  # its mp_prefetch processes end when it is collected
  started = time.perf_counter()
  restored = iter(grain_dataset(corpus, workers))
  restored.set_state(state)
  batch = next(restored)
  restore = time.perf_counter() - started
  return {**result, "first_batch_s": first, "restore_s": restore, "restore_identical": _digest(batch) == expected}


def run_ceiling(corpus: str) -> dict[str, Any]:
  """Raw batched reads of random records in the workload's proportions: each
  round reads 4,096 records, split over the datasets by their document share
  (token share / mean length), one call per dataset; no planning or packing."""
  import jaxdata  # noqa: PLC0415

  datasets = [jaxdata.sources.TokenDataset(os.path.join(corpus, n)) for n in TOKEN_SHARES]
  rates = np.array([TOKEN_SHARES[d.name] / d.lengths.mean() for d in datasets])
  per_round = np.maximum(1, np.round(4096 * rates / rates.sum()).astype(int))
  rng = np.random.default_rng(0)
  target = STEPS * ROWS * SEQ_LEN
  tokens, cpu_started, started = 0, _tree_cpu_s(os.getpid()), time.perf_counter()
  while tokens < target:
    for dataset, count in zip(datasets, per_round):
      picks = rng.choice(dataset.num_records, min(int(count), dataset.num_records), replace=False)
      tokens += dataset.read_global(picks).tokens.size
  seconds = time.perf_counter() - started
  return {"tokens_per_s": tokens / seconds, **_cpu_figures(_tree_cpu_s(os.getpid()) - cpu_started, seconds, tokens)}


def _python_work(iterations: int) -> int:
  """A Python-bound stand-in for a training loop's own work (holds the GIL)."""
  total = 0
  for i in range(iterations):
    total += i * i % 7
  return total


def run_training_thread(corpus: str, mesh_devices: int, arguments: dict[str, Any]) -> dict[str, Any]:
  """Work rate of a Python-bound loop alone and while it also takes a batch
  every 65,536 / 2M seconds from a pipeline (prefetch 2): `phases` fed
  phases of `phase_s`, each between two phases alone; the slowdown is one
  minus the median of each fed phase's rate over the mean of its two
  neighbours alone (pairs cancel this machine's drifts in speed, which reach
  25% within a minute). Also the share of the fed phases' time spent inside
  next() (the training thread's own cost; the rest of the slowdown is the
  GIL time of the pipeline's threads and the other core's work reaching
  this one: caches, memory bandwidth)."""
  import jaxdata  # noqa: PLC0415

  chunk, phases, phase_s = 10_000, 30, 0.3
  interval = ROWS * SEQ_LEN / FEED_TOKENS_PER_S

  def work_rate(pipe: Any) -> tuple[float, float]:
    done, in_next, started = 0, 0.0, time.perf_counter()
    due = started
    while (now := time.perf_counter()) - started < phase_s:
      if pipe is not None and now >= due:
        next(pipe)
        in_next += time.perf_counter() - now
        due += interval
      _python_work(chunk)
      done += chunk
    elapsed = time.perf_counter() - started
    return done / elapsed, in_next / elapsed

  pipe = jaxdata.Pipeline(jaxdata_config(corpus), mesh=_mesh(mesh_devices), prefetch=2, **pipeline_arguments(arguments))
  for _ in range(50):
    next(pipe)  # past start-up (workers ready, read span grown)
  alone, fed, in_next = [work_rate(None)[0]], [], []  # alone: the pipeline idles, its prefetched steps ready
  for _ in range(phases):
    rate, share = work_rate(pipe)
    fed.append(rate)
    in_next.append(share)
    alone.append(work_rate(None)[0])
  pipe.close()
  ratios = [rate / ((before + after) / 2) for rate, before, after in zip(fed, alone, alone[1:])]
  return {"slowdown": 1 - statistics.median(ratios), "in_next": statistics.median(in_next)}


def tree_pids(pid: int) -> list[int]:
  """A process and all its descendants (children through
  /proc/PID/task/TID/children, so a sample reads a few files, not all of /proc)."""
  found, stack = [], [pid]
  while stack:
    current = stack.pop()
    found.append(current)
    try:
      for task in os.listdir(f"/proc/{current}/task"):
        with open(f"/proc/{current}/task/{task}/children") as f:
          stack.extend(int(child) for child in f.read().split())
    except OSError:  # the process ended meanwhile
      continue
  return found


def _tree_rss_mb(pid: int) -> float:
  """RSS of a process and all its descendants (from /proc)."""
  total = 0.0
  for current in tree_pids(pid):
    try:
      with open(f"/proc/{current}/status") as f:
        total += next((int(line.split()[1]) for line in f if line.startswith("VmRSS:")), 0) / 1024
    except OSError:  # the process ended meanwhile
      continue
  return total


def measure(kind: str, corpus: str, baseline: str | None = None) -> dict[str, Any]:
  """Runs one configuration in a fresh subprocess (a KIND@baseline from the `baseline` checkout, with its
  own copy of this benchmark); returns its JSON result with the peak RSS of its process tree."""
  checkout = baseline if kind.endswith(BASELINE) and baseline else os.getcwd()
  kind = kind.removesuffix(BASELINE)
  process = subprocess.Popen(
    [sys.executable, "-m", "benchmarks.pipeline_throughput", "--corpus", corpus, "--run", kind],
    stdout=subprocess.PIPE,
    stderr=subprocess.PIPE,
    text=True,
    cwd=checkout,
    env={**os.environ, "PYTHONPATH": checkout, "JAXDATA_NATIVE": "0" if kind.endswith(NO_C) else "1"},
  )
  peak = 0.0
  while process.poll() is None:
    peak = max(peak, _tree_rss_mb(process.pid))
    time.sleep(0.05)
  out, err = process.communicate()
  if process.returncode:
    raise RuntimeError(f"{kind} failed:\n{err[-3000:]}")
  return {**json.loads(out.strip().splitlines()[-1]), "peak_rss_mb": peak}


def run_kind(kind: str, corpus: str) -> dict[str, Any]:
  if kind in JAXDATA_KINDS or kind in TRAINING_KINDS:
    devices, arguments = JAXDATA_KINDS[kind] if kind in JAXDATA_KINDS else TRAINING_KINDS[kind]
    if devices:  # before jax starts its backend
      os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    if kind in TRAINING_KINDS:
      return run_training_thread(corpus, devices, arguments)
    return run_jaxdata(corpus, devices, arguments)
  if kind in GRAIN_KINDS:
    return run_grain(corpus, GRAIN_KINDS[kind])
  return run_ceiling(corpus)


def jaxdata_source_dirs() -> list[str]:
  """The directories of jaxdata's modules: the package, and `jaxdata.transforms`
  (a directory of its own in an editable install). Finding the subpackage
  imports `jaxdata` itself, which is light (its names load lazily)."""
  dirs = []
  for name in ("jaxdata", "jaxdata.transforms"):
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None:
      raise RuntimeError(f"{name} is not installed")
    dirs.append(os.path.dirname(os.path.abspath(spec.origin)))
  return dirs


def host_spread(corpus: str) -> float:
  """max / mean documents read per host and step on v5p-128 at 1024 x 4096."""
  from jaxdata.pipeline.slices import load_slice  # noqa: PLC0415
  from jaxdata.tools.mesh import mesh_report  # noqa: PLC0415

  return mesh_report(load_slice("v5p-128"), 1024, 4096, jaxdata_config(corpus), steps=5).spread


def _median(runs: list[dict[str, Any]]) -> dict[str, Any]:
  out = {}
  for key, value in runs[0].items():
    if isinstance(value, bool):
      out[key] = all(r[key] for r in runs)
    elif isinstance(value, (int, float)):
      out[key] = statistics.median(r[key] for r in runs)
    elif isinstance(value, list):
      out[key] = [statistics.median(r[key][i] for r in runs) for i in range(len(value))]
  return out


def _print_ceiling_budget(results: dict[str, dict[str, Any]], ceiling: float) -> None:
  """What a 0.6 share of the ceiling asks of this machine's cores: every
  65,536 tokens may then cost at most cores / (0.6 x ceiling) of CPU, the
  read (at the ceiling's own CPU cost) included."""
  cores = len(os.sched_getaffinity(0))
  budget_ms = 1e3 * cores * 65_536 / (0.6 * ceiling)
  read_ms = results["ceiling"]["cpu_ms_per_64k"]
  print(
    f"\n0.6 of the ceiling on {cores} cores allows {budget_ms:.2f} CPU-ms per 65,536 tokens,\n"
    f"reading included (the ceiling's reads cost {read_ms:.2f}). Used: the whole tree, and its\n"
    f"split into this process and its planner / reader processes; 'alone', where\n"
    f"this process reads: the most it allows with every other process free and\n"
    f"{cores} cores busy all the time:"
  )
  for kind, (_, arguments) in JAXDATA_KINDS.items():
    r = results[kind]
    used, own, others = r["cpu_ms_per_64k"], r["own_cpu_ms_per_64k"], r["others_cpu_ms_per_64k"]
    verdict = "within it " if used <= budget_ms else f"{used / budget_ms:.2f}x over"
    alone = "" if arguments.get("making", ("", 0))[1] else f"  alone <= {1e3 * cores * 65_536 / (own * ceiling):.2f}"
    print(f"  {kind:24s} {used:5.2f} ms ({own:4.2f} here + {others:4.2f})  {verdict}{alone}")


def _corpora(base: str, widths: list[str], compression: str, lengths: str = "project") -> dict[str, str]:
  """{width: corpus directory}, written (or reused) by make_corpus; `lengths`: which corpus (make_corpus.CORPORA)."""
  corpora = {}
  suffix = "" if lengths == "project" else f"-{lengths}"
  for width in widths:
    directory = corpus_dir(base + suffix, VOCABS[width], compression)
    make_corpus(directory, vocab_size=VOCABS[width], compression=compression, specs=CORPORA[lengths])
    corpora[width] = directory
  return corpora


def _measure_all(
  corpora: dict[str, str], kinds: list[str], repetitions: int, baseline: str | None = None
) -> dict[str, dict[str, Any]]:
  """{width: {kind: median result}}; every (width, kind) runs `repetitions`
  times, interleaved: drifts of the machine hit every kind and width alike."""
  runs: dict[str, dict[str, list[dict[str, Any]]]] = {w: {k: [] for k in kinds} for w in corpora}
  for repetition in range(repetitions):
    for width, corpus in corpora.items():
      for kind in kinds:
        runs[width][kind].append(measure(kind, corpus, baseline))
        print(f"  repetition {repetition + 1}: {width} {kind} done", file=sys.stderr)
  results = {w: {k: _median(r) for k, r in by_kind.items()} for w, by_kind in runs.items()}
  for width, by_kind in runs.items():  # the training-loop goal holds for every run, not just the median
    for kind in [k for k in TRAINING_KINDS if k in by_kind]:
      results[width][kind]["slowdown_runs"] = [r["slowdown"] for r in by_kind[kind]]
  return results


def _print_width(results: dict[str, dict[str, Any]], corpus: str) -> None:
  """One width's table: every kind, the ceiling, the ratios and the checks."""
  names = " / ".join(TOKEN_SHARES)
  print(f"\n== {corpus} ==")
  print(
    f"{'':24s} {'non-pad tok/s':>13s} {'efficiency':>10s} {'first batch':>11s} {'restore+first':>13s} "
    f"{'peak RSS (tree)':>15s} {'CPU ms/64Ki':>11s} {'cores':>5s}   realised token shares {names}"
  )
  pipelines = [k for k in [*JAXDATA_KINDS, *GRAIN_KINDS] if k in results]
  for kind in pipelines:
    r = results[kind]
    shares = " / ".join(f"{s:.3f}" for s in r["shares"])
    same = "" if r["restore_identical"] else "  (restored batch DIFFERS)"
    print(
      f"{kind:24s} {r['tokens_per_s'] / 1e6:11.2f} M {r['efficiency']:10.4f} {r['first_batch_s']:9.3f} s "
      f"{r['restore_s']:11.3f} s {r['peak_rss_mb']:12.0f} MB {r['cpu_ms_per_64k']:11.2f} {r['cores']:5.2f}   "
      f"{shares}{same}"
    )
  print(f"{'target shares':24s} {'':88s}   " + " / ".join(f"{s:.3f}" for s in TOKEN_SHARES.values()))
  for kind in [k for k in TRAINING_KINDS if k in results]:
    r = results[kind]
    each = ", ".join(f"{100 * x:+.1f}%" for x in r.get("slowdown_runs", [r["slowdown"]]))
    print(
      f"Python-bound training thread fed {FEED_TOKENS_PER_S / 1e6:.0f}M tokens/s, {kind.split('-', 2)[2]}: "
      f"{100 * r['slowdown']:+.1f}% slower (goal <= 5% in every run; runs: {each}); "
      f"{100 * r['in_next']:.1f}% of its time inside next()"
    )
  if "ceiling" not in results:
    return
  ceiling = results["ceiling"]["tokens_per_s"]
  r = results["ceiling"]
  print(f"{'raw read ceiling':24s} {ceiling / 1e6:11.2f} M {'':58s} {r['cpu_ms_per_64k']:11.2f} {r['cores']:5.2f}")
  if all(k in results for k in JAXDATA_KINDS):
    _print_ceiling_budget(results, ceiling)
  grains = [k for k in GRAIN_KINDS if k in results]
  if not grains:
    return
  best_grain_kind = max(grains, key=lambda k: results[k]["tokens_per_s"])
  best_grain = results[best_grain_kind]["tokens_per_s"]
  grain_rss = results[grains[0]]["peak_rss_mb"]
  print(f"\nbest Grain: {best_grain_kind} ({best_grain / 1e6:.2f} M tokens/s)")
  for kind in [k for k in JAXDATA_KINDS if k in results]:
    r = results[kind]
    print(
      f"{kind:24s} / best Grain {r['tokens_per_s'] / best_grain:5.2f}x (goal >= 5x with mesh output); "
      f"/ read ceiling {r['tokens_per_s'] / ceiling:4.2f}; first batch {r['first_batch_s']:.3f} s, "
      f"restore + first {r['restore_s']:.3f} s (goal <= 0.1 s); RSS - {grains[0]} {r['peak_rss_mb'] - grain_rss:+.0f} MB "
      f"(goal <= +100 MB)"
    )
  if all(f"jaxdata-mesh8-readers{n}" in results for n in (1, 2)):
    one, two = (results[f"jaxdata-mesh8-readers{n}"]["tokens_per_s"] for n in (1, 2))
    print(f"worker scaling (mesh output): 1 -> 2 workers: {one / 1e6:.2f} M -> {two / 1e6:.2f} M ({two / one:.2f}x)")


def _print_against_baseline(results: dict[str, dict[str, dict[str, Any]]], baseline: str) -> None:
  """Each jaxdata kind against the same kind from the baseline checkout: tokens/s and first batch."""
  print(f"\n== this checkout against {baseline} (ratio: this / baseline) ==")
  print(
    f"{'':30s} {'tok/s':>9s} {'baseline':>9s} {'ratio':>6s}   {'first':>7s} {'baseline':>8s} {'ratio':>6s}   "
    f"realised token shares (this | baseline) {' / '.join(TOKEN_SHARES)}"
  )
  for width, by_kind in results.items():
    for kind in [k for k in JAXDATA_KINDS if k in by_kind and k + BASELINE in by_kind]:
      now, then = by_kind[kind], by_kind[kind + BASELINE]
      print(
        f"{width + ' ' + kind:30s} {now['tokens_per_s'] / 1e6:8.2f}M {then['tokens_per_s'] / 1e6:8.2f}M "
        f"{now['tokens_per_s'] / then['tokens_per_s']:6.3f}   {now['first_batch_s']:6.3f}s {then['first_batch_s']:7.3f}s "
        f"{now['first_batch_s'] / then['first_batch_s']:6.3f}   "
        + " / ".join(f"{x:.3f}" for x in now["shares"])
        + " | "
        + " / ".join(f"{x:.3f}" for x in then["shares"])
      )


def _print_side_by_side(results: dict[str, dict[str, dict[str, Any]]]) -> None:
  """Each width's tokens/s, CPU-ms per 65,536 tokens and ratio to the best Grain."""
  widths = list(results)
  print("\n== side by side: tokens/s (CPU-ms per 65,536 tokens) [/ best Grain] ==")
  print(f"{'':24s}" + "".join(f"{w:>34s}" for w in widths))
  for kind in [k for k in [*JAXDATA_KINDS, *GRAIN_KINDS, "ceiling"] if k in results[widths[0]]]:
    cells = []
    for width in widths:
      r = results[width][kind]
      grains = [results[width][g]["tokens_per_s"] for g in GRAIN_KINDS if g in results[width]]
      ratio = f" [{r['tokens_per_s'] / max(grains):5.2f}x]" if grains else ""
      cells.append(f"{r['tokens_per_s'] / 1e6:7.2f} M ({r['cpu_ms_per_64k']:5.2f} ms){ratio}")
    print(f"{kind:24s}" + "".join(f"{c:>34s}" for c in cells))


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--corpus", default="/tmp/jaxdata-bench", help="the uint16 corpus; uint32 is <corpus>-u32")
  parser.add_argument("--widths", default="uint16,uint32", help="id widths to measure, comma-separated")
  parser.add_argument("--compression", default="zstd", choices=sorted(COMPRESSIONS), help="the corpora's records")
  parser.add_argument("--kinds", help="configurations to run, comma-separated (default: all)")
  parser.add_argument("--repetitions", type=int, default=3)
  parser.add_argument("--run", help="one configuration, in this process (used by the driver)")
  parser.add_argument("--baseline", help="another checkout: every jaxdata kind runs from it too, side by side")
  parser.add_argument("--json", help="also write every kind's medians here (per width)")
  parser.add_argument(
    "--lengths",
    default="project",
    choices=["project", "short", "both"],
    help="the corpus: the project's lengths, a second one (many short documents and a long-document set), or both",
  )
  args = parser.parse_args()
  if args.run:
    print(json.dumps(run_kind(args.run, args.corpus)))
    return
  every_kind = [*JAXDATA_KINDS, *GRAIN_KINDS, "ceiling", *TRAINING_KINDS]
  kinds = args.kinds.split(",") if args.kinds else every_kind
  unknown = sorted(set(kinds) - set(every_kind))
  if unknown:
    parser.error(f"--kinds: unknown {unknown}; choose from {every_kind}")
  lengths = ["project", "short"] if args.lengths == "both" else [args.lengths]
  corpora = {
    (width if name == "project" else f"{width}-{name}"): path
    for name in lengths
    for width, path in _corpora(args.corpus, args.widths.split(","), args.compression, name).items()
  }
  for directory in jaxdata_source_dirs():  # what a pip install leaves: the first batch compiles nothing
    compileall.compile_dir(directory, quiet=1)
  if args.baseline:  # the other checkout's too, so that both first batches count imports, not compiling
    compileall.compile_dir(os.path.join(args.baseline, "jaxdata"), quiet=1)
    compileall.compile_dir(os.path.join(args.baseline, "transforms"), quiet=1)
  if args.baseline:
    kinds = [k for kind in kinds for k in ([kind, kind + BASELINE] if kind in JAXDATA_KINDS else [kind])]
  results = _measure_all(corpora, kinds, args.repetitions, args.baseline)
  if args.json:
    with open(args.json, "w") as f:
      json.dump({"repetitions": args.repetitions, "cores": os.cpu_count(), "results": results}, f, default=str)
  print(
    f"medians of {args.repetitions} interleaved runs; {STEPS} steps measured after {WARMUP}; "
    f"restore after {RESTORE_AT} steps"
  )
  for width, corpus in corpora.items():
    _print_width(results[width], f"{width} ids: {corpus} ({args.compression})")
  _print_side_by_side(results)
  if args.baseline:
    _print_against_baseline(results, args.baseline)
  spread = host_spread(next(iter(corpora.values())))
  print(f"documents read per host per step, v5p-128 (16 hosts), 1024 x 4096: max / mean {spread:.2f} (goal <= 1.25)")


if __name__ == "__main__":
  main()
