"""The input formats and text modes `jaxdata convert` understands.

Kept apart from `inputs` (which loads pyarrow) so the CLI can build its
parser without importing any reader.
"""

from __future__ import annotations

__all__ = ["INPUT_FORMATS", "TEXT_MODES"]

INPUT_FORMATS = ("jsonl", "parquet", "text")
TEXT_MODES = ("file", "line", "paragraph")
