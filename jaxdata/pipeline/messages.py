"""The messages between a pipeline and its worker processes: one frozen dataclass per kind.

On the pipe each is one JSON object whose "kind" names it (a span's pieces
follow its header as raw bytes); `to_json` writes it and `message_from_json`
reads any of them back, refusing an unknown kind or a missing field::

    main -> planner  Start(g, state, horizon)  plan on from `state` (no step reaching `horizon`)
                     Credit(g)              a span was handed out: plan one more
                     PlanBefore(g, horizon) plan no step that draws documents of `horizon` or later
                     UpdateMixture(g, update)  plan on with one more update (`MixtureUpdates.to_json_at`)
    planner -> main  SpanPlanned(g, steps, states, stats, ended) + pieces
    main -> reader   Start(g)               drop everything; every slot free
                     SpanToRead(g, steps) + pieces
                     Free(g, slot)          the main process copied the slot out
    reader -> main   StepMade(g, step, slot, time_s)
    main -> either   Stop()
    main -> worker   Setup(pipeline, worker)  first, once: the pipeline's spec and the worker's
    either -> main   Ready(fingerprint)     datasets open
                     WorkerError(g, type, message)

`g`, the generation, counts the (re)starts: a message of an older one is dropped.
States travel as `PipelineState`s and stats as `StepStats`, written as their JSON.
The wire's other shared parts live here too (`WorkerSpec`, `send`, `slot_views`): the
pipeline's side and the worker's body (worker_process.py) import them, never each other.

>>> message_from_json(Free(3, slot=1).to_json())
Free(generation=3, slot=1)
>>> Free(3, slot=1).to_json()
{'kind': 'free', 'generation': 3, 'slot': 1}
"""

from __future__ import annotations

import dataclasses
import json
import traceback
from collections.abc import Mapping
from multiprocessing.connection import Connection
from typing import Any, ClassVar, Final, Literal

import numpy as np

from jaxdata.checkpoint.fingerprint import OrderFingerprint
from jaxdata.checkpoint.state import PipelineState
from jaxdata.config.layout import StepLayout
from jaxdata.mixture.updates import UpdateEntry
from jaxdata.pipeline.step_stats import StepStats

__all__ = [
  "PLANNER",
  "READER",
  "Credit",
  "Free",
  "Message",
  "PlanBefore",
  "Ready",
  "Setup",
  "SpanPlanned",
  "SpanToRead",
  "Start",
  "StepMade",
  "Stop",
  "UpdateMixture",
  "WorkerError",
  "WorkerSpec",
  "message_from_json",
  "send",
  "shape_key",
  "slot_views",
]

Role = Literal["planner", "reader"]
PLANNER: Final[Role] = "planner"
READER: Final[Role] = "reader"


@dataclasses.dataclass(frozen=True)
class WorkerSpec:
  """What one worker needs besides the pipeline's `PipelineSpec`: its role and the host's rows."""

  role: Role
  index: int  # the reader's index (0 for the planner)
  readers: int
  memory_fd: int  # the reader's slot ring, an inherited descriptor (-1 for the planner)
  slots: int
  slot_bytes: int  # the most bytes of this host's rows of any step (`StepLayout.step_bytes`)
  rows_by_shape: dict[str, list[int]]  # the global rows this host holds, per step shape "ROWSxSEQ_LEN"
  read_ahead_tokens: int
  layout: list[dict[str, Any]]  # what a step holds (`StepLayout.to_json`), every feature in a slot

  @property
  def step_layout(self) -> StepLayout:
    return StepLayout.from_json(self.layout)

  def rows_for(self, num_rows: int, seq_len: int) -> np.ndarray:
    """The global rows this host holds in a step of this shape."""
    return np.asarray(self.rows_by_shape[shape_key(num_rows, seq_len)], np.int64)

  @property
  def name(self) -> str:
    """The process's name in errors and `Execution.processes`."""
    return "jaxdata planner" if self.role == PLANNER else f"jaxdata reader {self.index}"

  @property
  def ring_bytes(self) -> int:
    """The size of a reader's slot ring: `slots` steps of every feature."""
    return max(1, self.slots * self.slot_bytes)

  @property
  def spans_ahead(self) -> int:
    """Spans the planner may send before the first is handed out: one
    being handed out, one being read ahead and one waiting, so that the
    next read begins as soon as one ends (sent only when credit came back,
    it began a planning late); with readers, one more per extra reader
    (spans go to the readers in turn)."""
    return max(3, self.readers + 1)


def shape_key(num_rows: int, seq_len: int) -> str:
  """A step shape as `WorkerSpec.rows_by_shape` keys it: "ROWSxSEQ_LEN"."""
  return f"{num_rows}x{seq_len}"


def slot_views(
  buffer: memoryview, slot: int, slot_bytes: int, rows: int, seq_len: int, layout: StepLayout
) -> dict[str, np.ndarray]:
  """The arrays of every feature of `layout` in `slot` of a ring (slots are `slot_bytes` apart)."""
  return layout.views(buffer, slot * slot_bytes, rows, seq_len)


def send(conn: Connection, message: Message | Setup, payload: bytes | None = None) -> None:
  """One JSON message, and if given a raw payload right after it."""
  conn.send_bytes(json.dumps(message.to_json()).encode())
  if payload is not None:
    conn.send_bytes(payload)


@dataclasses.dataclass(frozen=True)
class _Message:
  KIND: ClassVar[str]

  def to_json(self) -> dict[str, Any]:
    return {"kind": self.KIND, **{f.name: getattr(self, f.name) for f in dataclasses.fields(self)}}

  @classmethod
  def from_fields(cls, fields: dict[str, Any]) -> Any:
    """The message of its JSON fields."""
    return cls(**fields)


@dataclasses.dataclass(frozen=True)
class Start(_Message):
  """Drop everything and go on; the planner from `state`, planning no step that reaches `horizon`
  (readers get neither)."""

  KIND: ClassVar[str] = "start"
  generation: int
  state: PipelineState | None = None
  horizon: int | None = None

  def to_json(self) -> dict[str, Any]:
    out = super().to_json()
    if self.state is not None:
      out["state"] = self.state.to_json()
    for name in ("state", "horizon"):  # a reader's start holds only its generation, as it always did
      if out[name] is None:
        del out[name]
    return out

  @classmethod
  def from_fields(cls, fields: dict[str, Any]) -> Start:
    state = fields.get("state")
    return cls(fields["generation"], None if state is None else PipelineState.from_json(state), fields.get("horizon"))


@dataclasses.dataclass(frozen=True)
class Credit(_Message):
  """A span was handed out: the planner may plan one more."""

  KIND: ClassVar[str] = "credit"
  generation: int


@dataclasses.dataclass(frozen=True)
class PlanBefore(_Message):
  """Plan no step that draws documents of step `horizon` or later (None: no bound)."""

  KIND: ClassVar[str] = "plan_before"
  generation: int
  horizon: int | None


@dataclasses.dataclass(frozen=True)
class UpdateMixture(_Message):
  """Plan every later step with one more mixture update (its `MixtureUpdates.to_json_at` entry: its
  step and exact weights); the main process sends it only while no step from its step on can be planned."""

  KIND: ClassVar[str] = "update_mixture"
  generation: int
  update: UpdateEntry


@dataclasses.dataclass(frozen=True)
class SpanPlanned(_Message):
  """The planner's span: its steps' headers, the state and stats after each, whether the stream ended."""

  KIND: ClassVar[str] = "span"
  generation: int
  steps: list[dict[str, Any]]
  states: list[PipelineState]
  stats: list[StepStats]
  ended: bool

  def to_json(self) -> dict[str, Any]:
    out = super().to_json()
    out["states"] = [state.to_json() for state in self.states]
    out["stats"] = [stats.to_json() for stats in self.stats]
    return out

  @classmethod
  def from_fields(cls, fields: dict[str, Any]) -> SpanPlanned:
    return cls(
      fields["generation"],
      fields["steps"],
      [PipelineState.from_json(state) for state in fields["states"]],
      [StepStats.from_json(stats) for stats in fields["stats"]],
      fields["ended"],
    )


@dataclasses.dataclass(frozen=True)
class SpanToRead(_Message):
  """A planned span forwarded to a reader (without the states and stats it does not need)."""

  KIND: ClassVar[str] = "span"
  generation: int
  steps: list[dict[str, Any]]


@dataclasses.dataclass(frozen=True)
class Free(_Message):
  """The main process copied a step out of `slot`: the reader may use it again."""

  KIND: ClassVar[str] = "free"
  generation: int
  slot: int


@dataclasses.dataclass(frozen=True)
class StepMade(_Message):
  """A reader assembled `step` into `slot`, in `time_s` (read, assemble)."""

  KIND: ClassVar[str] = "step"
  generation: int
  step: int
  slot: int
  time_s: dict[str, float]


@dataclasses.dataclass(frozen=True)
class Stop(_Message):
  """Exit."""

  KIND: ClassVar[str] = "stop"


@dataclasses.dataclass(frozen=True)
class Ready(_Message):
  """The worker opened its datasets; `fingerprint` is the order they give (checked by the main process)."""

  KIND: ClassVar[str] = "ready"
  fingerprint: OrderFingerprint

  def to_json(self) -> dict[str, Any]:
    return {"kind": self.KIND, "fingerprint": self.fingerprint.to_json()}

  @classmethod
  def from_fields(cls, fields: dict[str, Any]) -> Ready:
    return cls(OrderFingerprint.from_json(fields["fingerprint"]))


@dataclasses.dataclass(frozen=True)
class WorkerError(_Message):
  """An error in the worker, raised by the main process at the step it belongs to (`type` names its class;
  `trace` is the worker's traceback, as text)."""

  KIND: ClassVar[str] = "error"
  generation: int
  type: str
  message: str
  trace: str = ""

  @classmethod
  def of(cls, error: BaseException, generation: int) -> WorkerError:
    return cls(generation, type(error).__name__, str(error), "".join(traceback.format_exception(error)))


@dataclasses.dataclass(frozen=True)
class Setup:
  """A worker's first message, before any other: the pipeline's spec whole and the worker's own
  (no "kind": it is always first)."""

  pipeline: dict[str, Any]
  worker: dict[str, Any]

  def to_json(self) -> dict[str, Any]:
    return {"pipeline": self.pipeline, "worker": self.worker}

  @classmethod
  def from_json(cls, raw: Mapping[str, Any]) -> Setup:
    if set(raw) != {"pipeline", "worker"}:
      raise ValueError(f"worker setup: expected the keys pipeline and worker, got {sorted(raw)}")
    return cls(dict(raw["pipeline"]), dict(raw["worker"]))


Message = (
  Start | Credit | PlanBefore | UpdateMixture | SpanPlanned | SpanToRead | Free | StepMade | Stop | Ready | WorkerError
)

_KINDS: tuple[type[_Message], ...] = (
  Start,
  Credit,
  PlanBefore,
  UpdateMixture,
  SpanPlanned,
  SpanToRead,
  Free,
  StepMade,
  Stop,
  Ready,
  WorkerError,
)
_BY_KIND = {kind: tuple(c for c in _KINDS if c.KIND == kind) for kind in {c.KIND for c in _KINDS}}


def message_from_json(raw: Mapping[str, Any]) -> Message:
  """The message a JSON object is (a span is a `SpanPlanned` when it holds states, else a `SpanToRead`)."""
  kind = raw.get("kind")
  if kind not in _BY_KIND:
    raise ValueError(f"worker message: unknown kind {kind!r}")
  fields = {k: v for k, v in raw.items() if k != "kind"}
  for cls in _BY_KIND[kind]:  # the first whose fields are exactly the message's
    known = {f.name for f in dataclasses.fields(cls)}
    required = {f.name for f in dataclasses.fields(cls) if f.default is dataclasses.MISSING}
    if required <= set(fields) <= known:
      message: Message = cls.from_fields(fields)
      return message
  raise ValueError(f"worker message: a {kind!r} message with fields {sorted(fields)} is not one jaxdata sends")
