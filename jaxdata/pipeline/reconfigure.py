"""`reconfigured`: a state saved under one config, made the state of another at the same step.

`Pipeline(new_cfg).set_state(old_state, reconfigure=True)` calls it. The
steps before the state's step S were the old config's; from S on the new
config decides, as if its run had reached S with the same cursors::

    old state (step S)                       new state (step S)
    datasets  web  (pass 2, position 812)    web   (pass 2, position 812)   kept: same name, content, order
              code (pass 0, position 99)     math  (pass 0, position 0)     added
                                                                            code: removed (stops)
    interleave deficits of web, code         a fresh segment from S: deficits 0, new weights
    carry     pieces of web and code         web's pieces (split at the new row length); code's dropped, counted
    updates   the loop's pending updates     none (the new config's weights and schedule govern)
    changes   [...]                          [..., ConfigChange(S, ...)]

A dataset is kept when its name, content fingerprint and order settings
(seed, shuffles) are the old ones: its pass, position and permutation go
on, so across S it is read exactly once per pass. A dataset whose content
or order changed is refused unless the new config marks it `replaced:
true` (then it starts at pass 0). What decides rows (seq_len, batch size,
packing mode) may change: the carried pieces of kept datasets go into the
new rows, a piece longer than the new row split at its length, so no
carried token is lost.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping
from typing import Any

import numpy as np

from jaxdata.checkpoint.fingerprint import OrderFingerprint
from jaxdata.checkpoint.state import PipelineState
from jaxdata.config.pipeline_config import PipelineConfig
from jaxdata.errors import CheckpointError
from jaxdata.mixture.changes import ConfigChange
from jaxdata.mixture.interleave import Segment
from jaxdata.mixture.stream_state import CursorState
from jaxdata.mixture.updates import MixtureUpdates
from jaxdata.pipeline.wait_warning import LOGGER
from jaxdata.transforms.packer_state import Carry, PackerState
from jaxdata.transforms.pieces import Pieces

__all__ = ["reconfigured"]

MAX_CARRY_PIECES = 1 << 22  # a carry is at most a step's pieces: far fewer
ROW_FIELDS = ("packing", "global_batch_size")  # the fingerprint's fields that decide rows, not the order


def fingerprint_digest(fingerprint: Mapping[str, Any]) -> str:
  return hashlib.sha256(json.dumps(fingerprint, sort_keys=True).encode()).hexdigest()[:16]


def _row_change(field: str, old: Any, new: Any) -> str:
  """What of a row field changed, its differing words only: "packing: seq_len=2048 -> seq_len=4096".

  >>> _row_change("packing", "mode=best_fit seq_len=64 pad=0", "mode=best_fit seq_len=32 pad=0")
  'packing: seq_len=64 -> seq_len=32'
  """
  if isinstance(old, str) and isinstance(new, str) and len(old.split()) == len(new.split()):
    pairs = [(a, b) for a, b in zip(old.split(), new.split()) if a != b]
    return f"{field}: {' '.join(a for a, _ in pairs)} -> {' '.join(b for _, b in pairs)}"
  return f"{field}: {old} -> {new}"


def _refuse_special_token_changes(old: OrderFingerprint, new: OrderFingerprint) -> None:
  """Carried pieces count the BOS / EOS the old packing added: a change of them cannot carry over."""
  words = [dict(w.split("=", 1) for w in f.packing.split() if "=" in w) for f in (old, new)]
  changed = [k for k in ("bos", "eos") if words[0].get(k) != words[1].get(k)]
  if changed:
    raise CheckpointError(
      f"pipeline state: packing {' and '.join(changed)} {[words[0].get(k) for k in changed]} -> "
      f"{[words[1].get(k) for k in changed]}: add_bos / add_eos and their ids cannot change at a restore (the "
      "carried pieces count the old ones); keep them, or start the new config from step 0"
    )


def _classify(old: OrderFingerprint, new: OrderFingerprint, cfg: PipelineConfig) -> dict[str, list[str]]:
  """Which datasets are kept, added, removed and replaced; a CheckpointError for a change it cannot continue."""
  if old.seed != new.seed:
    raise CheckpointError(
      f"pipeline state: seed {old.seed} -> {new.seed}: every dataset's order would change, so no "
      "dataset could continue where it was (a state of another run?); restore with the run's seed"
    )
  old_names, new_names = list(old.datasets), list(cfg.names)
  kept, replaced, refused = [], [], []
  for d in cfg.datasets:
    if d.name not in old_names:
      continue
    what = [
      f"its {label} changed ({before.get(d.name)} -> {after.get(d.name)})"
      for before, after, label in ((old.content, new.content, "content"), (old.shuffle, new.shuffle, "order settings"))
      if before.get(d.name) != after.get(d.name)
    ]
    if not what:
      kept.append(d.name)
    elif d.replaced:
      replaced.append(d.name)
    else:
      refused.append(f"datasets.{d.name}: {' and '.join(what)}")
  if refused:
    raise CheckpointError(
      f"pipeline state: {'; '.join(refused)}; mark such a dataset `replaced: true` to start it over at pass 0 "
      "(a dataset that continues must be the same data in the same order)"
    )
  if not kept:
    raise CheckpointError(
      f"pipeline state: none of the state's datasets {old_names} continues in the new config ({new_names}, "
      f"{len(replaced)} replaced): nothing of that run goes on, so it is another run; start this config from step 0"
    )
  added, removed = [n for n in new_names if n not in old_names], [n for n in old_names if n not in new_names]
  for name in added:  # a rename reads the data again from pass 0: say so
    same = [r for r in removed if old.content.get(r) == new.content.get(name)]
    if same:
      LOGGER.warning(
        "datasets.%s: the same content as the removed dataset %s: it starts at pass 0 (a renamed dataset is read "
        "again from its start; keep the old name to continue where it was)",
        name,
        same[0],
      )
  return {"kept": kept, "added": added, "removed": removed, "replaced": replaced}


def _carry(
  text: str, old_names: list[str], kept: list[str], new_names: list[str], seq_len: int, pairs: bool
) -> tuple[str, int]:
  """The carry's pieces of kept datasets, renumbered and split at `seq_len` (a preference pair is never split:
  one longer than the new rows is dropped, as packing drops it); (encoded, tokens dropped)."""
  pieces = Pieces.from_json(text, lambda d, r: np.zeros_like(d), MAX_CARRY_PIECES)
  if len(pieces) and pieces.dataset.max() >= len(old_names):
    raise CheckpointError(f"pipeline state: a carried piece names dataset {int(pieces.dataset.max())} of {old_names}")
  renumber = np.full(len(old_names), -1, np.int64)
  for name in kept:
    renumber[old_names.index(name)] = new_names.index(name)
  target = renumber[pieces.dataset] if len(pieces) else np.zeros(0, np.int64)
  if pairs:
    target[pieces.length > seq_len] = -1
  dropped = int(pieces.length[target < 0].sum())
  keep = np.flatnonzero(target >= 0)
  pieces = Pieces(
    target[keep],
    *(getattr(pieces, f)[keep] for f in ("pass_index", "record", "offset", "length")),
    pieces.doc_length[keep],
  )
  counts = -(-pieces.length // seq_len)  # pieces each becomes (1 unless longer than the new rows)
  if len(pieces) and counts.max() > 1:
    index = np.repeat(np.arange(len(pieces)), counts)
    part = np.arange(index.size) - np.repeat(np.cumsum(counts) - counts, counts)
    split = pieces.take(index)
    offset = split.offset + part * seq_len
    length = np.minimum(seq_len, split.offset + split.length - offset)
    pieces = Pieces(split.dataset, split.pass_index, split.record, offset, length, split.doc_length)
  return pieces.to_json(), dropped


def _change(
  step: int, old: OrderFingerprint, new: OrderFingerprint, groups: dict[str, list[str]], dropped: int
) -> ConfigChange:
  """The history entry of a change of course at `step`: what was added, removed, replaced, what of the
  rows changed, the carried tokens dropped."""
  return ConfigChange(
    step=step,
    before=fingerprint_digest(old.to_json()),
    added=tuple(groups["added"]),
    removed=tuple(groups["removed"]),
    replaced=tuple(groups["replaced"]),
    rows=tuple(
      _row_change(field, getattr(old, field), getattr(new, field))
      for field in ROW_FIELDS
      if getattr(old, field) != getattr(new, field)
    ),
    dropped_tokens=dropped,
  )


def reconfigured(saved: PipelineState, fingerprint: OrderFingerprint, cfg: PipelineConfig) -> PipelineState:
  """`saved` (a state of any config of this run) as the state of `cfg` at the same step; itself when
  nothing that determines the order changed. A CheckpointError names a change that cannot go on."""
  old = saved.fingerprint
  if not fingerprint.changes_from(old):
    return saved
  _refuse_special_token_changes(old, fingerprint)
  groups = _classify(old, fingerprint, cfg)
  old_names, new_names = list(old.datasets), list(cfg.names)
  stream = saved.stream
  cursors = dict(stream.datasets)
  unit_changed = stream.unit != cfg.mixture.unit
  datasets = tuple(
    (n, dataclasses.replace(cursors[n], taken=0) if unit_changed else cursors[n])
    if n in groups["kept"]
    else (n, CursorState(0, 0, 0))
    for n in new_names
  )
  # The exact interleave starts a segment at S with zero deficits: its bound holds counted from S. (The
  # stream's first `begin` replaces these placeholder weights by the config's, carrying the zeros.)
  units = stream.tokens if cfg.mixture.unit == "tokens" else stream.emitted
  taken = [cursor.taken for _, cursor in datasets]
  zeros = [0] * len(new_names)
  segment = Segment(max(stream.next_step, saved.step), units, 1, [1] + zeros[1:], zeros, taken)
  seq_len = cfg.packing.seq_len_at(saved.step)
  try:
    pairs = cfg.packing.pairs is not None
    carry, dropped = _carry(saved.carry.text, old_names, groups["kept"], new_names, seq_len, pairs)
  except CheckpointError:
    raise
  except (KeyError, TypeError, ValueError) as e:  # Pieces' own errors name the carry
    raise CheckpointError(f"pipeline state: {e}") from e
  change = _change(saved.step, old, fingerprint, groups, dropped)
  new_stream = dataclasses.replace(
    stream,
    unit=cfg.mixture.unit,
    interleave=cfg.mixture.interleave,
    datasets=datasets,
    segment=segment if cfg.mixture.interleave == "exact" else None,
    updates=MixtureUpdates(tuple(new_names)),
    ended=False,
    changes=(*stream.changes, change),
  )
  tokens = saved.tokens_per_source
  return PipelineState(
    saved.step,
    fingerprint,
    new_stream,
    PackerState(False, Carry.of_text(carry)),
    {n: int(tokens.get(n, 0)) if n in groups["kept"] else 0 for n in new_names},
  )
