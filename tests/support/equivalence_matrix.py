"""The equivalence matrix: every feature in every execution mode gives the reference's batches.

Generated from two lists, FEATURES and MODES: a new feature or mode joins by
one line. The reference of a feature is its pipeline in process, prefetch=0,
NumPy output. A cell runs the feature in a mode for STEPS steps with a
get_state / set_state round trip after SPLIT steps, then restores the state
taken there on a fresh pipeline; all three sequences (first part, rest after
the round trip, rest after the restore) must equal the reference's, batch by
batch, all six arrays (or the integration's own keys) byte for byte::

    reference  = feature in process, prefetch 0            b0 b1 b2 b3 | b4 ... b9
    cell       = feature in mode:  b0..b3, S = get_state, set_state(S), b4..b9
    restored   = fresh pipeline in mode, set_state(S):                  b4..b9

Modes that need another interpreter (the C loops off: `JAXDATA_NATIVE` is
read at import; two `jax.distributed` processes) run this file as a script::

    python equivalence_matrix.py cell DATA.json MODE OUT.json FEATURE...        one process
    python equivalence_matrix.py host DATA.json PORT N I OUT_DIR FEATURE...      process I of N

Data is small and the runs short so that the whole matrix fits the CI budget.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import sys
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np

from jaxdata.pipeline.execution import StepMaking

STEPS, SPLIT = 10, 4
ROWS, SEQ_LEN = 8, 16  # 8 rows: one per device of the 8-device mesh

Data = Mapping[
  str, str
]  # "d0", "d1", "d2", "d3" (uncompressed), "sft" (masked), "flat", "meg", "d4" (special ids recorded), and "s3:d0", "gs:d0", ... once uploaded


# ----------------------------------------------------------------------------------------------- data


def write_data(root: str) -> dict[str, str]:
  """Three coded ArrayRecord datasets (pass ends come within STEPS), flat and Megatron files."""
  sys.path.insert(0, os.path.dirname(__file__))
  from flat_fixtures import random_documents, write_flat, write_megatron  # noqa: PLC0415 -- tests/ on the path
  from jaxdata.sources.boundaries import DocumentBoundaries  # noqa: PLC0415
  from jaxdata.sources.flat_index import build_flat_index  # noqa: PLC0415
  from pipeline_fixtures import coded_pairs, write_coded_dataset, write_pair_dataset  # noqa: PLC0415

  rng = np.random.default_rng(29)
  data = {}
  for d, (count, longest) in enumerate([(90, 40), (50, 20), (40, 10)]):
    data[f"d{d}"] = os.path.join(root, f"d{d}")
    write_coded_dataset(data[f"d{d}"], d, rng.integers(1, longest, count).tolist(), shard_bytes=300)
  data["d3"] = os.path.join(root, "d3")  # records stored without compression (jaxdata convert --compression none)
  write_coded_dataset(data["d3"], 3, rng.integers(1, 30, 60).tolist(), shard_bytes=300, compression="none")
  data["sft"] = os.path.join(root, "sft")  # examples with trained-token masks (fine-tuning data)
  write_coded_dataset(data["sft"], 5, rng.integers(2, 40, 70).tolist(), shard_bytes=300, masks=True)
  documents = random_documents(rng, 150, eos_id=0, max_length=30)
  data["flat"] = os.path.join(root, "flat")
  write_flat(os.path.join(data["flat"], "a.bin"), documents[:80])
  write_flat(os.path.join(data["flat"], "b.bin"), documents[80:])
  build_flat_index(
    "flat",
    [os.path.join(data["flat"], f) for f in ("a.bin", "b.bin")],
    dtype="uint16",
    boundaries=DocumentBoundaries.eos(0),
  )
  data["meg"] = os.path.join(root, "meg")
  os.makedirs(data["meg"])
  # 100 documents of one sequence, then 25 of two sequences each
  write_megatron(
    os.path.join(data["meg"], "m"),
    [[d] for d in documents[:100]] + [[a, b] for a, b in zip(documents[100::2], documents[101::2])],
  )
  build_flat_index("megatron", [os.path.join(data["meg"], "m")])
  # a set whose manifest records its tokenizer's BOS and EOS (as conversion does): packing takes them from there
  data["d4"] = os.path.join(root, "d4")
  lengths = np.random.default_rng(31).integers(1, 30, 60).tolist()
  write_coded_dataset(data["d4"], 4, lengths, shard_bytes=300, tokenizer={"kind": "coded", "bos_id": 2, "eos_id": 1})
  from jaxdata.tools.reference import reference_logprobs  # noqa: PLC0415

  for d, count in ((0, 70), (1, 40)):  # preference pairs (a pair a record), two sets to mix
    data[f"pairs{d}"] = os.path.join(root, f"pairs{d}")
    write_pair_dataset(data[f"pairs{d}"], d, coded_pairs(d, count, seed=40 + d))
    # a reference model's log-probabilities beside them: float32 features in every mode
    reference_logprobs(data[f"pairs{d}"], lambda b: -(b["targets"] % 7) / 10.0, "coded-ref", seq_len=SEQ_LEN, rows=4)
  data["raw"] = os.path.join(root, "raw")  # raw JSONL, converted into the cache by the first pipeline that opens it
  os.makedirs(data["raw"])
  for name, count in (("web", 120), ("code", 60)):
    with open(os.path.join(data["raw"], f"{name}.jsonl"), "w") as f:
      for _ in range(count):
        f.write(json.dumps({"text": " ".join(f"w{j}" for j in rng.integers(0, 40, int(rng.integers(2, 30))))}) + "\n")
  data["cache"] = os.path.join(root, "cache")
  from vision_fixtures import write_vision_dataset  # noqa: PLC0415

  data["vl"] = write_vision_dataset(os.path.join(root, "vision"))  # chats with 0-2 images, Qwen2.5-VL's template
  return data


# ------------------------------------------------------------------------------------------- features


def _every_step_updates(explicit: Mapping[int, int]) -> dict[int, tuple[tuple[dict[str, int], int | None], ...]]:
  """Before every batch c an update at the default step, with weights that change each time; at the
  positions `explicit` names, also one at an explicit step."""
  updates: dict[int, tuple[tuple[dict[str, int], int | None], ...]] = {}
  for c in range(STEPS):
    made: tuple[tuple[dict[str, int], int | None], ...] = (({"d0": c % 3, "d1": 1 + (2 * c) % 5, "d2": c % 2}, None),)
    if c in explicit:
      made += (({"d0": 4, "d1": 1, "d2": 1 + c % 3}, explicit[c]),)
    updates[c] = made
  return updates


def _extension() -> Any:
  sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # the function's module, for every process
  import layout_extension  # noqa: PLC0415 -- tests/support on the path

  return layout_extension


def _config(data: Data, names: tuple[str, ...] = ("d0", "d1", "d2"), prefix: str = "", **overrides: Any) -> Any:
  from jaxdata import PipelineConfig  # noqa: PLC0415 -- imported after the mode's environment is set

  raw: dict[str, Any] = {
    "seed": 29,
    "datasets": [{"name": n, "path": data[prefix + n]} for n in names],
    "mixture": {"weights": {n: 1 + i for i, n in enumerate(names)}},
    "shuffle_block_size": "global",
    "packing": {"mode": "first_fit", "seq_len": SEQ_LEN},
    "batch": {"global_batch_size": ROWS},
    "cache_dir": data["cache"],
    "allow_mixed_tokenizers": True,  # coded, Megatron and flat ids side by side
  }
  for key, value in overrides.items():
    raw[key] = {**raw[key], **value} if isinstance(value, dict) and isinstance(raw.get(key), dict) else value
  return PipelineConfig.from_dict(raw)


def _sft_config(data: Data, prefix: str = "") -> Any:
  """Fine-tuning: a masked set upsampled by document weight beside an unmasked one, best-fit rows with
  a segment cap, examples longer than a row dropped, and an EOS that trains as the example's last token."""
  return _config(
    data,
    names=("sft", "d1"),
    prefix=prefix,
    mixture={"unit": "documents", "weights": {"sft": 3, "d1": 1}},
    packing={"mode": "best_fit", "max_segments_per_row": 3, "long_docs": "drop", "add_eos": True, "eos_id": 0},
    exhausted_policy="repeat",
  )


def _pairs_config(
  data: Data, layout: str, shared: bool, prefix: str = "", reference: str | None = None, **overrides: Any
) -> Any:
  """Preference pairs packed whole: two sets of pairs mixed, one small set repeating."""
  return _config(
    data,
    names=("pairs0", "pairs1"),
    prefix=prefix,
    packing={"mode": "best_fit", "pairs": {"layout": layout, "shared_prompt": shared, "reference": reference}},
    exhausted_policy="repeat",
    **overrides,
  )


def _vision_config(data: Data, prefix: str = "", **overrides: Any) -> Any:
  """Image-text chats packed whole under three budgets beside a text set: rows of 64 tokens, 80 patches and 2
  images (the largest examples are dropped and counted); examples of 0-2 images."""
  return _config(
    data,
    names=("vl", "d0"),
    prefix=prefix,
    packing={"seq_len": 64, "images": {"max_patches": 80, "max_images": 2}},
    exhausted_policy="repeat",
    **overrides,
  )


def _with_datasets(cfg: Any, **per_dataset: dict[str, Any]) -> Any:
  from jaxdata import PipelineConfig  # noqa: PLC0415

  raw = cfg.to_dict()
  for entry in raw["datasets"]:
    entry.update(per_dataset.get(entry["name"], {}))
  return PipelineConfig.from_dict(raw)


def _maxtext_values(data: Data) -> dict[str, Any]:
  return {
    "grain_train_files": f"{data['d0']}/*.array_record,0.7;{data['d1']}/*.array_record,0.3",
    "grain_file_type": "arrayrecord",
    "data_shuffle_seed": 3,
    "max_target_length": SEQ_LEN,
    "global_batch_size_to_load": ROWS,
    "packing": True,
    "add_bos": False,
    "add_eos": False,
    "grain_worker_count": 0,
    "num_epoch": 1000,  # MaxText's default (1) would end the stream after one pass
  }


def _maxtext_dpo_values(data: Data) -> dict[str, Any]:
  return {
    "grain_train_files": f"{data['pairs0']}/*.array_record,0.6;{data['pairs1']}/*.array_record,0.4",
    "use_dpo": True,
    "data_shuffle_seed": 5,
    "max_target_length": SEQ_LEN,
    "global_batch_size_to_load": ROWS,
    "grain_worker_count": 0,
    "num_epoch": 1000,
  }


@dataclasses.dataclass(frozen=True)
class Feature:
  """One row of the matrix: a config (and pipeline arguments), and what iterates it."""

  name: str
  config: Callable[[Data], Any]
  arguments: Mapping[str, Any] = dataclasses.field(default_factory=dict)  # split, epoch
  entrance: str = "pipeline"  # "pipeline", "maxtext" (MaxTextPipeline), "grain" (PipelineDataset)
  store: str | None = None  # "s3" or "gs": needs that emulator
  multihost: bool = False  # in the representative subset run on 2 jax.distributed processes
  # The loop's mixture updates: before taking batch c, update_mixture(weights, at_step) for each (weights, at_step).
  updates: Mapping[int, tuple[tuple[Mapping[str, float], int | None], ...]] = dataclasses.field(default_factory=dict)
  # A change of course: after CHANGE_STEP batches the state is restored into this config with reconfigure=True
  changed_to: Callable[[Data], Any] | None = None


CHANGE_STEP = 2  # before SPLIT: the cell's round trip and restore are of states that hold the change


FEATURES = [
  Feature("token-mixture-pass-ends", lambda d: _config(d), multihost=True),
  Feature(
    "document-mixture-random",
    lambda d: _config(
      d, mixture={"unit": "documents", "interleave": "random"}, exhausted_policy="repeat", max_repeats=3
    ),
  ),
  Feature("shard-and-within-shard", lambda d: _config(d, shuffle_block_size=None, shuffle_within_shard=True)),
  Feature("block-shuffle", lambda d: _config(d, shuffle_block_size=7, reshuffle_on_repeat=False)),
  Feature("open-shards", lambda d: _config(d, shuffle_block_size=5, open_shards=2), multihost=True),
  Feature(
    "schedule-phases-ramp",
    lambda d: _config(
      d,
      mixture={
        "weights": None,
        "schedule": [
          {"until_step": 3, "weights": {"d0": 1, "d1": 0, "d2": 0}},
          {"weights": {"d0": 1, "d1": 2, "d2": 2}, "ramp_steps": 3},
        ],
      },
      exhausted_policy="repeat",
    ),
  ),
  Feature(
    "fractional-phases",
    lambda d: _config(
      d,
      total_steps=STEPS,
      exhausted_policy="repeat",
      mixture={
        "weights": None,
        "schedule": [
          {"until_step": 0.4, "weights": {"d0": 0, "d1": 1, "d2": 1}},
          {"weights": {"d0": 3, "d1": 1, "d2": 0}},
        ],
      },
    ),
  ),
  Feature(
    "linear-length-warmup", lambda d: _config(d, packing={"linear_warmup": {"start": 8, "steps": 6, "granularity": 4}})
  ),
  Feature(
    "batch-size-ramp",
    lambda d: _config(
      d, batch={"global_batch_size": 2 * ROWS, "ramp": {"start": ROWS, "steps": 6, "granularity": ROWS}}
    ),
    multihost=True,
  ),
  Feature("epoch", lambda d: _config(d, exhausted_policy="repeat"), {"epoch": 1}),
  Feature(
    "holdout-eval",
    lambda d: _with_datasets(_config(d), d0={"holdout": 0.5}, d1={"holdout": 20}),
    {"split": "eval"},
    multihost=True,
  ),
  Feature("holdout-train", lambda d: _with_datasets(_config(d), d0={"holdout": 0.5}, d1={"holdout": 20})),
  Feature(
    "segment-cap-best-fit",
    lambda d: _config(d, packing={"mode": "best_fit", "max_segments_per_row": 2}, exhausted_policy="repeat"),
  ),
  Feature(  # the mixture counts what packing keeps: documents longer than a row count seq_len
    "kept-tokens-truncate",
    lambda d: _config(d, packing={"long_docs": "truncate", "add_eos": True, "eos_id": 1}, exhausted_policy="repeat"),
  ),
  Feature(  # ... and nothing for one drop leaves out; under a length warmup the rows' length changes
    "kept-tokens-drop-warmup",
    lambda d: _config(
      d, packing={"long_docs": "drop", "linear_warmup": {"start": 8, "steps": 4}}, exhausted_policy="repeat"
    ),
  ),
  Feature(  # add_bos / add_eos with no ids given: the ids d4's manifest records (BOS 2, EOS 1), never 0
    "special-ids-from-the-manifest",
    lambda d: _config(d, names=("d4", "d1"), packing={"add_bos": True, "add_eos": True}, exhausted_policy="repeat"),
  ),
  Feature(
    "group-by-length", lambda d: _config(d, packing={"mode": "none", "group_by_length": 3}, exhausted_policy="repeat")
  ),
  Feature(
    "windows-with-replacement",
    lambda d: _config(
      d,
      names=("flat",),
      exhausted_policy="repeat",
      datasets=[{"name": "flat", "path": d["flat"], "sampling": "windows"}],
    ),
  ),
  Feature(
    "windows-permuted",
    lambda d: _config(
      d,
      names=("flat",),
      exhausted_policy="repeat",
      datasets=[{"name": "flat", "path": d["flat"], "sampling": "windows", "window": 8, "with_replacement": False}],
    ),
  ),
  Feature("megatron-and-flat", lambda d: _config(d, names=("d0", "flat", "meg"), exhausted_policy="repeat")),
  Feature("uncompressed-records", lambda d: _config(d, names=("d0", "d3"), exhausted_policy="repeat")),
  Feature("remote-s3", lambda d: _config(d, names=("d0", "d1", "meg"), prefix="s3:"), store="s3"),
  Feature("sft-masks", lambda d: _sft_config(d), multihost=True),
  Feature("sft-masks-remote-s3", lambda d: _sft_config(d, prefix="s3:"), store="s3"),
  Feature("remote-gs", lambda d: _config(d, names=("d0", "d1", "meg"), prefix="gs:"), store="gs"),
  Feature(
    "documents-range",  # Megatron's --split: a range of each dataset's documents, holdout inside it
    lambda d: _with_datasets(
      _config(d, names=("d0", "meg"), exhausted_policy="repeat"),
      d0={"documents": [5, 60], "holdout": 4},
      meg={"documents": [10, 110]},
    ),
  ),
  Feature(
    # an update before every batch at lag 6 (the default's mechanism, visible in 10 steps: those made
    # before the split are pending at the save and take effect at steps 6 to 9), and explicit ones
    # inside what is made ahead (planned again)
    "mixture-updates",
    lambda d: _config(d, exhausted_policy="repeat", mixture={"update_lag_steps": 6}),
    updates=_every_step_updates(explicit={1: 3, SPLIT - 1: SPLIT + 1, SPLIT + 1: SPLIT + 2}),
    multihost=True,
  ),
  Feature(
    "mixture-updates-lag-1",  # an update before every batch, each from the step after the next on
    lambda d: _config(d, exhausted_policy="repeat", mixture={"update_lag_steps": 1}),
    updates=_every_step_updates(explicit={2: 5}),
    multihost=True,
  ),
  Feature(  # a loop that reads no source_ids or positions: neither is built nor transferred
    "loop-features",
    lambda d: _config(d, batch={"features": ["tokens", "targets", "segment_ids", "loss_mask"]}),
    multihost=True,
  ),
  Feature(  # a feature of its own dtype and extent (uint8 [rows, 5]): one layout entry, one function
    "extra-feature",
    lambda d: _config(d, batch={"extra_features": [_extension().ROW_SUMMARY]}),
    multihost=True,
  ),
  # every step waits longer than the threshold: a log line each step, and the batches as without it
  Feature("wait-warning-every-step", lambda d: _config(d, exhausted_policy="repeat"), {"wait_warning_s": 1e-9}),
  Feature("maxtext", _maxtext_values, entrance="maxtext"),
  Feature("grain-adapter", lambda d: _config(d), entrance="grain"),
  Feature(  # with a reference model's stored log-probabilities (float32 features)
    "pairs-one-row",
    lambda d: _pairs_config(d, "one_row", False, reference="coded-ref"),
    multihost=True,
  ),
  Feature(  # MaxText's layout, the prompt laid out once, pairs counted as documents
    "pairs-parallel-shared-prompt",
    lambda d: _pairs_config(d, "parallel", True, mixture={"unit": "documents"}),
    multihost=True,
  ),
  Feature(  # raw JSONL named in the config: the cache built by the first pipeline (one builder), reused by the rest
    "raw-inputs",
    lambda d: _with_datasets(
      _config(d, names=("d0",), exhausted_policy="repeat"),
      d0={"path": "", "inputs": [os.path.join(d["raw"], "web.jsonl")], "tokenizer": "byte"},
    ),
    multihost=True,
  ),
  Feature("pairs-remote-s3", lambda d: _pairs_config(d, "one_row", True, prefix="s3:"), store="s3"),
  Feature(  # raw JSONL whose cache is kept in a bucket (hosts without a shared disk): built once, then read remotely
    "raw-inputs-bucket-cache-s3",
    lambda d: _with_datasets(
      _config(d, names=("d0",), exhausted_policy="repeat", inputs_cache=d["s3:d0"].rsplit("/", 1)[0] + "/caches"),
      d0={"path": "", "inputs": [os.path.join(d["raw"], "web.jsonl")], "tokenizer": "byte"},
    ),
    store="s3",
  ),
  Feature("maxtext-dpo", lambda d: _maxtext_dpo_values(d), entrance="maxtext"),  # use_dpo: a pair a row
  Feature(  # image-text rows: patches, their ids and positions, rope positions; an update before each batch
    "vision-rows",
    lambda d: _vision_config(d),
    updates={c: (({"vl": 1 + c % 3, "d0": 1 + (c + 1) % 2}, None),) for c in range(STEPS)},
    multihost=True,
  ),
  Feature("vision-remote-s3", lambda d: _vision_config(d, prefix="s3:"), store="s3"),
  Feature(  # a restore that adds the image set to a text run (packing.images on from the restore)
    "vision-added-at-restore",
    lambda d: _config(d, names=("d0", "d1"), exhausted_policy="repeat", packing={"seq_len": 64}),
    changed_to=lambda d: _config(
      d,
      names=("d0", "vl"),
      exhausted_policy="repeat",
      packing={"seq_len": 64, "images": {"max_patches": 80, "max_images": 2}},
    ),
  ),
  Feature(  # a restore that adds d2, removes d1 and changes rows (seq_len 16 -> 12, best fit): d0 goes on
    "change-at-restore",
    lambda d: _config(d, names=("d0", "d1"), exhausted_policy="repeat"),
    changed_to=lambda d: _config(
      d, names=("d0", "d2"), exhausted_policy="repeat", packing={"mode": "best_fit", "seq_len": 12}
    ),
    multihost=True,
  ),
  Feature(
    "realistic-combination",
    lambda d: _with_datasets(
      _config(
        d,
        open_shards=2,
        shuffle_block_size=9,
        exhausted_policy="repeat",
        packing={"mode": "best_fit", "add_eos": True, "eos_id": 1, "linear_warmup": {"start": 8, "steps": 5}},
        mixture={
          "weights": None,
          "schedule": [
            {"until_step": 5, "weights": {"d0": 1, "d1": 1, "d2": 1}},
            {"weights": {"d0": 2, "d1": 1, "d2": 0}, "ramp_steps": 2},
          ],
        },
      ),
      d0={"holdout": 10},
    ),
    multihost=True,
  ),
]


# ---------------------------------------------------------------------------------------------- modes


@dataclasses.dataclass(frozen=True)
class Mode:
  """One column: pipeline arguments, NumPy or mesh output, and where it runs."""

  name: str
  arguments: Mapping[str, Any]
  mesh: bool = False
  runs: str = "here"  # "here", "native-off" (a fresh interpreter, JAXDATA_NATIVE=0), "two-hosts"
  usable_cores: int | None = None  # as on a host with this many (os.sched_getaffinity): the defaults follow it

  @property
  def uses_workers(self) -> bool:
    return StepMaking.of(self.arguments.get("making", "auto")).planner_process_asked


READERS_1, READERS_2 = StepMaking("process", reader_processes=1), StepMaking("process", reader_processes=2)
REFERENCE = Mode("reference", {"prefetch": 0, "making": "here"})
MODES = [
  Mode("prefetch2", {"prefetch": 2, "making": "here"}),
  Mode("planner-process", {"prefetch": 2, "making": "process"}),
  Mode("readers1", {"prefetch": 2, "making": READERS_1}),
  Mode("readers2", {"prefetch": 1, "making": READERS_2}),
  Mode("mesh8", {"prefetch": 2, "making": "here"}, mesh=True),
  Mode("mesh8-default", {}, mesh=True),  # the defaults with a mesh (on < 4 cores: planned in process)
  # The default on >= 4 cores, as there: spans from the planner process are read ahead on the read thread;
  # spans of at most 2 steps (256 tokens), so that a cell's steps come in several, each read ahead.
  Mode(
    "mesh8-planner-process",
    {"prefetch": 2, "making": "process", "read_ahead_tokens": 2 * ROWS * SEQ_LEN},
    mesh=True,
    usable_cores=4,
  ),
  Mode("mesh8-readers2", {"prefetch": 2, "making": READERS_2}, mesh=True),
  Mode("native-off", {"prefetch": 2, "making": "here"}, runs="native-off"),
  Mode("two-hosts", {"prefetch": 2, "making": "process"}, mesh=True, runs="two-hosts"),  # each: 4 devices, a planner
]


# --------------------------------------------------------------------------------------------- a cell


def digest(batch: Mapping[str, Any]) -> list[str]:
  """A batch as comparable text, key by key (hashes of the bytes, with dtype and shape)."""
  import hashlib  # noqa: PLC0415

  out = []
  for key in sorted(batch):
    array = np.asarray(batch[key])
    out.append(f"{key}:{array.dtype}:{array.shape}:{hashlib.sha256(array.tobytes()).hexdigest()[:24]}")
  return out


def open_iterator(feature: Feature, data: Data, mode: Mode, mesh: Any = None, changed: bool = False) -> Any:
  """The feature's iterator in `mode` (get_state / set_state / close); `.pipeline` is its Pipeline where wrapped.
  `changed`: on the config the feature changes to."""
  from jaxdata import Pipeline  # noqa: PLC0415

  arguments = {**feature.arguments, **mode.arguments}
  if changed:
    assert feature.changed_to is not None
    return Pipeline(feature.changed_to(data), mesh=mesh, **arguments)
  if feature.entrance == "maxtext":
    from jaxdata.integrations.maxtext import MaxTextPipeline  # noqa: PLC0415 -- optional: jax at import

    return MaxTextPipeline(feature.config(data), mesh, **arguments)
  if feature.entrance == "grain":
    from jaxdata.integrations.grain import PipelineDataset  # noqa: PLC0415 -- optional: grain at import

    return iter(PipelineDataset(feature.config(data), mesh=mesh, **arguments))
  return Pipeline(feature.config(data), mesh=mesh, **arguments)


def pipeline_of(iterator: Any) -> Any:
  return getattr(iterator, "pipeline", iterator)


def wait_for_workers(iterator: Any) -> None:
  """Until the worker processes are ready, steps are made in process: wait, so that the cell's are theirs."""
  import jaxdata.testing  # noqa: PLC0415 -- loads jax: after the mode has set its flags

  jaxdata.testing.wait_for_processes(pipeline_of(iterator))


def steps_from_workers(iterator: Any) -> int | None:
  execution = pipeline_of(iterator).execution()
  return execution.steps_from_processes if execution.processes else None


def take(
  iterator: Any,
  count: int,
  summary: Callable[[Any], list[str]] = digest,
  feature: Feature | None = None,
  start: int = 0,
) -> list[list[str]]:
  """Up to `count` batches' digests (fewer where the stream ends), batch `start` first; the feature's
  mixture updates are made where the loop makes them."""
  out = []
  for position in range(start, start + count):
    for weights, at_step in feature.updates.get(position, ()) if feature is not None else ():
      pipeline_of(iterator).update_mixture(weights, at_step)
    try:
      out.append(summary(next(iterator)))
    except StopIteration:
      break
  return out


def changed_course(
  feature: Feature, data: Data, mode: Mode, mesh: Any, summary: Callable[[Any], list[str]]
) -> tuple[Any, list[list[str]]]:
  """A feature with a change: CHANGE_STEP batches of its config, its state restored into the changed config
  (reconfigure=True); that iterator, and the batches so far."""
  iterator = open_iterator(feature, data, mode, mesh)
  try:
    if mode.uses_workers:
      wait_for_workers(iterator)
    first = take(iterator, CHANGE_STEP, summary, feature)
    state = json.loads(json.dumps(iterator.get_state()))
  finally:
    iterator.close()
  iterator = open_iterator(feature, data, mode, mesh, changed=True)
  if mode.uses_workers:
    wait_for_workers(iterator)
  pipeline_of(iterator).set_state(state, reconfigure=True)
  return iterator, first


def run_cell(
  feature: Feature, data: Data, mode: Mode, mesh: Any = None, summary: Callable[[Any], list[str]] = digest
) -> dict[str, Any]:
  """The cell's three sequences, how many steps worker processes made (None: no workers), and whether spans
  were read on the read thread."""
  with usable_cores(mode.usable_cores):
    return _run_cell(feature, data, mode, mesh, summary)


@contextlib.contextmanager
def usable_cores(count: int | None) -> Iterator[None]:
  """With `count`: as on a host of that many usable cores, where the pipeline's defaults look."""
  if count is None:
    yield
    return
  real = os.sched_getaffinity
  os.sched_getaffinity = lambda _pid: set(range(count))
  try:
    yield
  finally:
    os.sched_getaffinity = real


def _run_cell(
  feature: Feature, data: Data, mode: Mode, mesh: Any, summary: Callable[[Any], list[str]]
) -> dict[str, Any]:
  with_workers = mode.uses_workers
  if feature.changed_to is not None:
    iterator, first = changed_course(feature, data, mode, mesh, summary)
  else:
    iterator, first = open_iterator(feature, data, mode, mesh), []
  try:
    if with_workers:
      wait_for_workers(iterator)
    first += take(iterator, SPLIT - len(first), summary, feature, len(first))
    state = iterator.get_state()
    iterator.set_state(json.loads(json.dumps(state)))  # a round trip through JSON, as a checkpoint makes it
    rest = take(iterator, STEPS - SPLIT, summary, feature, SPLIT)
    from_workers = steps_from_workers(iterator)
    read_thread = pipeline_of(iterator).execution().read_thread
  finally:
    iterator.close()
  fresh = open_iterator(feature, data, mode, mesh, changed=feature.changed_to is not None)
  try:
    if with_workers:
      wait_for_workers(fresh)
    fresh.set_state(json.loads(json.dumps(state)))  # after the change: the changed config, restored as usual
    restored = take(fresh, STEPS - SPLIT, summary, feature, SPLIT)
  finally:
    fresh.close()
  return {"first": first, "rest": rest, "restored": restored, "from_workers": from_workers, "read_thread": read_thread}


def reference(feature: Feature, data: Data) -> list[list[str]]:
  if feature.changed_to is not None:
    iterator, first = changed_course(feature, data, REFERENCE, None, digest)
  else:
    iterator, first = open_iterator(feature, data, REFERENCE), []
  try:
    return first + take(iterator, STEPS - len(first), digest, feature, len(first))
  finally:
    iterator.close()


def local_mesh() -> Any:
  import jax  # noqa: PLC0415

  devices = np.array(sorted(jax.devices(), key=lambda d: (d.process_index, d.id)))
  return jax.sharding.Mesh(devices, ("data",))


# ------------------------------------------------------------------------------- other interpreters


def _by_name(names: list[str]) -> Iterator[Feature]:
  known = {f.name: f for f in FEATURES}
  return (known[n] for n in names)


def _cell_main(data_json: str, mode_name: str, out: str, *feature_names: str) -> None:
  """Every named feature's cell in `mode` (JAXDATA_NATIVE etc. set by the caller)."""
  mode = {m.name: m for m in MODES}[mode_name]
  data = json.loads(open(data_json).read())
  results = {}
  for feature in _by_name(list(feature_names)):
    results[feature.name] = run_cell(
      feature, data, dataclasses.replace(mode, runs="here"), local_mesh() if mode.mesh else None
    )
  with open(out, "w") as f:
    json.dump(results, f)


def _host_main(data_json: str, port: str, count: str, index: str, out_dir: str, *feature_names: str) -> None:
  """Process `index` of `count`: every named feature's cell over a mesh of all processes' devices;
  saves per feature the digests of the global batches (gathered from all processes)."""
  os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
  os.environ["JAX_PLATFORMS"] = "cpu"
  import jax  # noqa: PLC0415 -- after the device count above

  jax.config.update("jax_cpu_collectives_implementation", "gloo")
  jax.distributed.initialize(f"localhost:{port}", int(count), int(index))
  data = json.loads(open(data_json).read())
  mode = {m.name: m for m in MODES}["two-hosts"]
  results = {}
  for feature in _by_name(list(feature_names)):
    results[feature.name] = run_cell(feature, data, mode, local_mesh(), _gathered_digest)
  with open(os.path.join(out_dir, f"host{index}.json"), "w") as f:
    json.dump(results, f)
  jax.distributed.shutdown()


def _gathered_digest(batch: Mapping[str, Any]) -> list[str]:
  """The whole global batch, gathered from every process's rows (a collective: every host calls it)."""
  from jax.experimental import multihost_utils  # noqa: PLC0415

  return digest({k: multihost_utils.process_allgather(v, tiled=True) for k, v in batch.items()})


if __name__ == "__main__":
  sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
  {"cell": _cell_main, "host": _host_main}[sys.argv[1]](*sys.argv[2:])
