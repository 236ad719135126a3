"""The C loops under GCC's sanitizers: a manual check, like hostile_cases.py.

    python tests/support/sanitizer_check.py

Builds jaxdata's two extensions again with -fsanitize=undefined (any
undefined behaviour aborts) and then with -fsanitize=address, loads those
builds in place of the installed ones, and runs the tests that drive them:
the random equivalence tests against the Python / NumPy loops, their
errors, and whole pipelines. Prints one line per run; exits 1 if any fails.

Left out under AddressSanitizer: the corrupted-shard test, where
ArrayRecord throws a C++ exception, which the preloaded ASan runtime cannot
intercept in an interpreter built without it (an ASan CHECK failure in
`__cxa_throw`, not a finding in jaxdata's code).
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXTENSIONS = {  # module -> (source, tests that drive it)
  "jaxdata.mixture._exact_pick": (
    "jaxdata/mixture/_exact_pick.c",
    ["tests/test_exact_pick.py", "tests/test_stream.py"],
  ),
  "jaxdata.transforms._native": (
    "transforms/_native.c",
    ["tests/test_kernels.py", "tests/test_assemble.py", "tests/test_packing.py"],
  ),
}
# Tests that start a fresh interpreter (they would load the installed build).
DESELECT = "not without_the_extension and not jaxdata_native_0 and not invalid_jaxdata"
SANITIZERS = {
  "undefined": ["-fsanitize=undefined", "-fno-sanitize-recover=all"],
  "address": ["-fsanitize=address", "-fno-omit-frame-pointer"],
}
RUNTIMES = {"undefined": "libubsan.so", "address": "libasan.so"}

RUNNER = """
import importlib.util, sys
module, path = sys.argv[1], sys.argv[2]
spec = importlib.util.spec_from_file_location(module, path)
built = importlib.util.module_from_spec(spec)
spec.loader.exec_module(built)
sys.modules[module] = built
import jaxdata.mixture.pick_loops, jaxdata.transforms.kernels
assert built in (jaxdata.mixture.pick_loops._exact_pick, jaxdata.transforms.kernels._native), "not the sanitized build"
import pytest
sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", "-k", sys.argv[3], *sys.argv[4:]]))
"""


def build(source: str, flags: list[str], out: str) -> None:
  include = sysconfig.get_paths()["include"]
  subprocess.run(
    ["gcc", "-O1", "-g", "-fPIC", "-shared", *flags, f"-I{include}", os.path.join(REPO, source), "-o", out], check=True
  )


def runtime(sanitizer: str) -> str:
  return subprocess.run(
    ["gcc", f"-print-file-name={RUNTIMES[sanitizer]}"], check=True, capture_output=True, text=True
  ).stdout.strip()


def main() -> int:
  failed = 0
  with tempfile.TemporaryDirectory() as tmp:
    for sanitizer, flags in SANITIZERS.items():
      for module, (source, tests) in EXTENSIONS.items():
        built = os.path.join(tmp, f"{sanitizer}-{module.rsplit('.', 1)[1]}.so")
        build(source, flags, built)
        deselect = DESELECT + (" and not corrupted" if sanitizer == "address" else "")
        env = {**os.environ, "LD_PRELOAD": runtime(sanitizer), "ASAN_OPTIONS": "detect_leaks=0", "JAXDATA_NATIVE": "1"}
        done = subprocess.run(
          [sys.executable, "-c", RUNNER, module, built, deselect, *tests],
          cwd=REPO,
          env=env,
          capture_output=True,
          text=True,
        )
        summary = (done.stdout.strip().splitlines() or ["(no output)"])[-1]
        print(f"{sanitizer:9s} {module:28s} rc {done.returncode}: {summary}")
        if done.returncode:
          failed += 1
          print(done.stdout[-3000:], done.stderr[-3000:], sep="\n")
  return 1 if failed else 0


if __name__ == "__main__":
  sys.exit(main())
