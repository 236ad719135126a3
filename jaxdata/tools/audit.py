"""`audit`: replay S steps for H hosts from metadata and check the plan.

Checks (each failure is listed; any makes the audit fail):
  * no document piece is on two hosts in one step;
  * no piece appears twice within a pass of a dataset, and every pass that the
    S steps fully emitted covers every document of the dataset exactly once
    (not for windows drawn with replacement: a draw may repeat, on any host);
  * exact interleave: every dataset's tokens (or documents) taken stay within
    one document of its target, the target integrated over the schedule.
Diagnostics (reported): the per-step residual ratio of each dataset's
histogram (`jaxdata.tools.mixture_checks`: 1 for independent random picks,
far below 1 for the exact interleave), and documents read by two hosts in a
step (split documents whose pieces landed on different hosts: read
amplification, not an error). Warnings: a check that had nothing to check
(no pass completed within the audited steps), datasets read in long runs of
stored order.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from jaxdata.config.pipeline_config import PipelineConfig
from jaxdata.mixture.stream import DatasetMeta, load_metadata
from jaxdata.pipeline.planner import StepPlanner, check_host_count, host_row_blocks
from jaxdata.sources.lengths import DocumentLengths
from jaxdata.tools.mixture_checks import residual_ratio, stored_order_warnings, weight_notices
from jaxdata.transforms.packing import StepPlan

__all__ = ["AuditResult", "audit", "audit_plans"]


@dataclasses.dataclass
class AuditResult:
  steps: int
  hosts: int
  failures: list[str] = dataclasses.field(default_factory=list)
  piece_overlaps: int = 0
  document_overlaps: int = 0
  passes_checked: list[str] = dataclasses.field(default_factory=list)
  share_deviation: dict[str, float] = dataclasses.field(default_factory=dict)
  share_bound: float = 0.0
  realised_share: dict[str, float] = dataclasses.field(default_factory=dict)  # of the tokens in the batches
  target_share: dict[str, float] = dataclasses.field(default_factory=dict)  # the steps' weights, token-weighted
  realised_bound: float = 0.0  # the largest gap the exact interleave allows, as a share of the batches' tokens
  taken: dict[str, float] = dataclasses.field(default_factory=dict)  # units the stream took per dataset
  target: dict[str, float] = dataclasses.field(default_factory=dict)  # the schedule's target for them
  residual_ratio: dict[str, float] = dataclasses.field(default_factory=dict)
  residual_ratio_explained: str = ""
  warnings: list[str] = dataclasses.field(default_factory=list)

  @property
  def ok(self) -> bool:
    return not self.failures

  def to_json(self) -> dict[str, Any]:
    return {**dataclasses.asdict(self), "ok": self.ok}


MAX_AUDIT_STEPS = 100_000  # every plan is held to check whole passes: ~KB a step


def _audit_step(plan: StepPlan, hosts: int, drawn: set[int], result: AuditResult) -> None:
  """Counts into `result` the step's pieces on two hosts and documents split across hosts."""
  owner = np.full(plan.rows, -1)
  for host, rows in enumerate(host_row_blocks(plan.rows, hosts)):
    owner[rows] = host
  piece_host = owner[plan.row]
  keys = np.stack([plan.pieces.dataset, plan.pieces.pass_index, plan.pieces.record, plan.pieces.offset], 1)
  unique, inverse = np.unique(keys, axis=0, return_inverse=True)
  inverse = inverse.ravel()
  for key in np.flatnonzero(np.bincount(inverse) > 1):
    if unique[key][0] in drawn:
      continue
    hosts_of = np.unique(piece_host[inverse == key])
    if hosts_of.size > 1:
      result.piece_overlaps += 1
      result.failures.append(f"step {plan.step}: piece {unique[key].tolist()} on hosts {hosts_of.tolist()}")
  docs = np.unique(np.stack([plan.pieces.dataset, plan.pieces.record, piece_host], 1), axis=0)
  _, per_doc = np.unique(docs[:, :2], axis=0, return_counts=True)
  result.document_overlaps += int((per_doc > 1).sum())


def _pass_pieces(plans: Sequence[StepPlan]) -> dict[tuple[int, int], np.ndarray]:
  """Per (dataset, pass): its pieces' (record, offset, length) over all the plans, by record and offset."""
  seen: dict[tuple[int, int], list[np.ndarray]] = {}
  for plan in plans:
    pieces = plan.pieces
    for d, p in set(zip(pieces.dataset.tolist(), pieces.pass_index.tolist())):
      mine = (pieces.dataset == d) & (pieces.pass_index == p)
      seen.setdefault((d, p), []).append(np.stack([pieces.record[mine], pieces.offset[mine], pieces.length[mine]], 1))
  joined = {key: np.concatenate(parts) for key, parts in seen.items()}
  return {key: parts[np.lexsort((parts[:, 1], parts[:, 0]))] for key, parts in sorted(joined.items())}


def _coverage_failure(what: str, pieces: np.ndarray, lengths: np.ndarray, extra: int, whole: bool) -> str | None:
  """Why a completed pass's pieces do not cover each record once, left to right (None: they do)."""
  records = lengths.size
  present = np.unique(pieces[:, 0])
  if present.size != records:
    missing = np.setdiff1d(np.arange(records), present)
    return f"{what}: {missing.size} of {records} documents missing (e.g. record {missing[0]})"
  first = np.r_[True, pieces[1:, 0] != pieces[:-1, 0]]
  contiguous = np.where(first, pieces[:, 1] == 0, pieces[:, 1] == np.r_[0, pieces[:-1, 1] + pieces[:-1, 2]])
  if not contiguous.all():
    bad = pieces[np.flatnonzero(~contiguous)[0]]
    return f"{what}: record {bad[0]} has a gap or overlap at offset {bad[1]}"
  covered = np.bincount(pieces[:, 0], weights=pieces[:, 2], minlength=records)
  short = np.flatnonzero(covered != lengths + extra)
  if whole and short.size:
    return f"{what}: record {short[0]} covered {int(covered[short[0]])} of {int(lengths[short[0]] + extra)} tokens"
  return None


def audit_plans(
  cfg: PipelineConfig,
  plans: Sequence[StepPlan],
  hosts: int,
  lengths: Mapping[str, np.ndarray | DocumentLengths],
  completed: Mapping[str, int],
  carry: Any = None,
) -> AuditResult:
  """Checks host disjointness and pass coverage of given plans.

  `completed[name]` is how many passes of the dataset the stream finished
  emitting; `carry` the pieces still waiting (their passes are not complete).
  """
  names = cfg.names
  drawn = {i for i, s in enumerate(cfg.dataset_settings()) if s.window is not None and s.with_replacement}
  # All of them (a check), but for draws, whose passes are not checked (10^11 starts would not fit).
  checked = {name: np.asarray(v, dtype=np.int64) for name, v in lengths.items() if names.index(name) not in drawn}
  result = AuditResult(len(plans), hosts)
  for plan in plans:
    _audit_step(plan, hosts, drawn, result)
  waiting = set()
  if carry is not None and len(carry):
    waiting = set(zip(carry.dataset.tolist(), carry.pass_index.tolist()))
  whole = cfg.packing.mode == "concat" or cfg.packing.long_docs == "split"
  for (d, p), pieces in _pass_pieces(plans).items():
    if d in drawn:
      continue
    name = names[d]
    duplicate = np.flatnonzero((np.diff(pieces[:, 0]) == 0) & (np.diff(pieces[:, 1]) == 0))
    if duplicate.size:
      at = pieces[duplicate[0]]
      result.failures.append(f"{name} pass {p}: record {at[0]} offset {at[1]} appears twice")
      continue
    if p >= completed.get(name, 0) or (d, p) in waiting:
      continue  # the pass is not fully emitted within the audited steps
    result.passes_checked.append(f"{name} pass {p}")
    failure = _coverage_failure(f"{name} pass {p}", pieces, checked[name], cfg.packing.special_tokens, whole)
    if failure is not None:
      result.failures.append(failure)
  return result


def audit(
  cfg: PipelineConfig, hosts: int, steps: int, metadata: Mapping[str, DatasetMeta] | None = None
) -> AuditResult:
  """Plans `steps` steps for `hosts` hosts from metadata alone and checks them (at most MAX_AUDIT_STEPS:
  every plan is kept to check the passes)."""
  check_host_count(cfg, hosts)
  if isinstance(steps, bool) or not isinstance(steps, int) or not 1 <= steps <= MAX_AUDIT_STEPS:
    raise ValueError(
      f"steps: expected an int in [1, {MAX_AUDIT_STEPS:,}] (the audit keeps every planned step "
      f"in memory), got {steps!r}"
    )
  metadata = load_metadata(cfg) if metadata is None else metadata
  planner = StepPlanner(cfg, metadata)
  stream = planner.stream
  plans, targets, units = [], np.zeros(len(cfg.names)), stream.units
  taken, emitted = np.array([c.taken for c in stream.cursors]), stream.emitted
  step_units: list[np.ndarray] = []
  step_documents: list[int] = []
  step_weights: list[np.ndarray] = []
  in_batches, batch_targets, weight_changes = np.zeros(len(cfg.names)), np.zeros(len(cfg.names)), 0
  for plan in planner.plans(steps):
    weights = np.asarray(stream.weights.schedule.weights_at(plan.step))
    targets += weights * (stream.units - units)
    in_batches += np.bincount(plan.pieces.dataset, weights=plan.pieces.length, minlength=len(cfg.names))
    batch_targets += weights * plan.tokens
    weight_changes += bool(step_weights) and not np.array_equal(weights, step_weights[-1])
    units = stream.units
    now = np.array([c.taken for c in stream.cursors])
    step_units.append(now - taken)
    step_documents.append(stream.emitted - emitted)
    step_weights.append(weights)
    taken, emitted = now, stream.emitted
    completed = stream.passes_completed()  # as of this step: a partial last step is dropped with its pulls
    plans.append(plan)
  lengths = {n: np.asarray(metadata[n].lengths) for n in cfg.names}
  result = audit_plans(cfg, plans, hosts, lengths, completed if plans else {}, planner.packer.carry)
  if plans:
    ratio = residual_ratio(
      np.array(step_units, np.float64),
      np.array(step_documents, np.float64),
      np.array(step_weights),
      cfg.names,
      lengths,
      cfg.mixture.unit == "tokens",
    )
    result.residual_ratio, result.residual_ratio_explained = ratio.ratio, ratio.explain()
  if not result.passes_checked:
    result.warnings.append(
      f"no pass of any dataset completed within the {len(plans)} audited steps: exactly-once coverage "
      "was not checked (audit more steps)"
    )
  result.warnings.extend([*weight_notices(cfg), *stored_order_warnings(cfg, metadata)])
  # As of the last step planned: where the stream ends inside a step, that partial step's pulls
  # (dropped with it) are not in the targets either.
  taken = taken.astype(float)
  result.taken, result.target = dict(zip(cfg.names, taken.tolist())), dict(zip(cfg.names, targets.tolist()))
  if cfg.mixture.interleave == "exact":
    _check_exact(result, cfg, lengths, (taken, targets), (in_batches, batch_targets, weight_changes))
  return result


def _check_exact(
  result: AuditResult,
  cfg: PipelineConfig,
  lengths: Mapping[str, np.ndarray],
  drawn: tuple[np.ndarray, np.ndarray],
  batches: tuple[np.ndarray, np.ndarray, int],
) -> None:
  """The exact interleave's bound: every dataset's units drawn (`drawn`: taken, targets) within one
  document of its target, and the batches' shares within it too (`batches`: tokens in the batches,
  their targets, the weight changes)."""
  taken, targets = drawn
  in_batches, batch_targets, weight_changes = batches
  # Steps pull whole documents with one step's weights, and the last pull of a
  # step can overshoot into the next; one document per dataset bounds it all.
  # (in kept tokens: what packing keeps of the longest document, at the longest rows)
  kept = [int(cfg.packing.kept_tokens(np.array([found.max()]), cfg.packing.seq_len)[0]) for found in lengths.values()]
  bound = max(kept) if cfg.mixture.unit == "tokens" else 1
  result.share_bound = float(bound)
  for name, got, want in zip(cfg.names, taken, targets):
    result.share_deviation[name] = float(got - want)
    if abs(got - want) > bound + 1e-6:
      result.failures.append(f"{name}: took {got:.0f} {cfg.mixture.unit}, target {want:.1f}, off by more than {bound}")
  if cfg.mixture.unit == "tokens" and in_batches.sum():
    _check_realised(result, cfg, in_batches, batch_targets, bound, weight_changes)


def _check_realised(
  result: AuditResult, cfg: PipelineConfig, in_batches: np.ndarray, targets: np.ndarray, bound: int, changes: int
) -> None:
  """The shares of the tokens that reached the batches against the targets. The stream is within
  `bound` (one kept document) of its targets; what it drew but packing holds back (the carry, under
  one step's capacity plus a document; group_by_length's groups) shifts a share by at most that, once more at each change of
  weights (the carry drawn under the old ones lands under the new)."""
  total = float(in_batches.sum())
  carry = cfg.tokens_per_step * max(1, cfg.packing.group_by_length) + bound  # group_by_length holds groups back
  allowed = (bound + (1 + changes) * carry) / total
  result.realised_bound = allowed
  for name, got, want in zip(cfg.names, in_batches / total, targets / total):
    result.realised_share[name], result.target_share[name] = float(got), float(want)
    if abs(got - want) > allowed + 1e-9:
      result.failures.append(
        f"{name}: {got:.4f} of the tokens in the batches, target {want:.4f}: off by more than the "
        f"{allowed:.4f} the exact interleave allows over {result.steps} steps"
      )
