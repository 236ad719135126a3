"""The worker messages: each kind's JSON is the wire format it always was, and reads back as itself."""

from __future__ import annotations

import json
import pathlib

import pytest

import jaxdata
from jaxdata import WorkerStartError, errors
from jaxdata.checkpoint.state import PipelineState
from jaxdata.cli import main, planning
from jaxdata.pipeline.messages import (
  Credit,
  Free,
  Ready,
  Setup,
  SpanPlanned,
  SpanToRead,
  Start,
  StepMade,
  Stop,
  WorkerError,
  message_from_json,
)
from jaxdata.pipeline.step_stats import StepStats
from jaxdata.pipeline.worker_handle import raised
from jaxdata.tools import bench as bench_module

# A state and a step's stats as the pipe carries them (a saved state; the stats file's fields).
STATE = PipelineState.from_json(
  json.loads(
    json.loads((pathlib.Path(__file__).parent / "support" / "states_before_typed.json").read_text())["states"][3]
  )
)
STATS = StepStats(
  step=3,
  tokens_per_source={"d0": 40, "d1": 24},
  target_share={"d0": 0.5, "d1": 0.5},
  share_batch={"d0": 0.625, "d1": 0.375},
  padding_fraction=0.0,
)

# Each message and the JSON object that went over the pipe for it before the messages were typed
# (a state and stats are their own JSON; an error also carries the worker's traceback now).
WIRE = [
  (Start(2, STATE), {"kind": "start", "generation": 2, "state": STATE.to_json()}),
  (Start(2), {"kind": "start", "generation": 2}),
  (Credit(1), {"kind": "credit", "generation": 1}),
  (
    SpanPlanned(1, [{"step": 0}], [STATE], [STATS], False),
    {
      "kind": "span",
      "generation": 1,
      "steps": [{"step": 0}],
      "states": [STATE.to_json()],
      "stats": [STATS.to_json()],
      "ended": False,
    },
  ),
  (SpanToRead(1, [{"step": 0}]), {"kind": "span", "generation": 1, "steps": [{"step": 0}]}),
  (Free(4, 3), {"kind": "free", "generation": 4, "slot": 3}),
  (StepMade(4, 9, 0, {"read": 0.5}), {"kind": "step", "generation": 4, "step": 9, "slot": 0, "time_s": {"read": 0.5}}),
  (Stop(), {"kind": "stop"}),
  (Ready(STATE.fingerprint), {"kind": "ready", "fingerprint": STATE.fingerprint.to_json()}),
  (
    WorkerError(-1, "DatasetError", "x: gone", "Traceback ..."),
    {"kind": "error", "generation": -1, "type": "DatasetError", "message": "x: gone", "trace": "Traceback ..."},
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


def test_an_error_message_carries_the_errors_type_text_and_traceback():
  try:
    {}["k"]
  except KeyError as error:
    message = WorkerError.of(error, 3)
  assert (message.generation, message.type, message.message) == (3, "KeyError", "'k'")
  assert "Traceback" in message.trace and "in test_an_error_message_carries" in message.trace
  raised_here = raised(message)
  assert isinstance(raised_here, KeyError) and "in the worker process:" in raised_here.__notes__[0]


def test_every_error_jaxdata_defines_is_a_jaxdata_error_and_keeps_its_builtin_base():
  kinds = [
    v for v in vars(errors).values() if isinstance(v, type) and issubclass(v, Exception) and v is not errors.Error
  ]
  assert len(kinds) >= 6 and all(issubclass(kind, jaxdata.Error) for kind in kinds)
  assert issubclass(jaxdata.DatasetError, ValueError) and issubclass(jaxdata.WorkerStartError, RuntimeError)


def test_the_cli_prints_a_jaxdata_error_as_one_line(monkeypatch, capsys):
  def fails(*_args, **_kwargs):
    raise WorkerStartError("jaxdata planner (pid 7) exited with code 1 before it was ready, 3 times in a row")

  monkeypatch.setattr(planning, "loaded_config", lambda path: path)  # the CLI's printing is under test
  monkeypatch.setattr(bench_module, "bench", fails)
  assert main(["--quiet", "bench", "pipeline.yaml"]) == 1
  err = capsys.readouterr().err
  assert err.count("\n") == 1 and "jaxdata bench: error: jaxdata planner (pid 7) exited" in err
