"""`JAXDATA_NATIVE`: whether jaxdata's C loops run where they were built.

"1" (the default) runs them; "0" runs their Python / NumPy versions, which
give the same outputs (to compare, or to debug). Read once, at import, by
each module with a C loop (`jaxdata.transforms.kernels`,
`jaxdata.mixture.pick_loops`, `jaxdata.sources.masked`). A private module of
its own so that every stage may read it.

>>> native_wanted({"JAXDATA_NATIVE": "0"})
False
"""

from __future__ import annotations

import os
from collections.abc import Mapping

__all__ = ["native_wanted"]


def native_wanted(environ: Mapping[str, str] = os.environ) -> bool:
  """`JAXDATA_NATIVE` as a bool; a value other than 0 or 1 is a named error."""
  value = environ.get("JAXDATA_NATIVE", "1")
  if value not in ("0", "1"):
    raise ValueError(f"JAXDATA_NATIVE: {value!r} is not 0 (Python / NumPy loops) or 1 (C loops where built)")
  return value == "1"
