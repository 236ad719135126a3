"""`summarize`: the numbers `jaxdata inspect` prints for one dataset."""

from __future__ import annotations

from typing import Any

import numpy as np

from jaxdata.sources.opening import Dataset

__all__ = ["summarize"]

LENGTH_PERCENTILES = (50, 90, 99)


def summarize(dataset: Dataset) -> dict[str, Any]:
  """Counts, length percentiles, dtype, tokenizer and skip counts, JSON-able."""
  lengths = dataset.lengths
  stats = dataset.manifest.stats
  percentiles = np.percentile(lengths, LENGTH_PERCENTILES).tolist() if lengths.size else [0.0] * len(LENGTH_PERCENTILES)
  return {
    "name": dataset.name,
    "path": dataset.path,
    "shards": dataset.num_shards,
    "documents": dataset.num_records,
    "tokens": dataset.num_tokens,
    "mean_length": float(lengths.mean()) if lengths.size else 0.0,
    "length_percentiles": dict(zip((f"p{p}" for p in LENGTH_PERCENTILES), percentiles)),
    "max_length": int(lengths.max()) if lengths.size else 0,
    "dtype": dataset.dtype.name,
    "format": dataset.manifest.format,
    "tokenizer": dataset.manifest.tokenizer,
    "fingerprint": dataset.manifest.fingerprint,
    "skipped_empty": stats.get("skipped_empty", 0),
    "skipped_invalid": stats.get("skipped_invalid", 0),
    # fine-tuning examples (masked datasets): how many, the tokens their masks train, the refused ones
    **(
      {
        "examples": stats.get("examples", dataset.num_records),
        "trained_tokens": stats.get("trained_tokens"),
        "refused_examples": stats.get("refused_examples", stats.get("skipped_invalid", 0)),
      }
      if dataset.manifest.has_mask
      else {}
    ),
    # preference pairs: pairs, one-sided (KTO) examples, each side's trained tokens
    **(
      {
        **{key: stats.get(key) for key in ("trained_tokens_chosen", "trained_tokens_rejected")},
        **_sides(dataset),
      }
      if dataset.manifest.holds_pairs
      else {}
    ),
  }


def _sides(dataset: Dataset) -> dict[str, int]:
  """Records with both sides (pairs) and with one (KTO examples), from the columns: a set written by
  hand (`DatasetWriter(pairs=True)`) records no counts, and a record with one side is a KTO example."""
  columns = getattr(dataset, "columns", {})  # (a pair set is a TokenDataset: it has them)
  chosen = np.asarray(columns["chosen_length"], np.int64)
  both = int(((chosen > 0) & (chosen < dataset.lengths)).sum())
  return {"pairs": both, "unpaired_examples": int(chosen.size) - both}
