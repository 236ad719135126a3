#!/usr/bin/env bash
# The accelerator check in one command (docs/performance.md, "On an accelerator"):
#
#   bash benchmarks/accelerator_check.sh [--wheels DIR] [--out DIR] [--sizes "accelerator step-8ms step-3ms"]
#                                        [--kinds KINDS | --kinds none] [--lengths both|project|short] [--steps N]
#
# 1. Installs, from the wheels in --wheels (no network), whatever is missing: grain, array-record,
#    google-crc32c, portpicker and jaxdata's own wheel (its C loops built for that Python).
# 2. Runs benchmarks/device_feed.py once per size: the accelerator size, and two sizes whose steps take a few
#    milliseconds feeding every feature a packed-attention model reads. A size that does not fit the device's
#    memory is refused in one line (and the check goes on).
# 3. Runs benchmarks/pipeline_throughput.py on the host's CPU cores: the mesh defaults (a planner process on
#    >= 4 cores, its spans read ahead) against NumPy output and Grain mp_prefetch, uint32, on the project's
#    corpus and on the second one of many short documents (--lengths), realised shares printed.
# 4. Prints one table (benchmarks/accelerator_summary.py) and writes OUT/accelerator_check.json.
# Sized to finish in under 5 minutes on a 16-core host with one accelerator.
set -euo pipefail
cd "$(dirname "$0")/.."
wheels="" out="${OUT:-/tmp/jaxdata-accelerator-check}" sizes="accelerator step-8ms step-3ms" steps=""
kinds="jaxdata,jaxdata-mesh8,jaxdata-mesh8-planner,grain-mp,ceiling" lengths="both"
while [ $# -gt 0 ]; do
  case "$1" in
    --wheels|--out|--sizes|--kinds|--steps|--lengths)
      if [ $# -lt 2 ] || [ -z "$2" ] || [ "${2#--}" != "$2" ]; then
        echo "accelerator_check.sh: $1 needs a value (see the header of this script)" >&2; exit 2
      fi ;;&
    --wheels) wheels="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --sizes) sizes="$2"; shift 2 ;;
    --kinds) kinds="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --lengths) lengths="$2"; shift 2 ;;
    *) echo "accelerator_check.sh: unknown argument $1 (see the header of this script)" >&2; exit 2 ;;
  esac
done
if [ -n "$wheels" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/jaxdata-site \
    "$wheels"/*.whl
  export PYTHONPATH="/tmp/jaxdata-site${PYTHONPATH:+:$PYTHONPATH}"
fi
missing=$(python3 - <<'PY'
import importlib.util
names = {"jaxdata": "jaxdata", "grain": "grain", "array_record": "array-record", "google_crc32c": "google-crc32c",
         "portpicker": "portpicker", "jax": "jax"}
print(" ".join(p for m, p in names.items() if importlib.util.find_spec(m) is None))
PY
)
if [ -n "$missing" ]; then
  echo "accelerator_check.sh: missing packages: $missing; give their wheels with --wheels DIR" >&2
  exit 2
fi
mkdir -p "$out"
rm -f "$out"/device_feed-*.json
for size in $sizes; do
  echo "device_feed --size $size" >&2
  if ! python3 -m benchmarks.device_feed --size "$size" ${steps:+--steps "$steps"} \
      >"$out/device_feed-$size.json" 2>"$out/device_feed-$size.log"; then
    tail -n 1 "$out/device_feed-$size.log" >"$out/device_feed-$size.json"  # the one-line refusal, or the error
  fi
done
rm -f "$out/pipeline_throughput.json"
if [ "$kinds" != "none" ]; then
  echo "pipeline_throughput --kinds $kinds" >&2
  python3 -m benchmarks.pipeline_throughput --widths uint32 --lengths "$lengths" --kinds "$kinds" --repetitions 1 \
    --json "$out/pipeline_throughput.json" >"$out/pipeline_throughput.log"
fi
python3 -m benchmarks.accelerator_summary "$out"
