"""`PipelineState`: one typed form, whose JSON is byte for byte what the untyped dict was.

Fixtures: tests/support/states_0_3_0.json holds the `get_state()` text jaxdata 0.3.0 saved at
steps 0-6 of a small run (a mixture update at step 3); tests/support/states_before_typed.json the
same run's states saved by the last commit before the state was typed (the datasets' writer has
changed since 0.3.0, so their content fingerprints differ from 0.3.0's).
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import re
import typing

import pytest

from jaxdata import CheckpointError, Pipeline
from jaxdata.checkpoint.fingerprint import OrderFingerprint
from jaxdata.checkpoint.state import PipelineState, seal
from jaxdata.mixture.changes import ConfigChange
from jaxdata.mixture.interleave import Segment
from jaxdata.mixture.stream_state import CursorState, StreamState
from jaxdata.mixture.updates import MixtureUpdates
from jaxdata.pipeline.execution import StepMaking
from jaxdata.pipeline.messages import SpanPlanned, Start, message_from_json
from jaxdata.pipeline.step_stats import StepStats
from jaxdata.transforms.packer_state import Carry, PackerState
from pipeline_fixtures import coded_config

SUPPORT = pathlib.Path(__file__).parent / "support"


def saved(name: str) -> list[str]:
  return json.loads((SUPPORT / name).read_text())["states"]


def run_states(cfg, **kwargs) -> list[str]:
  """The run the fixtures saved: get_state() text before each of 7 steps, an update at step 3."""
  states = []
  with Pipeline(cfg, **kwargs) as pipe:
    for step in range(7):
      if step == 2:
        pipe.update_mixture({"d0": 0.25, "d1": 0.75}, at_step=3)
      states.append(json.dumps(pipe.get_state()))
      next(pipe)
  return states


@pytest.fixture(scope="module")
def cfg(tmp_path_factory):
  root = tmp_path_factory.mktemp("states")
  return coded_config(root, [[5, 9, 3, 7, 30] * 8, [4, 6, 8, 21] * 10], seed=3, exhausted_policy="repeat")


@pytest.mark.parametrize("name", ["states_0_3_0.json", "states_before_typed.json"])
def test_a_saved_state_reads_into_the_type_and_writes_back_the_same_bytes(name):
  texts = saved(name)
  assert len(texts) == 7
  for text in texts:
    state = PipelineState.from_json(json.loads(text))
    assert json.dumps(seal(state.to_json())) == text
  updated = PipelineState.from_json(json.loads(texts[3]))
  assert updated.updates.to_json() and updated.updates.to_json()[-1]["step"] == 3  # the update is typed


def test_the_pipeline_saves_the_states_it_saved_before_they_were_typed(cfg):
  assert run_states(cfg, prefetch=0) == saved("states_before_typed.json")
  assert run_states(cfg, prefetch=2) == saved("states_before_typed.json")


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.parametrize("making", [StepMaking("process"), StepMaking("process", reader_processes=1)])
def test_states_from_a_planner_process_are_the_same_bytes(cfg, making):
  assert run_states(cfg, prefetch=2, making=making) == saved("states_before_typed.json")


def test_a_state_crosses_the_pipe_as_its_json_and_comes_back_equal(cfg):
  with Pipeline(cfg, prefetch=0) as pipe:
    next(pipe)
    stats = StepStats.from_json(pipe.stats())
  state = PipelineState.from_json(json.loads(saved("states_before_typed.json")[4]))
  start = Start(3, state, horizon=9)
  wire = json.loads(json.dumps(start.to_json()))
  assert wire["state"] == state.to_json()  # the JSON the untyped dict was
  assert message_from_json(wire) == start
  span = SpanPlanned(3, [{"step": 3}], [state], [stats], False)
  back = message_from_json(json.loads(json.dumps(span.to_json())))
  assert back == span and isinstance(back, SpanPlanned) and back.states[0].carry.text == state.carry.text


def test_restoring_a_typed_state_continues_as_restoring_its_json(cfg):
  with Pipeline(cfg, prefetch=0) as pipe:
    for _ in range(3):
      next(pipe)
    text = json.dumps(pipe.get_state())
    expected = [next(pipe)["tokens"].tolist() for _ in range(3)]
  with Pipeline(cfg, prefetch=0) as again:
    again.set_state(PipelineState.from_json(json.loads(text)))
    assert [next(again)["tokens"].tolist() for _ in range(3)] == expected
    assert json.dumps(again.get_state()) != text  # (it moved on)


def _field_types(cls: type, seen: set[type]) -> list[tuple[str, str]]:
  """(where, annotation) of every dataclass field reachable from `cls`, through the state's own types."""
  out = []
  for field in dataclasses.fields(cls):
    hint = typing.get_type_hints(cls)[field.name]
    out.append((f"{cls.__name__}.{field.name}", str(hint)))
    for inner in re.findall(r"[A-Za-z_][\w.]*", str(hint)):
      found = STATE_TYPES.get(inner.rsplit(".", 1)[-1])
      if found is not None and found not in seen:
        seen.add(found)
        out += _field_types(found, seen)
  return out


STATE_TYPES = {
  t.__name__: t
  for t in (
    PipelineState,
    OrderFingerprint,
    StreamState,
    CursorState,
    PackerState,
    Carry,
    MixtureUpdates,
    ConfigChange,
    Segment,
  )
}


def test_the_state_is_typed_all_the_way_down():
  fields = _field_types(PipelineState, {PipelineState})
  reached = {where.split(".")[0] for where, _ in fields}
  assert reached == set(STATE_TYPES) - {"PipelineState"} | {"PipelineState"}  # every part was walked
  loose = [(where, hint) for where, hint in fields if "Any" in hint]
  assert not loose, loose


def test_set_state_decodes_a_saved_state_once(cfg, monkeypatch):
  with Pipeline(cfg, prefetch=0) as pipe:
    next(pipe)
    saved = pipe.get_state()
    decodes = []
    for cls in (PipelineState, StreamState, PackerState, OrderFingerprint):
      original = cls.from_json.__func__

      def counted(klass, *args, _original=original, _name=cls.__name__, **kwargs):
        decodes.append(_name)
        return _original(klass, *args, **kwargs)

      monkeypatch.setattr(cls, "from_json", classmethod(counted))
    pipe.set_state(saved)
    assert sorted(decodes) == ["OrderFingerprint", "PackerState", "PipelineState", "StreamState"]
    decodes.clear()
    pipe.set_state(saved, reconfigure=True)  # (nothing changed: the same one decode)
    assert len(decodes) == 4


@pytest.mark.parametrize(
  ("edit", "message"),
  [
    (lambda s: s["fingerprint"].update(extra=1), r"fingerprint\.extra is no field of a fingerprint"),
    (lambda s: s["fingerprint"].update(seed="3"), r"fingerprint\.seed must be int"),
    (lambda s: s["fingerprint"].update(datasets=[]), r"fingerprint\.datasets must list dataset names"),
    (lambda s: s["stream"].update(segment=None), r"the exact interleave needs a segment for 2 datasets"),
    (lambda s: s["packer"].update(carry=7), r"packer state: expected a mapping with a carry string"),
  ],
)
def test_a_malformed_part_is_refused_naming_it_and_changes_nothing(cfg, edit, message):
  with Pipeline(cfg, prefetch=0) as pipe:
    next(pipe)
    good = pipe.get_state()
    state = json.loads(json.dumps(good))
    edit(state)
    with pytest.raises(CheckpointError, match=message):
      pipe.set_state(seal({k: v for k, v in state.items() if k != "digest"}))
    assert pipe.get_state() == good
