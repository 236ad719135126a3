"""Orbax checkpointing of a `Pipeline`, next to the model, in one call.

    manager = ocp.CheckpointManager(directory)
    manager.save(step, args=ocp.args.Composite(
        model=ocp.args.StandardSave(params), data=jaxdata.checkpoint.Save(pipe)))
    ...
    manager.restore(step, args=ocp.args.Composite(
        model=ocp.args.StandardRestore(abstract_params), data=jaxdata.checkpoint.Restore(pipe)))

`Save(pipe)` captures `pipe.get_state()` when it is built, i.e. when
`save()` is called, so async checkpointing never sees later batches. The
state is the same on every host: the primary host writes one JSON file,
every process reads it on restore, whatever the number of processes then.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any, Protocol, cast, runtime_checkable

import orbax.checkpoint as ocp
from etils import epath

from jaxdata.errors import CheckpointError

__all__ = ["Checkpointable", "PipelineCheckpointHandler", "Restore", "STATE_FILE", "Save"]

STATE_FILE = "jaxdata_pipeline_state.json"


class Checkpointable(Protocol):
  """What the handler saves and restores: a `jaxdata.Pipeline` is one."""

  def get_state(self) -> dict[str, Any]: ...

  def set_state(self, state: Mapping[str, Any]) -> None: ...


class Reconfigurable(Protocol):
  """A checkpointable that can continue a state saved under another config (`jaxdata.Pipeline`)."""

  def set_state(self, state: Mapping[str, Any], reconfigure: bool = False) -> None: ...


@runtime_checkable
class AgreesAcrossHosts(Protocol):
  """A checkpointable whose hosts can check that they made the same calls (`Pipeline.check_hosts_agree`)."""

  def check_hosts_agree(self) -> None: ...


class PipelineCheckpointHandler(ocp.JsonCheckpointHandler):
  """Writes the pipeline state as one JSON file (primary host only, async-safe)."""

  def __init__(self, filename: str = STATE_FILE, **kwargs: Any) -> None:
    super().__init__(filename, **kwargs)
    self._state_file = filename

  async def async_save(self, directory: epath.Path, item: Any = None, args: Any = None) -> Any:
    save = args if args is not None else item
    if not isinstance(save, Save):
      raise TypeError(f"PipelineCheckpointHandler saves jaxdata.checkpoint.Save args, got {type(save).__name__}")
    return await super().async_save(directory, args=ocp.args.JsonSave(save.state))

  def restore(self, directory: epath.Path, item: Any = None, args: Any = None) -> dict[str, Any]:
    restore = args if args is not None else item
    path = epath.Path(directory) / self._state_file
    if not path.exists():
      raise CheckpointError(f"{path}: no jaxdata pipeline state in this checkpoint")
    try:
      state = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
      raise CheckpointError(f"{path}: pipeline state is not valid JSON (corrupt or truncated?): {e}") from e
    if not isinstance(restore, Restore) or restore.pipeline is None:
      # manager.restore(step) without args: Orbax builds Restore() itself, and a state restored into no
      # pipeline would look like a resume that did not happen
      raise CheckpointError(
        f"{path}: a jaxdata pipeline state, restored into no pipeline: pass the pipeline to continue, "
        "manager.restore(step, args=ocp.args.Composite(..., data=jaxdata.checkpoint.Restore(pipe))) "
        "(the state itself is the JSON file named here)"
      )
    try:
      if restore.reconfigure:
        reconfigurable = cast(Reconfigurable, restore.pipeline)
        reconfigurable.set_state(state, reconfigure=True)
      else:
        restore.pipeline.set_state(state)
    except CheckpointError as e:
      raise CheckpointError(f"{path}: {e}") from e
    return state


@ocp.args.register_with_handler(PipelineCheckpointHandler, for_save=True)
@dataclasses.dataclass
class Save(ocp.args.CheckpointArgs):
  """Orbax args saving `pipeline`'s state as of the moment this is built."""

  pipeline: Checkpointable
  state: dict[str, Any] = dataclasses.field(init=False)

  def __post_init__(self) -> None:
    # Built on every host (an Orbax save is): the hosts' mixture updates are compared here too.
    if isinstance(self.pipeline, AgreesAcrossHosts):
      self.pipeline.check_hosts_agree()
    self.state = self.pipeline.get_state()


@ocp.args.register_with_handler(PipelineCheckpointHandler, for_restore=True)
@dataclasses.dataclass
class Restore(ocp.args.CheckpointArgs):
  """Orbax args restoring the saved state into `pipeline` (required: without one, the restore is a
  `CheckpointError` saying what to pass; the default exists because Orbax builds these args itself)."""

  pipeline: Checkpointable | None = None
  # True: a state saved under another config of the run continues under the pipeline's (Pipeline.set_state)
  reconfigure: bool = False
