"""Numbers people read at a glance: counts with a unit (40M tokens) and sizes in bytes (2.1 GB).

>>> human_count(40_000_000), human_count(1_234), human_count(950), human_bytes(2_254_857_830)
('40M', '1.2k', '950', '2.1 GB')
"""

from __future__ import annotations

__all__ = ["human_bytes", "human_count"]

_COUNT = ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k"))
_BYTES = ((1 << 40, "TB"), (1 << 30, "GB"), (1 << 20, "MB"), (1 << 10, "KB"))


def _scaled(value: float, units: tuple[tuple[float, str], ...], sep: str) -> str | None:
  for scale, unit in units:
    if abs(value) >= scale:
      shown = value / scale
      return f"{shown:.0f}{sep}{unit}" if shown >= 100 or shown == int(shown) else f"{shown:.1f}{sep}{unit}"
  return None


def human_count(value: float) -> str:
  """A count with k / M / B / T (powers of 1,000)."""
  return _scaled(value, _COUNT, "") or f"{value:g}"


def human_bytes(value: float) -> str:
  """A size in KB / MB / GB / TB (powers of 1,024)."""
  return _scaled(value, _BYTES, " ") or f"{value:.0f} B"
