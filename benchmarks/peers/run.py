"""jaxdata against Megatron-Core, OLMo-core, Mosaic Streaming and Levanter on the same files, in one run.

    python -m benchmarks.peers.run [--data /tmp/jaxdata-peers] [--repetitions 3] [--sides LABEL,...]

Setup (once; each peer in a venv of its own: see benchmarks/peers/README.md):

    python -m venv benchmarks/peers/.venv-megatron-olmo
    benchmarks/peers/.venv-megatron-olmo/bin/pip install -r benchmarks/peers/requirements-megatron-olmo.txt
    python -m venv benchmarks/peers/.venv-streaming
    benchmarks/peers/.venv-streaming/bin/pip install -r benchmarks/peers/requirements-streaming.txt
    python -m venv benchmarks/peers/.venv-levanter
    benchmarks/peers/.venv-levanter/bin/pip install -r benchmarks/peers/requirements-levanter.txt

Workload: a 50M-token corpus of four sources at token shares .62/.18/.12/.08, 4-byte ids
(vocab 128,256), written by Megatron-Core's IndexedDatasetBuilder (`make_megatron.py`);
2,048-token samples, batch 32, shuffled. Each side reads the same tokens:

  megatron           GPTDataset + BlendedDataset over the .bin/.idx files (DataLoader workers 0 / 2;
                     attention mask off, and on: its default)
  olmo               NumpyFSLDataset over the .bin files (flat 4-byte tokens), its data loader
  streaming          MDS shards of 2,048-token samples written by Streaming's MDSWriter
                     (`write_mds.py`), local and from the S3 emulator (moto on 127.0.0.1); workers 0 / 2
  levanter           token caches built by Levanter's build_or_load_cache (`make_levanter.py`), its causal-LM
                     datasets, mixture and DataLoader as its trainer sets them up, on an 8-device CPU mesh
                     (its default block shuffle, a full permutation, prefetch 32 / 8)
  jaxdata-windows    the Megatron files indexed in place (`jaxdata index`), window sampling
  jaxdata-documents  the same, documents packed first_fit
  ...-mesh8          the same with an 8-device CPU mesh: the batch becomes sharded jax.Arrays

Every side runs in a fresh process; the runs are interleaved, medians printed. Per side: realised
token shares, imports, startup (process start to the first batch), peak PSS of the process tree
(sampled every 50 ms: shared pages counted once), tokens/s, and the ratios to jaxdata. Only what the
selected sides read is prepared (no MDS copy and no S3 emulator without a streaming side).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

from benchmarks import TEST_SUPPORT
from benchmarks.pipeline_throughput import tree_pids

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SIDES = os.path.join(HERE, "sides.py")
SHARES = (0.62, 0.18, 0.12, 0.08)
SOURCES = ("web", "code", "books", "curated")


def _tree_pss_mb(pid: int) -> float:
  """Proportional set size of a process and its descendants (shared pages split among them)."""
  total = 0.0
  for current in tree_pids(pid):
    try:
      with open(f"/proc/{current}/smaps_rollup") as f:
        total += next((int(line.split()[1]) for line in f if line.startswith("Pss:")), 0) / 1024
    except OSError:
      continue
  return total


def measure(python: str, side: str, data: str, workers: int, env: dict[str, str], remote: str | None) -> dict[str, Any]:
  command = [python, SIDES, side, "--data", data, "--workers", str(workers)]
  if remote:
    command += ["--remote", remote]
  process = subprocess.Popen(
    command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, **env}
  )
  peak = 0.0
  while process.poll() is None:
    peak = max(peak, _tree_pss_mb(process.pid))
    time.sleep(0.05)
  out, err = process.communicate()
  if process.returncode:
    raise RuntimeError(f"{side} (workers {workers}) failed:\n{err[-3000:]}")
  return {**json.loads(out.strip().splitlines()[-1]), "peak_pss_mb": peak}


def prepare(data: str, sides: set[str], megatron_python: str, streaming_python: str, levanter_python: str) -> None:
  """The corpus (Megatron's writer), and what the selected sides read of it: its jaxdata index, its
  MDS copy (Streaming's writer), its Levanter caches (Levanter's builder), each only if missing."""
  subprocess.run([megatron_python, os.path.join(HERE, "make_megatron.py"), "--out", data], check=True)
  if any(side.startswith("jaxdata") for side in sides):
    for source in SOURCES:
      out = os.path.join(data, "jaxdata", source)
      if not os.path.exists(os.path.join(out, "manifest.json")):
        prefix = os.path.join(data, "megatron", source)
        subprocess.run(["jaxdata", "index", "-q", "--format", "megatron", prefix, "--out", out], check=True)
  if "streaming" in sides:
    subprocess.run([streaming_python, os.path.join(HERE, "write_mds.py"), "--out", data], check=True)
  ledgers = [os.path.join(data, "levanter", source, "shard_ledger.json") for source in SOURCES]
  if any(side.startswith("levanter") for side in sides) and not all(map(os.path.exists, ledgers)):
    subprocess.run([levanter_python, os.path.join(HERE, "make_levanter.py"), "--out", data], check=True)


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--data", default="/tmp/jaxdata-peers")
  parser.add_argument("--repetitions", type=int, default=3)
  parser.add_argument("--megatron-python", default=os.path.join(HERE, ".venv-megatron-olmo", "bin", "python"))
  parser.add_argument("--streaming-python", default=os.path.join(HERE, ".venv-streaming", "bin", "python"))
  parser.add_argument("--levanter-python", default=os.path.join(HERE, ".venv-levanter", "bin", "python"))
  parser.add_argument("--sides", help="comma-separated labels to run (default: all)")
  args = parser.parse_args()
  here = sys.executable
  # label: (python, side, workers, from the S3 emulator)
  runs: dict[str, tuple[str, str, int, bool]] = {
    "jaxdata-windows": (here, "jaxdata-windows", 0, False),
    "jaxdata-documents": (here, "jaxdata-documents", 0, False),
    "jaxdata-windows-mesh8": (here, "jaxdata-windows-mesh8", 0, False),
    "jaxdata-documents-mesh8": (here, "jaxdata-documents-mesh8", 0, False),
    "megatron w0": (args.megatron_python, "megatron", 0, False),
    "megatron w2": (args.megatron_python, "megatron", 2, False),
    "megatron w0 mask": (args.megatron_python, "megatron-mask", 0, False),
    "olmo w0": (args.megatron_python, "olmo", 0, False),
    "olmo w2": (args.megatron_python, "olmo", 2, False),
    "streaming w0": (args.streaming_python, "streaming", 0, False),
    "streaming w2": (args.streaming_python, "streaming", 2, False),
    "streaming s3 w0": (args.streaming_python, "streaming", 0, True),
    "streaming s3 w2": (args.streaming_python, "streaming", 2, True),
    "levanter mesh8": (args.levanter_python, "levanter", 0, False),
    "levanter perm mesh8": (args.levanter_python, "levanter-perm", 0, False),
    "levanter prefetch8 mesh8": (args.levanter_python, "levanter-prefetch8", 0, False),
  }
  if args.sides:
    unknown = [label for label in args.sides.split(",") if label not in runs]
    if unknown:
      sys.exit(f"--sides: {', '.join(unknown)} not among {', '.join(runs)}")
    runs = {label: runs[label] for label in args.sides.split(",")}
  missing = sorted({python for python, *_ in runs.values() if not os.path.isfile(python)})
  if missing:  # a peer's venv is not set up: say which command makes it, in one line
    venv = os.path.dirname(os.path.dirname(missing[0]))
    requirements = {
      ".venv-megatron-olmo": "megatron-olmo",
      ".venv-streaming": "streaming",
      ".venv-levanter": "levanter",
    }
    name = requirements.get(os.path.basename(venv), "")
    sys.exit(
      f"{missing[0]} does not exist: set up that peer first (benchmarks/peers/README.md): python -m venv {venv} && "
      f"{venv}/bin/pip install -r benchmarks/peers/requirements-{name}.txt (or run --sides with jaxdata's only)"
    )
  prepare(
    args.data,
    {side for _, side, _, _ in runs.values()},
    args.megatron_python,
    args.streaming_python,
    args.levanter_python,
  )
  servers, s3_env, remote = None, {}, "s3://jaxdata-peers/mds"
  if any(s3 for *_, s3 in runs.values()):
    sys.path.insert(0, TEST_SUPPORT)
    import object_store  # noqa: PLC0415 -- the tests' local object stores (moto)

    servers = object_store.servers()
    s3 = next(servers)["s3"]
    for source in SOURCES:
      s3.upload(os.path.join(args.data, "mds", source), "jaxdata-peers", f"mds/{source}")
    s3_env = {"S3_ENDPOINT_URL": s3.endpoint, **s3.environment()}
  results: dict[str, list[dict[str, Any]]] = {label: [] for label in runs}
  try:
    for repetition in range(args.repetitions):  # interleaved: drifts of the machine hit every side alike
      for label, (python, side, workers, from_s3) in runs.items():
        env, url = (s3_env, remote) if from_s3 else ({}, None)
        results[label].append(measure(python, side, args.data, workers, env, url))
        print(f"  repetition {repetition + 1}: {label} done", file=sys.stderr)
  finally:
    if servers is not None:
      servers.close()
  medians = {
    label: {
      key: statistics.median(r[key] for r in rs) for key in ("tokens_per_s", "startup_s", "imports_s", "peak_pss_mb")
    }
    | {"shares": [statistics.median(r["shares"][i] for r in rs) for i in range(4)], "sample": rs[0]["sample"]}
    | ({"index_build_s": statistics.median(r["index_build_s"] for r in rs)} if "index_build_s" in rs[0] else {})
    | ({"block_rows": rs[0]["block_rows"]} if "block_rows" in rs[0] else {})
    for label, rs in results.items()
  }
  print(f"medians of {args.repetitions} interleaved runs; 300 batches of 32 x 2,048 after 20; target shares {SHARES}")
  print(
    f"{'side':24s} {'tokens/s':>10s} {'startup':>8s} {'imports':>8s} {'peak PSS':>9s}   "
    f"shares {' / '.join(SOURCES)}   what a sample is"
  )
  for label, m in medians.items():
    shares = " / ".join(f"{s:.3f}" for s in m["shares"])
    build = f" (index build {m['index_build_s']:.2f} s)" if "index_build_s" in m else ""
    print(
      f"{label:24s} {m['tokens_per_s'] / 1e6:8.2f} M {m['startup_s']:6.2f} s {m['imports_s']:6.2f} s "
      f"{m['peak_pss_mb']:6.0f} MB   {shares}   {m['sample']}{build}"
    )
  blocks = next((m["block_rows"] for k, m in medians.items() if "block_rows" in m), None)
  if blocks:  # its MixtureDataset rounds the weights to whole rows of each 2,048-row block
    rows = " / ".join(f"{n} ({n / sum(blocks):.4f})" for n in blocks)
    print(f"levanter's mixture: rows per block of {sum(blocks):,} for {' / '.join(SOURCES)}: {rows}")
  ours = {k: v for k, v in medians.items() if k.startswith("jaxdata")}
  peers = {k: v for k, v in medians.items() if not k.startswith("jaxdata")}
  if not ours or not peers:
    return
  host = max((v["tokens_per_s"] for k, v in ours.items() if "mesh" not in k), default=0.0)
  mesh = max((v["tokens_per_s"] for k, v in ours.items() if "mesh" in k), default=0.0)

  def most(key: str, on_mesh: bool) -> float:  # our worst figure of one output kind (nan: none run)
    return max((v[key] for k, v in ours.items() if ("mesh" in k) == on_mesh), default=float("nan"))

  startup, mesh_startup = most("startup_s", False), most("startup_s", True)
  pss, mesh_pss = most("peak_pss_mb", False), most("peak_pss_mb", True)
  print(
    "\nagainst each peer, our best NumPy / mesh rate, our slowest startup and largest PSS (goals: >= 1.5x "
    "with NumPy output, > 1x with mesh output, faster startup, PSS within):"
  )
  for label, m in peers.items():
    numpy = f"{host / m['tokens_per_s']:5.2f}x" if host else "  n/a "  # n/a: no NumPy side of ours was run
    print(
      f"{label:24s} NumPy {numpy}   mesh {mesh / m['tokens_per_s']:5.2f}x   "
      f"startup {startup:.2f} s (mesh {mesh_startup:.2f} s) vs {m['startup_s']:.2f} s   "
      f"peak PSS {pss:.0f} MB (mesh {mesh_pss:.0f} MB) vs {m['peak_pss_mb']:.0f} MB"
    )
  levanter = {k: v for k, v in peers.items() if k.startswith("levanter")}
  if levanter:  # a JAX-native peer with mesh output: its best configuration against our best mesh rate
    best = max(levanter, key=lambda k: levanter[k]["tokens_per_s"])
    print(
      f"\nagainst levanter's best configuration ({best}), our best mesh rate: "
      f"{mesh / levanter[best]['tokens_per_s']:5.2f}x (goal: >= 5x with mesh output)"
    )


if __name__ == "__main__":
  main()
