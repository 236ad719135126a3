"""What determines the order of every batch, as a small readable fingerprint.

A checkpoint stores it; restoring compares it field by field, so a refusal
says what changed. Mixture weights, schedules and pass policies are left out
on purpose: changing them on resume is allowed (cursors carry over).

    {"seed": 1234, "datasets": ["web", "code"],
     "content": {"web": "4f1c09aa2b7e", ...},             manifest fingerprints (shards, counts, hashes)
     "shuffle": {"web": "shards=1 within=0 block=global reshuffle=1", ...},
     "mixture": "unit=tokens interleave=exact",
     "packing": "mode=first_fit seq_len=2048 long_docs=split bos=- eos=0 warmup=-",
     "global_batch_size": 256}
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from jaxdata.config.pipeline_config import PipelineConfig
from jaxdata.order.dataset_order import DatasetOrder
from jaxdata.order.sampled import SampledOrder

__all__ = ["describe_changes", "order_fingerprint"]


def _describe(order: DatasetOrder | SampledOrder) -> str:
  if isinstance(order, SampledOrder):
    return order.describe()
  options = order.options
  return (
    f"shards={int(options.shuffle_shards)} within={int(options.shuffle_within_shard)} "
    f"block={options.block_size or '-'} reshuffle={int(options.reshuffle_on_repeat)}"
    + (f" open={options.open_shards}" if options.open_shards > 1 else "")
  )


def order_fingerprint(
  cfg: PipelineConfig,
  manifest_fingerprints: Sequence[str],
  orders: Sequence[DatasetOrder | SampledOrder],
  sampling: Sequence[str] = (),
) -> dict[str, Any]:
  """`sampling`: per dataset, its window sampling (`WindowOptions.describe`) or ""."""
  packing = cfg.packing
  sampling = list(sampling) or [""] * len(orders)
  warmup = ",".join(f"{p.seq_len}<{p.until_step}" for p in packing.warmup) or "-"
  if packing.linear_warmup is not None:
    linear = packing.linear_warmup
    warmup = f"linear:{linear.start}->{packing.seq_len}/{linear.steps}x{linear.granularity}"
  return {
    "seed": cfg.seed,
    "datasets": list(cfg.names),
    "content": {n: fp[:12] for n, fp in zip(cfg.names, manifest_fingerprints)},
    "shuffle": {order.name: " ".join(filter(None, [_describe(order), how])) for order, how in zip(orders, sampling)},
    "mixture": f"unit={cfg.mixture.unit} interleave={cfg.mixture.interleave}",
    "packing": (
      f"mode={packing.mode} seq_len={packing.seq_len} long_docs={packing.long_docs} "
      f"bos={packing.bos_id if packing.add_bos else '-'} eos={packing.eos_id if packing.add_eos else '-'} "
      f"pad={packing.fill_id} warmup={warmup}"
      + (f" group={packing.group_by_length}" if packing.group_by_length else "")
      + (f" segments<={packing.max_segments_per_row}" if packing.max_segments_per_row is not None else "")
    ),
    "global_batch_size": cfg.batch.global_batch_size
    if not (cfg.batch.schedule or cfg.batch.ramp)
    else cfg.batch.describe(),
  }


def describe_changes(saved: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
  """Human-readable differences, one per changed field (empty: identical)."""
  changes = []
  for key in sorted(set(saved) | set(current)):
    old, new = saved.get(key), current.get(key)
    if old == new:
      continue
    if isinstance(old, Mapping) and isinstance(new, Mapping):
      for name in sorted(set(old) | set(new)):
        if old.get(name) != new.get(name):
          changes.append(f"{key}.{name}: {old.get(name, '(absent)')} -> {new.get(name, '(absent)')}")
    else:
      changes.append(f"{key}: {old} -> {new}")
  return changes
