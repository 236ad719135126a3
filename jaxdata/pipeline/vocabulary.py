"""Token-id safety: one vocabulary per mixture, special ids inside it, ids that fit int32.

Checked when a `Pipeline` opens its datasets (from manifests only)::

    every dataset's tokenizer identity equal     else ConfigError (unless allow_mixed_tokenizers)
    bos_id / eos_id / pad_id: the config's, or the tokenizer's the manifests record (`with_special_ids`);
      one the config gives that differs from the recorded one, or none at all for a token packing adds:
      ConfigError naming both (no id is assumed to be 0)
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

__all__ = ["TokenBound", "resolve_special_ids", "token_bound", "with_special_ids"]

SPECIAL_IDS = ("bos_id", "eos_id", "pad_id", "unk_id", "end_of_turn_id")  # what conversion records

INT32_LIMIT = 1 << 31  # batches are int32: ids must stay below this


def same_tokenizer(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
  """Whether two recorded tokenizers are one: everything but the file's name and the special ids
  recorded beside it (a set converted before they were recorded has the same vocabulary;
  `with_special_ids` checks the ids that are used). Where both record `content_sha256` (the
  tokenizer's content, however it was given) it decides in place of the file's `sha256`."""
  left_out = {"file", "sha256"} if "content_sha256" in a and "content_sha256" in b else {"file", "content_sha256"}
  return _identity(a, left_out) == _identity(b, left_out)


def _identity(tokenizer: Mapping[str, Any], left_out: set[str]) -> dict[str, Any]:
  return {
    k: v
    for k, v in tokenizer.items()
    if k not in left_out and (k not in SPECIAL_IDS or tokenizer.get("kind") == "byte")
  }


def with_special_ids(cfg: PipelineConfig, datasets: Sequence[SplitDataset]) -> PipelineConfig:
  """`resolve_special_ids` with the opened datasets' manifests, once they are known to share a tokenizer
  (different tokenizers are the cause to name, not the special ids that differ with them)."""
  _check_one_tokenizer(cfg, datasets)
  return resolve_special_ids(cfg, [ds.manifest.tokenizer for ds in datasets])


def _check_one_tokenizer(cfg: PipelineConfig, datasets: Sequence[SplitDataset]) -> None:
  """A ConfigError naming two datasets whose tokenizers differ, unless `allow_mixed_tokenizers`."""
  if cfg.allow_mixed_tokenizers:
    return
  first = datasets[0].manifest.tokenizer
  for d, ds in zip(cfg.datasets[1:], datasets[1:]):
    if not same_tokenizer(ds.manifest.tokenizer, first):
      shown = {"file", "content_sha256"}
      raise ConfigError(
        f"datasets.{d.name}: tokenizer {_identity(ds.manifest.tokenizer, shown)} differs from "
        f"datasets.{cfg.datasets[0].name}'s {_identity(first, shown)}; token ids would mean different things{_unknown_hint(cfg, datasets)} (set "
        "allow_mixed_tokenizers: true to mix them on purpose)"
      )


def resolve_special_ids(cfg: PipelineConfig, tokenizers: Sequence[Mapping[str, Any]]) -> PipelineConfig:
  """The config with bos_id / eos_id / pad_id taken from the datasets' tokenizer where it gives none.

  An id the config gives for a token packing adds (add_bos, add_eos) must equal the recorded one; the
  datasets that record one must agree. Without either, adding the token is a ConfigError: no id is
  assumed to be 0. An unset pad_id stays the tokenizer's pad or 0, a fill value only (padding is
  marked by position)."""
  packing = cfg.packing
  resolved: dict[str, int | None] = {}
  for key, added in (("bos_id", packing.add_bos), ("eos_id", packing.add_eos), ("pad_id", True)):
    given = getattr(packing, key)
    recorded = {
      d.name: tokenizer[key]
      for d, tokenizer in zip(cfg.datasets, tokenizers)
      if isinstance(tokenizer.get(key), int) and not isinstance(tokenizer.get(key), bool)
    }
    values = sorted(set(recorded.values()))
    token = key[:3].upper()
    if len(values) > 1 and added and given is None:
      shown = ", ".join(f"{n} {v}" for n, v in recorded.items())
      raise ConfigError(f"packing.{key}: the datasets record different {token} ids ({shown}); give packing.{key}")
    # an id the config gives for a token of the tokenizer (bos, eos) must be that token, added or not
    if given is not None and values and given != values[0] and key != "pad_id" and len(values) == 1:
      name = next(iter(recorded))
      raise ConfigError(
        f"packing.{key}: {given}, but the tokenizer of dataset {name} records {token} id {values[0]}: id {given} "
        f"is another token there; drop packing.{key} (the recorded {token} is used) or give {values[0]}"
      )
    if given is None and len(values) == 1:
      given = values[0]
    if given is None and added and key != "pad_id":
      known = next((t for t in tokenizers if t.get("kind") not in (None, "unknown", "byte")), None)
      cause = (
        f"the datasets' tokenizer ({known.get('kind')}, {known.get('file', '')}, recorded in their manifests) has "
        f"no {token} token: give packing.{key}, or packing.add_{key[:3]}: false"
        if known is not None and tokenizers and all("sha256" in t for t in tokenizers)
        else f"no dataset's manifest records the tokenizer's {token} (converted before jaxdata recorded it, or "
        f"indexed without --tokenizer): give packing.{key}"
      )
      raise ConfigError(f"packing.add_{key[:3]}: true, but no packing.{key} is given and {cause}")
    resolved[key] = given
  if all(getattr(packing, k) == v for k, v in resolved.items()):
    return cfg
  packing = dataclasses.replace(
    packing, bos_id=resolved["bos_id"], eos_id=resolved["eos_id"], pad_id=resolved["pad_id"]
  )
  return dataclasses.replace(cfg, packing=packing)


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
  _check_one_tokenizer(cfg, datasets)
  given = [ds.manifest.tokenizer.get("vocab_size") for ds in datasets]
  sizes = [v for v in given if isinstance(v, int) and not isinstance(v, bool) and v > 0]
  if len(sizes) == len(given):
    vocab, source = max(sizes), f"the vocab_size {max(sizes)} in the datasets' manifest.json"
    packing = cfg.packing
    used = [("pad_id", packing.fill_id)]
    used += [("bos_id", packing.bos)] if packing.add_bos else []
    used += [("eos_id", packing.eos)] if packing.add_eos else []
    for key, value in used:
      if value >= vocab:
        raise ConfigError(f"packing.{key}: {value} is not below the datasets' vocabulary size {vocab}")
    if vocab <= INT32_LIMIT:
      return TokenBound(vocab, source)
  return TokenBound(INT32_LIMIT, "int32 batches cannot hold larger ids")
