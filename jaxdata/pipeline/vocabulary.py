"""Token-id safety: one vocabulary per mixture, special ids inside it, ids that fit int32.

Checked when a `Pipeline` opens its datasets (from manifests only)::

    every dataset's tokenizer identity equal     else ConfigError (unless allow_mixed_tokenizers)
    bos_id / eos_id (when added), pad_id < V     else ConfigError naming the key
    V = the datasets' vocab_size (the largest, when mixing on purpose); unknown: the dtype's range

and on every read (`TokenBound.check`, one vectorised max per dataset): an
id >= V, or one that int32 batches cannot hold (>= 2^31), is a DatasetError
naming the shard and record, never a silently wrapped or foreign token.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from jaxdata.config.pipeline_config import PipelineConfig
from jaxdata.errors import ConfigError, DatasetError
from jaxdata.sources.opening import SplitDataset

__all__ = ["TokenBound", "token_bound"]

INT32_LIMIT = 1 << 31  # batches are int32: ids must stay below this


def _identity(tokenizer: Mapping[str, Any]) -> dict[str, Any]:
  """What makes two tokenizers the same: everything but the file's name."""
  return {k: v for k, v in tokenizer.items() if k != "file"}


@dataclasses.dataclass(frozen=True)
class TokenBound:
  """Ids must lie below `limit`; `source` says where the limit comes from."""

  limit: int
  source: str

  def check(self, dataset: SplitDataset, records: np.ndarray, tokens: np.ndarray, offsets: np.ndarray) -> None:
    """Raises DatasetError if a token of the read documents is >= limit."""
    if not tokens.size or int(tokens.max()) < self.limit:
      return
    first = int(np.flatnonzero(tokens >= self.limit)[0])
    document = int(np.searchsorted(offsets, first, side="right")) - 1
    shards, in_shard = dataset.locate(records[document : document + 1])
    raise DatasetError(
      f"{dataset.shard_path(int(shards[0]))}: record {int(in_shard[0])} holds token id {int(tokens[first])}, "
      f"not below {self.limit} ({self.source})"
    )


def _unknown_hint(cfg: PipelineConfig, datasets: Sequence[SplitDataset]) -> str:
  """How to record the tokenizer of a dataset indexed without one (the usual cause of a mismatch)."""
  unknown = [d.name for d, ds in zip(cfg.datasets, datasets) if ds.manifest.tokenizer.get("kind") in (None, "unknown")]
  if not unknown:
    return ""
  return (
    f"; {', '.join(unknown)} was indexed with no tokenizer record: if its ids come from the same tokenizer, "
    "index it again with `jaxdata index ... --force --tokenizer SPEC` (or `jaxdata from-megatron --tokenizer "
    "SPEC`), SPEC as given to `jaxdata convert`"
  )


def token_bound(cfg: PipelineConfig, datasets: Sequence[SplitDataset]) -> TokenBound:
  """Checks the datasets' tokenizers and the config's special ids; the bound every read is held to."""
  identities = [_identity(ds.manifest.tokenizer) for ds in datasets]
  if not cfg.allow_mixed_tokenizers:
    for d, identity in zip(cfg.datasets[1:], identities[1:]):
      if identity != identities[0]:
        raise ConfigError(
          f"datasets.{d.name}: tokenizer {identity} differs from datasets.{cfg.datasets[0].name}'s "
          f"{identities[0]}; token ids would mean different things{_unknown_hint(cfg, datasets)} (set "
          "allow_mixed_tokenizers: true to mix them on purpose)"
        )
  given = [ds.manifest.tokenizer.get("vocab_size") for ds in datasets]
  sizes = [v for v in given if isinstance(v, int) and not isinstance(v, bool) and v > 0]
  if len(sizes) == len(given):
    vocab, source = max(sizes), f"the vocab_size {max(sizes)} in the datasets' manifest.json"
    packing = cfg.packing
    used = [("pad_id", packing.pad_id)]
    used += [("bos_id", packing.bos_id)] if packing.add_bos else []
    used += [("eos_id", packing.eos_id)] if packing.add_eos else []
    for key, value in used:
      if value >= vocab:
        raise ConfigError(f"packing.{key}: {value} is not below the datasets' vocabulary size {vocab}")
    if vocab <= INT32_LIMIT:
      return TokenBound(vocab, source)
  return TokenBound(INT32_LIMIT, "int32 batches cannot hold larger ids")
