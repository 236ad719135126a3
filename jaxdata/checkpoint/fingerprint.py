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

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from jaxdata.config.pipeline_config import PipelineConfig
from jaxdata.errors import CheckpointError
from jaxdata.order.dataset_order import DatasetOrder
from jaxdata.order.sampled import SampledOrder

__all__ = ["OrderFingerprint", "describe_changes", "order_fingerprint"]


@dataclasses.dataclass(frozen=True)
class OrderFingerprint:
  """The fingerprint's fields (module docstring); `global_batch_size` an int, or a schedule's
  `BatchConfig.describe()`."""

  seed: int
  datasets: tuple[str, ...]
  content: Mapping[str, str]
  shuffle: Mapping[str, str]
  mixture: str
  packing: str
  global_batch_size: int | str

  def to_json(self) -> dict[str, Any]:
    return {
      "seed": self.seed,
      "datasets": list(self.datasets),
      "content": dict(self.content),
      "shuffle": dict(self.shuffle),
      "mixture": self.mixture,
      "packing": self.packing,
      "global_batch_size": self.global_batch_size,
    }

  @classmethod
  def from_json(cls, raw: Any) -> OrderFingerprint:
    """A saved fingerprint; `CheckpointError` naming the field that is missing or malformed."""
    if not isinstance(raw, Mapping):
      raise CheckpointError(f"pipeline state: fingerprint must be a mapping, got {type(raw).__name__}")
    fields = [f.name for f in dataclasses.fields(cls)]
    unknown = sorted(set(raw) - set(fields))
    if unknown:
      raise CheckpointError(f"pipeline state: fingerprint.{unknown[0]} is no field of a fingerprint {fields}")
    names = raw.get("datasets")
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
      raise CheckpointError(f"pipeline state: fingerprint.datasets must list dataset names, got {names!r:.200}")
    for field in ("content", "shuffle"):
      value = raw.get(field)
      if not isinstance(value, Mapping) or not all(isinstance(v, str) for v in value.values()):
        raise CheckpointError(f"pipeline state: fingerprint.{field} must map each dataset to its {field}")
    checks = {"seed": (int,), "mixture": (str,), "packing": (str,), "global_batch_size": (int, str)}
    for field, kinds in checks.items():
      value = raw.get(field)
      if not isinstance(value, kinds) or isinstance(value, bool):
        raise CheckpointError(f"pipeline state: fingerprint.{field} must be {' or '.join(k.__name__ for k in kinds)}")
    return cls(
      raw["seed"],
      tuple(names),
      dict(raw["content"]),
      dict(raw["shuffle"]),
      raw["mixture"],
      raw["packing"],
      raw["global_batch_size"],
    )

  def changes_from(self, saved: OrderFingerprint) -> list[str]:
    """What differs from `saved`, one line per field (`describe_changes`)."""
    return describe_changes(saved.to_json(), self.to_json())


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
) -> OrderFingerprint:
  """`sampling`: per dataset, its window sampling (`WindowOptions.describe`) or ""."""
  packing = cfg.packing
  sampling = list(sampling) or [""] * len(orders)
  warmup = ",".join(f"{p.seq_len}<{p.until_step}" for p in packing.warmup) or "-"
  if packing.linear_warmup is not None:
    linear = packing.linear_warmup
    warmup = f"linear:{linear.start}->{packing.seq_len}/{linear.steps}x{linear.granularity}"
  return OrderFingerprint(
    seed=cfg.seed,
    datasets=tuple(cfg.names),
    content={n: fp[:12] for n, fp in zip(cfg.names, manifest_fingerprints)},
    shuffle={order.name: " ".join(filter(None, [_describe(order), how])) for order, how in zip(orders, sampling)},
    mixture=f"unit={cfg.mixture.unit} interleave={cfg.mixture.interleave}",
    packing=(
      f"mode={packing.mode} seq_len={packing.seq_len} long_docs={packing.long_docs} "
      f"bos={packing.bos_id if packing.add_bos else '-'} eos={packing.eos_id if packing.add_eos else '-'} "
      f"pad={packing.fill_id} warmup={warmup}"
      + (f" group={packing.group_by_length}" if packing.group_by_length else "")
      + (f" segments<={packing.max_segments_per_row}" if packing.max_segments_per_row is not None else "")
    ),
    global_batch_size=cfg.batch.global_batch_size
    if not (cfg.batch.schedule or cfg.batch.ramp)
    else cfg.batch.describe(),
  )


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
