"""`jaxdata doctor`'s files: the loss log it reads (`load_losses`) and the HTML page it writes (`write_html`)."""

from __future__ import annotations

import html
from collections.abc import Sequence

from jaxdata.errors import InputFormatError
from jaxdata.tools.doctor import Check
from jaxdata.tools.report import jsonl_records

__all__ = ["load_losses", "write_html"]


def load_losses(path: str) -> dict[int, dict[str, float]]:
  """A loss log: {step: {source: loss}}; errors name the file and line."""
  out: dict[int, dict[str, float]] = {}
  for number, record in jsonl_records(path, "loss record"):
    try:
      out[int(record["step"])] = {str(k): float(v) for k, v in record["losses"].items()}
    except (KeyError, TypeError, ValueError, AttributeError) as e:
      raise InputFormatError(
        f'{path}:{number}: expected {{"step": int, "losses": {{source: number}}}} ({type(e).__name__}: {str(e)[:100]})'
      ) from e
  return out


def write_html(checks: Sequence[Check], path: str) -> str:
  rows = "".join(
    f"<tr class={c.status}><td>{c.status}</td><td>{html.escape(c.name)}</td><td>{html.escape(c.figure)}"
    f"</td><td>{html.escape(c.meaning)}</td><td>{html.escape(c.advice)}</td></tr>"
    for c in checks
  )
  page = (
    "<html><head><meta charset=utf-8><title>jaxdata doctor</title><style>td{padding:4px 8px}"
    ".fail{background:#fdd}.warn{background:#ffd}.ok{background:#dfd}</style></head><body><h1>jaxdata doctor"
    f"</h1><table><tr><th>status</th><th>check</th><th>figure</th><th>meaning</th><th>what to change</th></tr>"
    f"{rows}</table></body></html>"
  )
  with open(path, "w", encoding="utf-8") as f:
    f.write(page)
  return path
