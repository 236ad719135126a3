"""`StepPlanner`: the plan of every step, from metadata alone, in order.

The one place where steps are planned: the stream of documents, the packer
and the step counter, with their state. `Pipeline`, `pieces_for_hosts`,
`jaxdata audit` and `jaxdata mesh` all plan through it::

    DocumentStream --take(step)--> Packer.plan(step) --> StepPlan     (the same on every host)
    state = {"step", "stream", "packer"}                              (restores the same next plans)

>>> from jaxdata.config import PipelineConfig
>>> from jaxdata.mixture import DatasetMeta
>>> cfg = PipelineConfig.from_dict({"datasets": [{"name": "a"}], "mixture": {"weights": {"a": 1}},
...     "packing": {"seq_len": 4}, "batch": {"global_batch_size": 2, "drop_remainder": False}})
>>> planner = StepPlanner(cfg, {"a": DatasetMeta.from_lengths([3, 5, 2, 4])})
>>> [(plan.step, plan.tokens) for plan in planner.plans()]
[(0, 8), (1, 6)]
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from jaxdata.config.pipeline_config import PipelineConfig
from jaxdata.config.validate import is_int
from jaxdata.mixture.stream import DatasetMeta, DocumentStream, load_metadata
from jaxdata.mixture.stream_state import StreamState
from jaxdata.mixture.updates import MixtureUpdates
from jaxdata.transforms.packer_state import PackerState
from jaxdata.transforms.packing import Packer, StepPlan
from jaxdata.transforms.pieces import Pieces

__all__ = ["StepPlanner", "check_host_count", "host_row_blocks", "pieces_for_hosts"]


class StepPlanner:
  """Plans steps 0, 1, 2, ... of a config from dataset metadata.

  Args:
    cfg: the pipeline config.
    metadata: per dataset name, its `DatasetMeta`; None loads it from the
      datasets' directories (manifests and lengths indices only).
    epoch: start every dataset at pass `epoch` of its keyed order.

  Raises:
    ConfigError, DatasetError: as `DocumentStream` (a dataset that cannot be opened is named).

  `plan()` returns the next step's `StepPlan` (rows, the pieces and where
  they go) or None at the stream's end; `plans(n)` up to n of them;
  `get_state()` / `set_state()` round-trip through JSON.

  >>> import os, tempfile
  >>> from jaxdata import PipelineConfig, from_iterable
  >>> root = tempfile.mkdtemp()
  >>> _ = from_iterable([[1] * 5, [2] * 7, [3] * 3], out=os.path.join(root, "a"))
  >>> cfg = PipelineConfig.from_dict({"datasets": [{"name": "a", "path": os.path.join(root, "a")}],
  ...                                 "mixture": {"weights": {"a": 1}}, "packing": {"seq_len": 4},
  ...                                 "batch": {"global_batch_size": 2}, "exhausted_policy": "repeat"})
  >>> [(plan.step, plan.rows, int(plan.pieces.length.sum())) for plan in StepPlanner(cfg).plans(2)]
  [(0, 2, 8), (1, 2, 7)]
  """

  def __init__(self, cfg: PipelineConfig, metadata: Mapping[str, DatasetMeta] | None = None, epoch: int = 0) -> None:
    self.cfg = cfg
    metas = load_metadata(cfg) if metadata is None else metadata
    self.stream = DocumentStream(cfg, metas, epoch)
    self.packer = Packer(cfg, self.stream, [metas[name].image_amounts for name in cfg.names])
    self.step = 0  # the next step to plan
    # Mixture updates from another thread, without waiting for a step being planned: `adopt_updates`
    # leaves them in `mailbox`, and each plan first publishes `reserved` (no document of that step or
    # later is drawn by the plans begun so far), then takes the mailbox's updates if still in time.
    self.reserved = 0
    self.mailbox: tuple[MixtureUpdates, int] | None = None

  @property
  def done(self) -> bool:
    return self.packer.done

  @property
  def draw_reach(self) -> int:
    """Steps past the one planned whose documents a plan may draw (group_by_length M: M - 1)."""
    return self.packer.strategy.draw_reach

  def steps_before(self, horizon: int | None) -> int | None:
    """How many steps may be planned while no document of step `horizon` or later is drawn (None: no bound)."""
    return None if horizon is None else max(0, horizon - self.draw_reach - self.step)

  def plan(self) -> StepPlan | None:
    """The next step's plan, or None once the stream has ended."""
    self.reserved = max(self.reserved, self.stream.next_step, self.step + 1 + self.draw_reach)
    if self.mailbox is not None:
      (updates, at_step), self.mailbox = self.mailbox, None
      if self.step <= at_step and self.stream.next_step <= at_step:  # else refused: the pipeline replans
        self.stream.updates = updates
    plan = self.packer.plan(self.step)
    if plan is not None:
      self.step += 1
    return plan

  @property
  def latest_updates(self) -> MixtureUpdates:
    """The mixture updates the next plan uses: those in the mailbox, else the stream's."""
    mailbox = self.mailbox
    return mailbox[0] if mailbox is not None else self.stream.updates

  def adopt_updates(self, updates: MixtureUpdates, at_step: int) -> bool:
    """Plans every later step with `updates` (the last of them new, from `at_step` on) if no document
    of `at_step` or later is drawn or being drawn: the steps planned so far are then exactly those
    the updates give. Never waits for a step being planned. False: too late (replan from a state).

    The updates go to the mailbox before `reserved` is read: a plan that published its reservation
    after that read takes them; every plan before it drew only below `reserved`::

        caller:   mailbox = (u, s)   r = reserved   ->  in time iff s >= r
        planner:  reserved = step + 1 + reach  ->  take the mailbox  ->  plan the step
    """
    self.mailbox = (updates, at_step)
    return at_step >= max(self.reserved, self.stream.next_step, self.step)

  def plans(self, limit: int | None = None) -> Iterator[StepPlan]:
    """The next plans, at most `limit` of them, until the stream ends."""
    count = 0
    while limit is None or count < limit:
      plan = self.plan()
      if plan is None:
        return
      count += 1
      yield plan

  def plan_at(self, step: int) -> StepPlan:
    """The plan of `step` (>= the next step), planning every step before it."""
    if step < self.step:
      raise ValueError(f"step: {step} is already planned (the next step is {self.step})")
    for plan in self.plans():
      if plan.step == step:
        return plan
    raise ValueError(f"step: the stream ends before step {step}")

  def get_state(self) -> dict[str, Any]:
    """{"step", "stream", "packer"} as JSON (a `PipelineState` holds the same, typed)."""
    return {"step": self.step, "stream": self.stream.get_state(), "packer": self.packer.get_state()}

  def set_state(self, state: Mapping[str, Any]) -> None:
    """Restores `get_state()`; on a ValueError the planner is left as it was."""
    step = state.get("step")
    if not is_int(step) or step < 0:
      raise ValueError(f"step must be an int >= 0, got {step!r}")
    self.restore(
      step, StreamState.from_json(state.get("stream"), self.stream.names), PackerState.from_json(state.get("packer"))
    )

  def restore(self, step: int, stream: StreamState, packer: PackerState) -> None:
    """Continues at `step` from the stream's and packer's states; on a ValueError the planner is left as
    it was."""
    previous = self.stream.state(), self.packer.state()
    try:
      self.stream.restore(stream)
      self.packer.restore(packer)
    except ValueError:
      self.stream.restore(previous[0])
      self.packer.restore(previous[1])
      raise
    self.step = step
    self.reserved, self.mailbox = self.stream.next_step, None


def pieces_for_hosts(
  cfg: PipelineConfig,
  step: int,
  num_hosts: int,
  metadata: Mapping[str, DatasetMeta] | None = None,
) -> list[Pieces]:
  """The document pieces each of `num_hosts` hosts reads at `step`, from metadata alone.

  Args:
    cfg: the pipeline config.
    step: the step to look at (replayed from step 0; no token is read).
    num_hosts: hosts splitting the rows evenly and in order (`host_row_blocks`).
    metadata: per dataset name, its `DatasetMeta`; None reads the datasets'
      manifests and lengths indices.

  Returns:
    One `Pieces` per host: dataset, pass, record, offset and length of
    every piece its rows hold.

  Raises:
    ValueError: `num_hosts` does not divide the step's rows.

  >>> import os, tempfile
  >>> from jaxdata import PipelineConfig, from_iterable
  >>> root = tempfile.mkdtemp()
  >>> _ = from_iterable([[1] * 5, [2] * 7, [3] * 3, [4] * 9], out=os.path.join(root, "a"))
  >>> cfg = PipelineConfig.from_dict({"datasets": [{"name": "a", "path": os.path.join(root, "a")}],
  ...                                 "mixture": {"weights": {"a": 1}}, "packing": {"seq_len": 8},
  ...                                 "batch": {"global_batch_size": 2}, "exhausted_policy": "repeat"})
  >>> [int(p.length.sum()) for p in pieces_for_hosts(cfg, step=0, num_hosts=2)]
  [8, 8]
  """
  plan = StepPlanner(cfg, metadata).plan_at(step)
  return [plan.pieces.take(plan.in_rows(rows)) for rows in host_row_blocks(plan.rows, num_hosts)]


def check_host_count(cfg: PipelineConfig, num_hosts: Any) -> None:
  """Before any planning: `num_hosts` must be an int >= 1 dividing the rows of every step shape of the run."""
  if isinstance(num_hosts, bool) or not isinstance(num_hosts, int) or num_hosts < 1:
    raise ValueError(f"num_hosts: expected an int >= 1, got {num_hosts!r}")
  rows = sorted({r for r, _ in cfg.row_shapes()})
  bad = [r for r in rows if r % num_hosts]
  if bad:
    raise ValueError(
      f"num_hosts: {num_hosts} hosts cannot split the {bad[0]} rows of a step evenly (steps of this "
      f"config have {', '.join(map(str, rows))} rows); use a host count that divides them"
    )


def host_row_blocks(rows: int, num_hosts: int) -> list[np.ndarray]:
  """Rows per host when `num_hosts` hosts split the data axis evenly, in order
  (the usual layout; used to plan and audit for a host count without a mesh)."""
  if num_hosts < 1 or rows % num_hosts:
    raise ValueError(f"num_hosts: {num_hosts} must be >= 1 and divide the {rows} rows")
  return list(np.arange(rows).reshape(num_hosts, rows // num_hosts))
