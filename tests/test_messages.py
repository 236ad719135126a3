"""The worker messages: each kind's JSON is the wire format it always was, and reads back as itself."""

from __future__ import annotations

import json

import pytest

from jaxdata.pipeline.messages import (
  Credit,
  Free,
  PlannedSpan,
  Ready,
  Setup,
  SpanToRead,
  Start,
  StepMade,
  Stop,
  WorkerError,
  message_from_json,
)

# Each message and the JSON object that went over the pipe for it before the messages were typed.
WIRE = [
  (Start(2, {"step": 5}), {"kind": "start", "generation": 2, "state": {"step": 5}}),
  (Start(2), {"kind": "start", "generation": 2}),
  (Credit(1), {"kind": "credit", "generation": 1}),
  (
    PlannedSpan(1, [{"step": 0}], [{"step": 1}], [{"tokens": 4}], False),
    {
      "kind": "span",
      "generation": 1,
      "steps": [{"step": 0}],
      "states": [{"step": 1}],
      "stats": [{"tokens": 4}],
      "ended": False,
    },
  ),
  (SpanToRead(1, [{"step": 0}]), {"kind": "span", "generation": 1, "steps": [{"step": 0}]}),
  (Free(4, 3), {"kind": "free", "generation": 4, "slot": 3}),
  (StepMade(4, 9, 0, {"read": 0.5}), {"kind": "step", "generation": 4, "step": 9, "slot": 0, "time_s": {"read": 0.5}}),
  (Stop(), {"kind": "stop"}),
  (Ready({"shuffle": {}}), {"kind": "ready", "fingerprint": {"shuffle": {}}}),
  (
    WorkerError(-1, "DatasetError", "x: gone"),
    {"kind": "error", "generation": -1, "type": "DatasetError", "message": "x: gone"},
  ),
]


@pytest.mark.parametrize("message, wire", WIRE, ids=[type(m).__name__ for m, _ in WIRE])
def test_each_message_is_its_old_json_and_reads_back_as_itself(message, wire):
  assert message.to_json() == wire
  assert message_from_json(json.loads(json.dumps(wire))) == message


def test_an_unknown_kind_or_a_message_jaxdata_never_sends_is_refused():
  with pytest.raises(ValueError, match="unknown kind 'hello'"):
    message_from_json({"kind": "hello"})
  with pytest.raises(ValueError, match="a 'free' message with fields \\['generation'\\] is not one jaxdata sends"):
    message_from_json({"kind": "free", "generation": 1})
  with pytest.raises(ValueError, match="expected the keys pipeline and worker"):
    Setup.from_json({"pipeline": {}})
  assert Setup.from_json(Setup({"cfg": 1}, {"role": "reader"}).to_json()) == Setup({"cfg": 1}, {"role": "reader"})


def test_an_error_message_carries_the_errors_type_and_text():
  assert WorkerError.of(KeyError("k"), 3) == WorkerError(3, "KeyError", "'k'")
