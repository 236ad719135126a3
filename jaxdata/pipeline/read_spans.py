"""Read spans: consecutive steps planned (`plan_span`), read together (`read_span`), then assembled.

The in-process producer runs the three stages in one thread; with worker
processes, a planning process runs the first and sends each span to a
reading process, which runs the other two::

    plan_span:    plan s .. s+k until the span holds `tokens` of this host's rows
                  -> [HostStep] (the pieces in this host's rows, where they go) + state and stats per step
    encode_span / decode_span: the HostSteps as a JSON header and one binary array (no pickle)
    read_span:    every document of the span's pieces, one batched read per dataset
                  -> [ReadStep] sharing one padded token buffer
    assemble:     ReadStep -> int32 [local rows, seq_len] arrays

A step's batch is a pure function of its HostStep: nothing depends on the
span's size or on which process reads it.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from jaxdata.checkpoint.state import PipelineState
from jaxdata.config.layout import StepLayout
from jaxdata.config.packing_config import PackingConfig
from jaxdata.pipeline.planner import StepPlanner
from jaxdata.pipeline.reader import Boundaries, DocumentReader
from jaxdata.pipeline.stats import StatsRecorder
from jaxdata.pipeline.step_stats import StepStats
from jaxdata.sources.image_records import ImageEntry
from jaxdata.transforms.assemble import (
  DocumentTokens,
  RowPlacement,
  assemble_rows,
  follow_boundaries,
  padded_buffer,
)
from jaxdata.transforms.image_rows import assemble_images
from jaxdata.transforms.pairs import PairRecords, assemble_pairs
from jaxdata.transforms.pieces import Pieces

__all__ = [
  "HostStep",
  "MAX_SPAN_STEPS",
  "StepSpan",
  "READ_AHEAD",
  "ReadStep",
  "RowsHere",
  "assemble",
  "decode_span",
  "encode_span",
  "plan_span",
  "read_span",
]

MAX_SPAN_STEPS = 64
READ_AHEAD = 1 << 22  # the default read span: tokens of this host's rows, in process or in each reader
# Image-text rows: a span is one step. Decoding their images is most of a step's work, and spans go to the
# reader processes in turn: with spans of one step every reader decodes a step while the others decode theirs
# (a span of 4M tokens would give one reader 64 steps of images while the rest wait).
IMAGE_SPAN_STEPS = 1

RowsHere = Callable[[int, int], np.ndarray]  # (rows, seq_len) -> sorted global rows this host holds

_COLUMNS = ("dataset", "pass_index", "record", "offset", "length", "doc_length")  # Pieces' fields


@dataclasses.dataclass(frozen=True)
class HostStep:
  """What this host assembles of one step: its pieces and where they go."""

  step: int
  seq_len: int
  num_rows: int  # rows this host holds
  pieces: Pieces
  host_row: np.ndarray  # in [0, num_rows)
  column: np.ndarray


@dataclasses.dataclass
class StepSpan:
  """Consecutive steps, each with the pipeline state after it and its stats."""

  steps: list[HostStep]
  states: list[PipelineState]
  stats: list[StepStats]
  ended: bool  # the stream ends after these steps
  wire: tuple[list[dict[str, int]], bytes] | None = None  # `encode_span(steps)`, where it came so


@dataclasses.dataclass(frozen=True)
class ReadStep:
  """A HostStep whose documents are read (the span's buffer is shared)."""

  host: HostStep
  buffer: np.ndarray  # see `padded_buffer`
  doc_start: np.ndarray  # per piece
  boundaries: Boundaries  # document starts inside span pieces (piece index in this step, offset)
  trained: np.ndarray | None = None  # the masks laid out as `buffer` (uint8), where a dataset has them
  doc_length: np.ndarray | None = None  # per piece: its document's ids (as read)
  values: Mapping[str, np.ndarray] = dataclasses.field(default_factory=dict)  # per piece: its record's columns read
  images: Sequence[list[ImageEntry]] | None = None  # per piece: its record's images as stored (image-text datasets)


def plan_span(
  planner: StepPlanner,
  recorder: StatsRecorder,
  rows_here: RowsHere,
  tokens: int,
  snapshot: Callable[[], PipelineState],
  max_steps: int = MAX_SPAN_STEPS,
) -> StepSpan:
  """Plans steps until they hold `tokens` of this host's rows (at least one
  step, at most `max_steps` and MAX_SPAN_STEPS) or the stream ends."""
  started = time.perf_counter()
  span = StepSpan([], [], [], False)
  host_tokens = 0
  limit = max(1, min(max_steps, MAX_SPAN_STEPS, IMAGE_SPAN_STEPS if planner.cfg.packing.images else MAX_SPAN_STEPS))
  while host_tokens < tokens and len(span.steps) < limit:
    plan = planner.plan()
    if plan is None:
      break
    span.stats.append(recorder.planned(plan, planner.stream.passes_completed(), planner.stream.taken()))
    rows = rows_here(plan.rows, plan.seq_len)
    index = plan.in_rows(rows)
    span.steps.append(
      HostStep(
        plan.step,
        plan.seq_len,
        rows.size,
        plan.pieces.take(index),
        np.searchsorted(rows, plan.row[index]),
        plan.column[index],
      )
    )
    span.states.append(snapshot())
    host_tokens += rows.size * plan.seq_len
  span.ended = not span.steps or planner.done
  for stats in span.stats:
    recorder.time(stats, "plan", (time.perf_counter() - started) / len(span.steps))
  return span


def encode_span(steps: list[HostStep]) -> tuple[list[dict[str, int]], bytes]:
  """(a JSON-able header per step, every step's pieces as one int64 array's bytes)."""
  header = [{"step": s.step, "seq_len": s.seq_len, "num_rows": s.num_rows, "pieces": len(s.pieces)} for s in steps]
  columns = [np.concatenate([getattr(s.pieces, f) for s in steps] or [np.zeros(0, np.int64)]) for f in _COLUMNS]
  columns += [
    np.concatenate([s.host_row for s in steps] or [np.zeros(0, np.int64)]),
    np.concatenate([s.column for s in steps] or [np.zeros(0, np.int64)]),
  ]
  return header, np.stack(columns).astype(np.int64).tobytes()


def decode_span(header: list[dict[str, int]], payload: bytes) -> list[HostStep]:
  """Inverse of `encode_span`."""
  total = sum(h["pieces"] for h in header)
  columns = np.frombuffer(payload, np.int64).reshape(len(_COLUMNS) + 2, total)
  steps, first = [], 0
  for h in header:
    cut = slice(first, first + h["pieces"])
    pieces = Pieces(*(columns[c, cut] for c in range(len(_COLUMNS))))
    steps.append(HostStep(h["step"], h["seq_len"], h["num_rows"], pieces, columns[-2, cut], columns[-1, cut]))
    first += h["pieces"]
  return steps


def read_span(reader: DocumentReader, steps: list[HostStep], pad_id: int) -> list[ReadStep]:
  """Reads every document of the steps' pieces in one call per dataset."""
  if not steps:
    return []
  pieces = Pieces.concatenate([s.pieces for s in steps])
  read = reader.read_with_masks(range(steps[0].step, steps[-1].step + 1), pieces)
  inner_piece, inner_offset = read.boundaries
  values = reader.column_values(pieces)
  seq_len = max(s.seq_len for s in steps)
  buffer = padded_buffer(read.parts, seq_len, pad_id)
  trained = padded_buffer(read.masks, seq_len, 0) if read.masks is not None else None
  out, first = [], 0
  for s in steps:
    mine = slice(first, first + len(s.pieces))
    here = (inner_piece >= first) & (inner_piece < first + len(s.pieces))
    out.append(
      ReadStep(
        s,
        buffer,
        read.doc_start[mine],
        (inner_piece[here] - first, inner_offset[here]),
        trained,
        read.doc_length[mine],
        {name: v[mine] for name, v in values.items()},
        read.images[mine] if read.images is not None else None,
      )
    )
    first += len(s.pieces)
  return out


def assemble(
  item: ReadStep, packing: PackingConfig, layout: StepLayout, out: dict[str, np.ndarray] | None = None
) -> dict[str, np.ndarray]:
  """The step's arrays of `layout` for its local rows (written into `out` if given): the packing's
  features, then each extra feature made by its own function from them."""
  s = item.host
  if packing.pairs is not None:
    if item.trained is None or item.doc_length is None:
      raise ValueError("assemble: preference pairs need their records' marks and lengths")
    if out is None:
      out = layout.arrays(s.num_rows, s.seq_len)
    records = PairRecords(item.buffer, item.trained, item.doc_start, item.doc_length, item.values)
    batch = assemble_pairs(s.pieces, s.host_row, s.column, records, packing.pairs, packing.fill_id, out=out)
  else:
    placement = RowPlacement(s.pieces, s.host_row, s.column, s.num_rows, s.seq_len)
    batch = assemble_rows(placement, DocumentTokens(item.buffer, item.doc_start, item.trained), packing, out=out)
    if item.boundaries[0].size:
      follow_boundaries(batch, s.pieces, s.host_row, s.column, *item.boundaries, pad_id=packing.fill_id)
    if packing.images is not None:
      missing = [f for f in layout.features if f.name not in batch and not f.assemble]  # the image arrays
      batch.update({f.name: np.empty(f.shape(s.num_rows, s.seq_len), f.numpy_dtype) for f in missing})
      images = item.images if item.images is not None else [[] for _ in range(len(s.pieces))]
      planned = (item.values.get("num_images"), item.values.get("num_patches"))
      assemble_images(batch, s.pieces, s.host_row, s.column, images, packing=packing.images, planned=planned)
  for extra in layout.extras:
    made = np.asarray(extra.maker()(batch, s.pieces, s.host_row, s.column), extra.numpy_dtype)
    if made.shape != extra.shape(s.num_rows, s.seq_len):
      raise ValueError(
        f"batch.extra_features.{extra.name}: {extra.assemble} made {made.shape}, not "
        f"{extra.shape(s.num_rows, s.seq_len)} ([rows, *extent])"
      )
    if out is not None and extra.name in out:
      np.copyto(out[extra.name], made)
      batch[extra.name] = out[extra.name]
    else:
      batch[extra.name] = made
  return batch
