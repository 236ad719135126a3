"""jaxdata against Megatron-Core, OLMo-core and Mosaic Streaming on the same files, in one run.

    python -m benchmarks.peers.run [--data /tmp/jaxdata-peers] [--repetitions 3]

Setup (once; the peers need torch, each in a venv of its own: see benchmarks/peers/README.md):

    python -m venv benchmarks/peers/.venv-megatron-olmo
    benchmarks/peers/.venv-megatron-olmo/bin/pip install -r benchmarks/peers/requirements-megatron-olmo.txt
    python -m venv benchmarks/peers/.venv-streaming
    benchmarks/peers/.venv-streaming/bin/pip install -r benchmarks/peers/requirements-streaming.txt

Workload: a 50M-token corpus of four sources at token shares .62/.18/.12/.08, 4-byte ids
(vocab 128,256), written by Megatron-Core's IndexedDatasetBuilder (`make_megatron.py`);
2,048-token samples, batch 32, shuffled. Each side reads the same tokens:

  megatron           GPTDataset + BlendedDataset over the .bin/.idx files (DataLoader workers 0 / 2;
                     attention mask off, and on: its default)
  olmo               NumpyFSLDataset over the .bin files (flat 4-byte tokens), its data loader
  streaming          MDS shards of 2,048-token samples written by Streaming's MDSWriter
                     (`write_mds.py`), local and from the S3 emulator (moto on 127.0.0.1); workers 0 / 2
  jaxdata-windows    the Megatron files indexed in place (`jaxdata index`), window sampling
  jaxdata-documents  the same, documents packed first_fit
  ...-mesh8          the same with an 8-device CPU mesh: the batch becomes sharded jax.Arrays

Every side runs in a fresh process; the runs are interleaved, medians printed. Per side: realised
token shares, imports, startup (process start to the first batch), peak PSS of the process tree
(sampled every 50 ms: shared pages counted once), tokens/s, and the ratios to jaxdata.
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


def prepare(data: str, megatron_python: str, streaming_python: str) -> None:
  """The corpus (Megatron's writer), its jaxdata index and its MDS copy (Streaming's writer)."""
  subprocess.run([megatron_python, os.path.join(HERE, "make_megatron.py"), "--out", data], check=True)
  for source in SOURCES:
    out = os.path.join(data, "jaxdata", source)
    if not os.path.exists(os.path.join(out, "manifest.json")):
      prefix = os.path.join(data, "megatron", source)
      subprocess.run(["jaxdata", "index", "-q", "--format", "megatron", prefix, "--out", out], check=True)
  subprocess.run([streaming_python, os.path.join(HERE, "write_mds.py"), "--out", data], check=True)


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--data", default="/tmp/jaxdata-peers")
  parser.add_argument("--repetitions", type=int, default=3)
  parser.add_argument("--megatron-python", default=os.path.join(HERE, ".venv-megatron-olmo", "bin", "python"))
  parser.add_argument("--streaming-python", default=os.path.join(HERE, ".venv-streaming", "bin", "python"))
  parser.add_argument("--sides", help="comma-separated labels to run (default: all)")
  args = parser.parse_args()
  prepare(args.data, args.megatron_python, args.streaming_python)
  sys.path.insert(0, os.path.join(ROOT, "tests"))
  import object_store  # noqa: PLC0415 -- the tests' local object stores (moto)

  servers = object_store.servers()
  stores = next(servers)
  s3 = stores["s3"]
  remote = "s3://jaxdata-peers/mds"
  for source in SOURCES:
    s3.upload(os.path.join(args.data, "mds", source), "jaxdata-peers", f"mds/{source}")
  s3_env = {"S3_ENDPOINT_URL": s3.endpoint, **s3.environment()}
  here = sys.executable
  # label: (python, side, workers, env, remote)
  runs: dict[str, tuple[str, str, int, dict[str, str], str | None]] = {
    "jaxdata-windows": (here, "jaxdata-windows", 0, {}, None),
    "jaxdata-documents": (here, "jaxdata-documents", 0, {}, None),
    "jaxdata-windows-mesh8": (here, "jaxdata-windows-mesh8", 0, {}, None),
    "jaxdata-documents-mesh8": (here, "jaxdata-documents-mesh8", 0, {}, None),
    "megatron w0": (args.megatron_python, "megatron", 0, {}, None),
    "megatron w2": (args.megatron_python, "megatron", 2, {}, None),
    "megatron w0 mask": (args.megatron_python, "megatron-mask", 0, {}, None),
    "olmo w0": (args.megatron_python, "olmo", 0, {}, None),
    "olmo w2": (args.megatron_python, "olmo", 2, {}, None),
    "streaming w0": (args.streaming_python, "streaming", 0, {}, None),
    "streaming w2": (args.streaming_python, "streaming", 2, {}, None),
    "streaming s3 w0": (args.streaming_python, "streaming", 0, s3_env, remote),
    "streaming s3 w2": (args.streaming_python, "streaming", 2, s3_env, remote),
  }
  if args.sides:
    runs = {label: runs[label] for label in args.sides.split(",")}
  results: dict[str, list[dict[str, Any]]] = {label: [] for label in runs}
  try:
    for repetition in range(args.repetitions):  # interleaved: drifts of the machine hit every side alike
      for label, (python, side, workers, env, url) in runs.items():
        results[label].append(measure(python, side, args.data, workers, env, url))
        print(f"  repetition {repetition + 1}: {label} done", file=sys.stderr)
  finally:
    servers.close()
  medians = {
    label: {
      key: statistics.median(r[key] for r in rs) for key in ("tokens_per_s", "startup_s", "imports_s", "peak_pss_mb")
    }
    | {"shares": [statistics.median(r["shares"][i] for r in rs) for i in range(4)], "sample": rs[0]["sample"]}
    | ({"index_build_s": statistics.median(r["index_build_s"] for r in rs)} if "index_build_s" in rs[0] else {})
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
    print(
      f"{label:24s} NumPy {host / m['tokens_per_s']:5.2f}x   mesh {mesh / m['tokens_per_s']:5.2f}x   "
      f"startup {startup:.2f} s (mesh {mesh_startup:.2f} s) vs {m['startup_s']:.2f} s   "
      f"peak PSS {pss:.0f} MB (mesh {mesh_pss:.0f} MB) vs {m['peak_pss_mb']:.0f} MB"
    )


if __name__ == "__main__":
  main()
