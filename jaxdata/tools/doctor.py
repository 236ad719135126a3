"""`jaxdata doctor`: the symptoms of a bad data order, checked on a run's stats (and losses).

Each check states its statistic, its null and its threshold, and prints one
line: ok / warn / fail, the figure, what it means, what to change::

    histogram   D = sum_s sum_d (n_sd - N_s p_sd)^2 / (N_s p_sd) / ((S - 1)(K - 1))     documents per source and step,
                p_sd from the step's target shares / the source's mean document length; ~1 under independent
                random picks (chi-square), far below for the exact interleave. fail above 1 + 5 sqrt(2 / dof),
                a warning naming the data instead where a source's documents average >= 10% of a step's tokens
    sawtooth    per source: two or more shards read one after another (at most two a step, each over consecutive
                steps: stored order). With a loss log: correlation r of the source's loss, less its running mean
                over one period (the training trend), with the step's position inside its shard (a sawtooth of
                the shard's period); warn above |r| > 3.5 / sqrt(n) (no relation)
    boundaries  with a loss log: mean loss over w steps after each pass boundary minus the w steps before;
                null: the same difference at every step whose averages hold no boundary; fail below -4 sigma
    passes      implied passes per source (the stats' completed passes + the current pass's progress):
                warn above 4 (a small source seen many times: memorisation); with fine-tuning data, its trained
                tokens, and a warning for a source whose masks train none of its tokens
    shares      realised shares in the mixture's unit (tokens in the batches, or documents) against the steps'
                targets: fail beyond (1 + weight changes) x 2 x the largest step's units / the total (the exact
                interleave's document and the carry of packing), plus 4 binomial sigma over the documents drawn
    overlap     with --config and --hosts: pieces planned onto two hosts in one step (`jaxdata audit`): fail if any
    controller  with mixture updates in the stats (an online controller): per source, oscillation = the share
                of its weight changes (over 0.01) that reverse the one before: a controller converging or
                drifting reverses few, a noisy one ~2/3 (independent changes: 1/2 to 2/3); warn above 0.5 over
                6 or more changes. Starved: its realised share of the tokens since the first update below
                --share-floor (default 0.01): warn

Loss log: JSONL, one object per step: {"step": 12, "losses": {"web": 2.31, "code": 1.87}} (what
`jaxdata.research.mixing.per_source_loss` gives, as floats per source name).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence

import numpy as np

from jaxdata.config.pipeline_config import PipelineConfig
from jaxdata.errors import InputFormatError
from jaxdata.pipeline.step_stats import StepStats, trained_totals
from jaxdata.tools.report import share_allowance, unit_counts

__all__ = ["Check", "diagnose", "order_checks"]

MAX_PASSES = 4.0
RUN_STEPS = 3  # a source reading shard by shard, each over this many steps or more, may show a sawtooth
MIN_SHARDS = 2  # a sawtooth repeats with each shard: one shard over the whole run has no period
COARSE_DOCUMENT = 0.1  # a source whose documents average this share of a step's tokens swings whatever the order


@dataclasses.dataclass(frozen=True)
class Check:
  name: str
  status: str  # "ok", "warn" or "fail"
  figure: str
  meaning: str
  advice: str = ""

  def line(self) -> str:
    tail = f" -> {self.advice}" if self.advice and self.status != "ok" else ""
    return f"{self.status.upper():4s} {self.name}: {self.figure}. {self.meaning}{tail}"


def _histogram(stats: Sequence[StepStats], names: list[str]) -> Check:
  if not stats:
    return Check("histogram", "ok", "not computed", "too few steps whose weights equal the step before's")
  docs = np.array([[s.documents_per_source.get(n, 0) for n in names] for s in stats], np.float64)
  tokens = np.array([[s.tokens_per_source.get(n, 0) for n in names] for s in stats], np.float64)
  target = np.array([[s.target_share.get(n, 0.0) for n in names] for s in stats], np.float64)
  mean_length = tokens.sum(0) / np.maximum(docs.sum(0), 1)
  rate = np.where(mean_length > 0, target / np.maximum(mean_length, 1e-9), 0.0) if stats[0].unit == "tokens" else target
  p = rate / np.maximum(rate.sum(1, keepdims=True), 1e-12)
  n = docs.sum(1, keepdims=True)
  live = (p > 0) & (n > 0)
  expected = np.where(live, n * p, 1.0)
  chi = float((np.where(live, (docs - expected) ** 2 / expected, 0.0)).sum())
  dof = max(1, (len(stats) - 1) * (int((p > 0).any(0).sum()) - 1))
  dispersion, bound = chi / dof, 1 + 5 * math.sqrt(2 / dof)
  meaning = (
    f"per-step documents per source against the steps' targets, over {len(stats)} steps (1 = as random as "
    f"independent picks, below 1 = steadier; above {bound:.2f}: swings beyond sampling noise)"
  )
  cause, the_data = _histogram_cause(tokens, mean_length, names)
  # Swings that long documents make are the data's, not a fault of the order: a warning that names them.
  status = "ok" if dispersion <= bound else "warn" if the_data else "fail"
  return Check("histogram", status, f"D = {dispersion:.2f}", meaning, cause)


def _histogram_cause(tokens: np.ndarray, mean_length: np.ndarray, names: list[str]) -> tuple[str, bool]:
  """What to change for swinging histograms, and whether the data is the cause: where a source's
  documents are a large part of a step, no order can mix inside a step; else the order is."""
  step_tokens = float(tokens.sum(1).mean())
  coarse = [(n, float(m)) for n, m in zip(names, mean_length) if m >= COARSE_DOCUMENT * step_tokens]
  if coarse:
    named = ", ".join(f"{n} {m:,.0f}" for n, m in sorted(coarse, key=lambda x: -x[1]))
    return (
      f"the data, not the order: documents average {named} tokens against {step_tokens:,.0f} tokens a step, "
      "so a few documents fill whole steps; the cumulative shares still follow the targets. For steadier "
      "steps: more tokens per step (rows or seq_len), or cut long documents into pieces"
    ), True
  return "mix inside every step: a block or global shuffle, or mixture.interleave exact", False


def _shard_spans(stats: Sequence[StepStats], name: str) -> list[float] | None:
  """Steps each shard of `name` is read over, if the source reads shard by shard (at most two
  shards a step, each shard in one run of consecutive steps); None if it mixes shards."""
  seen: dict[int, list[int]] = {}
  per_step = []
  for position, s in enumerate(stats):
    shards = s.shards.get(name, [])
    per_step.append(s.shard_count.get(name, len(shards)))  # the list stops at MAX_LISTED_SHARDS
    for shard in shards:
      seen.setdefault(shard, []).append(position)
  if not seen or np.mean([n for n in per_step if n]) > 2:
    return None
  spans = [steps[-1] - steps[0] + 1 for steps in seen.values() if len(steps) == steps[-1] - steps[0] + 1]
  if len(spans) < 0.8 * len(seen) or len(seen) < MIN_SHARDS:
    return None  # (one shard the whole run: its order inside cannot be seen from shards, nor repeat)
  period = sum(1 for n in per_step if n) / len(seen)  # a shard's own steps (spans count the shared ones twice)
  return [period] * len(spans)


def _position_in_shard(stats: Sequence[StepStats], name: str) -> dict[int, int]:
  """Per step, how many steps ago the shard `name` is reading now began."""
  first: dict[int, int] = {}
  out = {}
  for s in stats:
    shards = s.shards.get(name)
    if shards:
      out[s.step] = s.step - first.setdefault(shards[-1], s.step)
  return out


def _sawtooth(stats: Sequence[StepStats], names: list[str], losses: Mapping[int, Mapping[str, float]]) -> list[Check]:
  checks = []
  if not any(s.shards for s in stats):
    return [Check("sawtooth", "ok", "no shard record in these stats", "stats from before shards were recorded")]
  for name in names:
    spans = _shard_spans(stats, name)
    if spans is None or np.mean(spans) < RUN_STEPS:
      checks.append(
        Check(
          f"sawtooth {name}",
          "ok",
          "shards mixed within steps" if spans is None else f"shards of {np.mean(spans):.1f} steps",
          "no shard-length period to repeat",
        )
      )
      continue
    period = int(round(float(np.mean(spans))))
    if sum(1 for s in stats if s.step in losses and name in losses[s.step]) < 4 * period:
      checks.append(
        Check(
          f"sawtooth {name}",
          "warn",
          f"reads one shard at a time, about {period} steps each",
          "the loss may rise and fall with each shard (pass a loss log to measure it)",
          "shuffle within shards (shuffle_within_shard, a block shuffle) or open_shards > 1",
        )
      )
      continue
    # The sawtooth: the loss follows the position inside the shard being read (its period is the shard's
    # length). Correlation of loss and position; under no relation |r| stays below 3.5 / sqrt(n).
    position = _position_in_shard(stats, name)
    steps = [s.step for s in stats if s.step in losses and name in losses[s.step] and s.step in position]
    # The training trend (a falling loss) is removed first: the loss minus its running mean over one period,
    # which averages a sawtooth out, so only the ups and downs within each shard remain.
    loss = np.array([losses[t][name] for t in steps], np.float64)
    if loss.size > period:
      trend = np.convolve(loss, np.ones(period) / period, mode="same")
      loss = loss - trend
    r = float(np.corrcoef([position[t] for t in steps], loss)[0, 1]) if len(steps) > 3 else 0.0
    r = 0.0 if math.isnan(r) else r
    bound = 3.5 / math.sqrt(max(len(steps), 1))
    status = "warn" if abs(r) > bound else "ok"
    checks.append(
      Check(
        f"sawtooth {name}",
        status,
        f"loss vs position inside the shard (period {period} steps): r = {r:.2f} (noise bound {bound:.2f})",
        "the loss rises and falls with each shard in order",
        "shuffle within shards (shuffle_within_shard, a block shuffle) or open_shards > 1",
      )
    )
  return checks


def _boundaries(
  stats: Sequence[StepStats], names: list[str], losses: Mapping[int, Mapping[str, float]], half_width: int = 5
) -> list[Check]:
  checks = []
  for name in names:
    steps = [s.step for s in stats if s.step in losses and name in losses[s.step]]
    if len(steps) < 6 * half_width:
      continue
    loss = np.array([losses[s][name] for s in steps])
    passes = {s.step: s.passes.get(name, 0) for s in stats}
    marks = [i for i in range(1, len(steps)) if passes.get(steps[i], 0) > passes.get(steps[i - 1], 0)]
    marks = [i for i in marks if half_width <= i <= len(steps) - half_width]
    if not marks:
      continue
    kernel = np.ones(half_width) / half_width
    means = np.convolve(loss, kernel, mode="valid")  # means[i] = mean of loss[i : i + half_width]
    jumps = means[half_width:] - means[:-half_width]  # after minus before, at every split point i = half_width ..
    near = {
      i - half_width + k
      for i in marks
      for k in range(-half_width + 1, half_width)
      if 0 <= i - half_width + k < jumps.size
    }
    null = np.delete(jumps, sorted(near))  # the split points whose averages hold no boundary
    sigma = float(null.std()) or 1e-12
    drop = float(np.mean([jumps[i - half_width] for i in marks if i - half_width < jumps.size]))
    status = "fail" if drop < -4 * sigma else "ok"
    checks.append(
      Check(
        f"boundaries {name}",
        status,
        f"loss change at {len(marks)} pass boundaries {drop:+.3f} (null sigma {sigma:.3f})",
        "a drop right after a pass begins means the same data in the same order again",
        "reshuffle_on_repeat: true; Pipeline(epoch=e) per epoch",
      )
    )
  return checks


def _passes(stats: Sequence[StepStats], names: list[str]) -> list[Check]:
  last = stats[-1].passes
  trained = trained_totals(stats, names)
  checks = []
  for name in names:
    passes = float(last.get(name, 0))
    status = "warn" if passes > MAX_PASSES else "ok"
    figure = f"{passes:.0f} completed passes" + (f", {trained[name]:,} trained tokens" if trained else "")
    checks.append(
      Check(
        f"passes {name}",
        status,
        figure,
        f"above {MAX_PASSES:g} a small source is memorised",
        "lower its weight, or add data",
      )
    )
  if trained:  # fine-tuning data: a source whose masks train nothing only costs steps
    for name in names:
      tokens = sum(int(r.tokens_per_source.get(name, 0)) for r in stats)
      if tokens and not trained[name]:
        checks.append(
          Check(
            f"trained {name}",
            "warn",
            f"0 of its {tokens:,} tokens trained",
            "its examples' masks mark no token as trained: it fills rows and trains nothing",
            "check its conversion (--train-on, message weights) or leave the set out",
          )
        )
  return checks


OSCILLATION = 0.5  # share of weight changes that reverse the previous one
MIN_CHANGES = 6
CHANGE = 0.01  # smaller weight changes are not counted as moves


def _controller(stats: Sequence[StepStats], names: list[str], floor: float) -> list[Check]:
  """Oscillation and starvation of an online controller's weights (only with mixture updates)."""
  updated = [i for i, r in enumerate(stats) if r.mixture_update is not None]
  if not updated:
    return []
  since = stats[updated[0] :]
  tokens = np.array([[r.tokens_per_source[n] for n in names] for r in since], dtype=float).sum(axis=0)
  shares = tokens / max(tokens.sum(), 1.0)
  checks = []
  for i, name in enumerate(names):
    weights = np.array([(stats[k].mixture_update or {})[name] for k in updated])
    moves = np.diff(weights)
    moves = moves[np.abs(moves) > CHANGE]
    reversals = int((np.sign(moves[1:]) != np.sign(moves[:-1])).sum()) if moves.size > 1 else 0
    ratio = reversals / max(moves.size - 1, 1)
    noisy = moves.size >= MIN_CHANGES and ratio > OSCILLATION
    checks.append(
      Check(
        f"controller {name}",
        "warn" if noisy else "ok",
        f"{reversals} of {max(moves.size - 1, 0)} weight changes reverse the one before",
        f"above {OSCILLATION:g} the controller oscillates",
        "smooth its updates (a larger averaging window or smaller step size), or update less often",
      )
    )
    starved = shares[i] < floor
    checks.append(
      Check(
        f"starved {name}",
        "warn" if starved else "ok",
        f"{shares[i]:.4f} of the tokens since the first update (step {stats[updated[0]].step})",
        f"below {floor:g} the source is starved",
        "raise the controller's smoothing toward uniform, or set a floor on its weights",
      )
    )
  return checks


def _shares(stats: Sequence[StepStats]) -> Check:
  """The realised shares against the targets, in the mixture's unit (tokens in the batches, or
  documents begun), each step's target weighted by what that step holds."""
  names, got, unit = unit_counts(stats)
  target_shares = np.array([[s.target_share.get(n, 0.0) for n in names] for s in stats], np.float64)
  per_step = got.sum(axis=1)
  total = float(per_step.sum())
  if not total:
    return Check("shares", "ok", "not computed", f"no step holds any {unit}")
  realised, target = got.sum(axis=0) / total, (target_shares * per_step[:, None]).sum(axis=0) / total
  allowed = share_allowance(stats, per_step, target)
  gap = np.abs(realised - target)
  worst = int(np.argmax(gap - allowed))
  return Check(
    "shares",
    "fail" if gap[worst] > allowed[worst] + 1e-12 else "ok",
    f"{names[worst]}: {realised[worst]:.4f} of the {unit} in the batches against a target of {target[worst]:.4f}",
    f"a correct run keeps it within {allowed[worst]:.4f} over these {len(stats)} steps (one document, "
    "the carry of packing, and a random interleave's binomial spread)",
    "report a bug with the config: the mixture counts what packing keeps, so no policy may move a share",
  )


def order_checks(cfg: PipelineConfig) -> list[Check]:
  """Per dataset, the order it is read in: a warning for runs of stored order (the default mixes)."""
  return [
    Check(
      f"order {s.name}",
      "warn" if s.keeps_stored_order else "ok",
      s.order_name,
      "the same runs of stored order every pass: a shard from one domain becomes a run of that domain"
      if s.keeps_stored_order
      else "mixed on every pass",
      "drop shuffle_block_size: null (the default, global, mixes the dataset) or set shuffle_within_shard: true",
    )
    for s in cfg.dataset_settings()
  ]


def diagnose(
  stats: Sequence[StepStats],
  losses: Mapping[int, Mapping[str, float]] | None = None,
  overlaps: int | None = None,
  share_floor: float = 0.01,
) -> list[Check]:
  """Every check on `stats` (the pipeline's JSONL records), `losses` (a loss log) and `overlaps`
  (pieces planned onto two hosts, from `jaxdata audit`)."""
  if not stats:
    raise InputFormatError("doctor: the stats hold no step")
  names = list(stats[0].tokens_per_source)
  losses = losses or {}
  # A step right after its weights changed holds documents drawn under the old ones (carried over):
  # the histogram reads the steps whose weights equal the step before's.
  steady = [stats[0]] + [r for r, before in zip(stats[1:], stats[:-1]) if r.target_share == before.target_share]
  checks = [
    _histogram(steady if len(steady) >= 3 else stats[:0], names),
    *_sawtooth(stats, names, losses),
    *_boundaries(stats, names, losses),
    *_passes(stats, names),
    _shares(stats),
    *_controller(stats, names, share_floor),
  ]
  if overlaps is not None:
    checks.append(
      Check(
        "overlap",
        "fail" if overlaps else "ok",
        f"{overlaps} pieces on two hosts in one step",
        "every host must read different rows",
        "report a bug: the plan is host-independent",
      )
    )
  return checks
