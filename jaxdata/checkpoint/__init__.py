"""Stage 5: the iterator state, its fingerprint, and Orbax checkpointing.

`state` (`PipelineState`: the versioned state, typed all the way down, decoded and checked once),
`fingerprint` (what determines the order, compared on restore) and `orbax`
(`Save` / `Restore` args and the handler, for one `CheckpointManager.save`
next to the model)::

    manager.save(step, args=ocp.args.Composite(
        model=ocp.args.StandardSave(params), data=jaxdata.checkpoint.Save(pipe)))

Orbax is imported only when `Save`, `Restore` or the handler is first used.
"""

from jaxdata._lazy import lazy_exports
from jaxdata.checkpoint.fingerprint import OrderFingerprint, describe_changes, order_fingerprint
from jaxdata.checkpoint.state import STATE_VERSION, PipelineState, seal, state_digest

__all__ = [
  "Checkpointable",
  "OrderFingerprint",
  "PipelineCheckpointHandler",
  "PipelineState",
  "Restore",
  "STATE_FILE",
  "STATE_VERSION",
  "Save",
  "describe_changes",
  "order_fingerprint",
  "seal",
  "state_digest",
]

_ORBAX = "jaxdata.checkpoint.orbax"
__getattr__, __dir__ = lazy_exports(
  __name__,
  {name: _ORBAX for name in ("Checkpointable", "PipelineCheckpointHandler", "Restore", "STATE_FILE", "Save")},
  package_globals=globals(),
)
