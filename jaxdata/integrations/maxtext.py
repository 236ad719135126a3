"""MaxText: build a pipeline from MaxText's data config keys and hand out MaxText's batch features.

What each MaxText data key does is in `MAXTEXT_KEYS` (`jaxdata.integrations.maxtext_keys`):
every key is honoured, or refused with one line naming it.

Batches carry `inputs`, `inputs_segmentation`, `inputs_position`,
`targets`, `targets_segmentation` and `targets_position`, int32, with the
targets and their segmentation made as MaxText's `ShiftData` makes them
(`shift_data`): the loss MaxText computes on them covers the same tokens.
With `use_dpo`, batches carry what MaxText's `dpo_loss_fn` reads
(`MAXTEXT_DPO_FEATURES`): each row one pair, each side padded to the row.

>>> values = {"grain_train_files": "data/web/*.array_record,0.7;data/code/*.array_record,0.3",
...           "max_target_length": 1024, "global_batch_size_to_load": 64}
>>> [(d.name, d.path) for d in maxtext_config(values, check_paths=False).datasets]
[('web', 'data/web'), ('code', 'data/code')]
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import jax.numpy as jnp
import numpy as np

from jaxdata.integrations.maxtext_files import parse_train_files
from jaxdata.integrations.maxtext_keys import (
  MAXTEXT_KEYS,
  maxtext_config,
  maxtext_pad_id,
  maxtext_sft,
  maxtext_values,
  maxtext_workers,
)
from jaxdata.pipeline.execution import StepMaking
from jaxdata.pipeline.pipeline import Pipeline

__all__ = [
  "MAXTEXT_DPO_FEATURES",
  "MAXTEXT_FEATURES",
  "MAXTEXT_KEYS",
  "MaxTextPipeline",
  "maxtext_batch",
  "maxtext_config",
  "parse_train_files",
  "shift_data",
]

MAXTEXT_FEATURES = (
  "inputs",
  "inputs_segmentation",
  "inputs_position",
  "targets",
  "targets_segmentation",
  "targets_position",
)


MAXTEXT_DPO_FEATURES = (
  "chosen",
  "chosen_segmentation",
  "chosen_position",
  "rejected",
  "rejected_segmentation",
  "rejected_position",
)


def maxtext_dpo_batch(batch: Mapping[str, Any]) -> dict[str, Any]:
  """A batch of pairs in the `parallel` layout under the names MaxText's DPO reads (int32).

  >>> row = {f"{s}_{k}": np.array([[7, 8, 0]]) for s in ("chosen", "rejected") for k in ("tokens", "positions")}
  >>> row |= {"chosen_segment_ids": np.array([[1, 1, 0]]), "rejected_segment_ids": np.array([[1, 1, 0]])}
  >>> maxtext_dpo_batch(row)["chosen_segmentation"].tolist()
  [[1, 1, 0]]
  """
  out = {}
  for side in ("chosen", "rejected"):
    out[side] = batch[f"{side}_tokens"].astype("int32")
    out[f"{side}_segmentation"] = batch[f"{side}_segment_ids"].astype("int32")
    out[f"{side}_position"] = batch[f"{side}_positions"].astype("int32")
  return out


def shift_data(tokens: Any, segment_ids: Any, pad_id: int) -> tuple[Any, Any]:
  """(targets, targets_segmentation) as MaxText's `ShiftData` makes them from packed rows.

  Targets are the row's tokens shifted left by one, `pad_id` at the end (a
  document's last token targets the next document's first, as in MaxText);
  targets_segmentation is the segment id, 0 where the target is padding or
  past the row's end. Padding is marked by position (the next position's
  segment id is 0), never by a token value: a real token whose id equals
  `pad_id` (id 0 is `!` in Llama-3, GPT-2 and Qwen vocabularies) still trains::

      tokens       5 6 7 | 8 9  0 0        segment_ids   1 1 1 2 2 0 0
      targets      6 7 8   9 0  0 0        targets_seg   1 1 1 2 0 0 0

  >>> t, s = shift_data(np.array([[5, 6, 7, 8, 9, 0, 0]]), np.array([[1, 1, 1, 2, 2, 0, 0]]), 0)
  >>> t.tolist(), s.tolist()
  ([[6, 7, 8, 9, 0, 0, 0]], [[1, 1, 1, 2, 0, 0, 0]])
  >>> shift_data(np.array([[5, 0, 7, 0]]), np.array([[1, 1, 1, 0]]), 0)[1].tolist()  # a real token 0 trains
  [[1, 1, 0, 0]]
  """
  xp = np if isinstance(tokens, np.ndarray) else jnp
  targets = xp.concatenate([tokens[:, 1:], xp.full_like(tokens[:, :1], pad_id)], axis=1)
  next_segment = xp.concatenate([segment_ids[:, 1:], xp.zeros_like(segment_ids[:, :1])], axis=1)
  return targets, xp.where(next_segment != 0, segment_ids, 0)


def maxtext_batch(batch: Mapping[str, Any], pad_id: int = 0, completion_only: bool = False) -> dict[str, Any]:
  """A jaxdata batch under MaxText's feature names (NumPy or jax.Array, int32), targets by `shift_data`.

  `completion_only` (MaxText's `use_sft` with `sft_train_on_completion_only`): a target that does not
  train (`loss_mask` 0: a prompt token, padding, the next example) is the pad id and its
  `targets_segmentation` 0, as MaxText's `SFTPromptMasking` masks prompt targets before `ShiftData`.
  """
  tokens = batch["tokens"].astype("int32")
  segment_ids = batch["segment_ids"].astype("int32")
  if completion_only:
    xp = np if isinstance(tokens, np.ndarray) else jnp
    trained = batch["loss_mask"] == 1
    targets = xp.where(trained, batch["targets"].astype("int32"), pad_id)
    targets_segmentation = xp.where(trained, segment_ids, 0)
  else:
    targets, targets_segmentation = shift_data(tokens, segment_ids, pad_id)
  return {
    "inputs": tokens,
    "inputs_segmentation": segment_ids,
    "inputs_position": batch["positions"].astype("int32"),
    "targets": targets,
    "targets_segmentation": targets_segmentation.astype("int32"),
    "targets_position": batch["positions"].astype("int32"),
  }


class MaxTextPipeline:
  """A `Pipeline` built from MaxText values, yielding MaxText batches; its state is the pipeline's.

  Checkpoint it with `jaxdata.checkpoint.Save(maxtext.pipeline)` next to the model.
  """

  def __init__(
    self,
    values: Mapping[str, Any],
    mesh: Any = None,
    data_axes: tuple[str, ...] = ("data",),
    split: str = "train",
    **pipeline_kwargs: Any,
  ) -> None:
    values = maxtext_values(values)
    readers = maxtext_workers(values, split)
    if readers and not {"making", "workers", "planner_process"} & set(pipeline_kwargs):
      pipeline_kwargs["making"] = StepMaking("process", reader_processes=readers)
    suffix = "_eval" if split == "eval" else ""
    if values.get(f"grain_per_worker_buffer_size{suffix}") is not None:
      pipeline_kwargs.setdefault("prefetch", int(values[f"grain_per_worker_buffer_size{suffix}"]))
    if values.get(f"grain_num_threads{suffix}") is not None:
      pipeline_kwargs.setdefault("read_threads", int(values[f"grain_num_threads{suffix}"]))
    self.config = maxtext_config(values, split=split)
    use_sft, completion_only = maxtext_sft(values)
    self.completion_only = use_sft and completion_only
    self.dpo = bool(values.get("use_dpo", False))
    self.pipeline = Pipeline(self.config, mesh, data_axes, **pipeline_kwargs)
    # what ShiftData ignores (rows are zero-padded when packed); raw or OLMo files are datasets once opened
    built = values.get("dataset_type") in ("hf", "olmo_grain")
    self.pad_id = maxtext_pad_id(values, split, self.pipeline.cfg if built else None)

  def __iter__(self) -> Iterator[dict[str, Any]]:
    return self

  def __next__(self) -> dict[str, Any]:
    if self.dpo:
      return maxtext_dpo_batch(next(self.pipeline))
    return maxtext_batch(next(self.pipeline), self.pad_id, self.completion_only)

  def get_state(self) -> dict[str, Any]:
    return self.pipeline.get_state()

  def set_state(self, state: Mapping[str, Any]) -> None:
    self.pipeline.set_state(state)

  def close(self) -> None:
    self.pipeline.close()

  def __enter__(self) -> MaxTextPipeline:
    return self

  def __exit__(self, *exc: object) -> None:
    self.close()
