"""`JAXDATA_NATIVE`: whether jaxdata's C loops run where they were built (see `jaxdata._native_switch`).

>>> native_wanted({"JAXDATA_NATIVE": "1"})
True
"""

from __future__ import annotations

from jaxdata._native_switch import native_wanted

__all__ = ["native_wanted"]
