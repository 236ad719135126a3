"""One side of the peer benchmark, run in its own interpreter (each peer in its own venv).

    python benchmarks/peers/sides.py SIDE --data DIR [--workers N] [--remote URL]

SIDE: megatron, megatron-mask, olmo, streaming, levanter, levanter-perm, levanter-prefetchN,
jaxdata-windows, jaxdata-documents, jaxdata-windows-mesh8, jaxdata-documents-mesh8. Prints one
JSON line: imports_s, startup_s (process start to the first batch), tokens_per_s (trained tokens:
2,048 per fixed-length sample, non-padding tokens for packed documents), shares (tokens per
source) and what one sample holds (levanter also block_rows: its mixture's rows per source in
each block of 2,048). Each side imports only its own library (the peers live in other venvs).
"""

from __future__ import annotations

import time

STARTED = time.perf_counter()

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
from collections.abc import Callable, Iterator  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

SOURCES = ("web", "code", "books", "curated")
SHARES = (0.62, 0.18, 0.12, 0.08)
SEQ_LEN, BATCH = 2048, 32
VOCAB = 128_256
WARMUP, STEPS = 20, 300


def measure(batches: Iterator[Any], count: Callable[[Any], tuple[int, np.ndarray]], imports_s: float) -> dict[str, Any]:
  """Startup to the first batch, then WARMUP batches, then STEPS timed ones."""
  next(batches)
  startup = time.perf_counter() - STARTED
  for _ in range(WARMUP):
    next(batches)
  tokens, per_source, started = 0, np.zeros(len(SOURCES)), time.perf_counter()
  for _ in range(STEPS):
    n, sources = count(next(batches))
    tokens += n
    per_source += sources
  seconds = time.perf_counter() - started
  return {
    "imports_s": imports_s,
    "startup_s": startup,
    "tokens_per_s": tokens / seconds,
    "shares": (per_source / per_source.sum()).tolist(),
  }


def megatron(data: str, workers: int, mask: bool) -> dict[str, Any]:
  import torch  # noqa: PLC0415 -- the megatron venv's
  from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder  # noqa: PLC0415
  from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig  # noqa: PLC0415

  imports_s = time.perf_counter() - STARTED
  if not torch.distributed.is_initialized():  # the blended dataset's cache asks for the rank
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(29500 + os.getpid() % 1000))
    torch.distributed.init_process_group("gloo", rank=0, world_size=1)

  class Tokenizer:  # what GPTDataset asks of a tokenizer
    vocab_size, eod, pad = VOCAB, 0, -1
    unique_identifiers = {"class": "Tokenizer", "vocab_size": VOCAB}

  cache = os.path.join(data, f"megatron-cache-{os.getpid()}")
  config = GPTDatasetConfig(
    random_seed=0,
    sequence_length=SEQ_LEN,
    blend=([os.path.join(data, "megatron", s) for s in SOURCES], list(SHARES)),
    split="100,0,0",
    path_to_cache=cache,
    tokenizer=Tokenizer(),
    reset_position_ids=False,
    reset_attention_mask=False,
    eod_mask_loss=False,
    create_attention_mask=mask,
  )
  samples = (WARMUP + STEPS + 1) * BATCH * (1 + workers)
  started = time.perf_counter()
  train, _, _ = BlendedMegatronDatasetBuilder(GPTDataset, [samples, 0, 0], lambda: True, config).build()
  build_s = time.perf_counter() - started
  loader = torch.utils.data.DataLoader(train, batch_size=BATCH, num_workers=workers, shuffle=False)

  def count(batch: dict[str, Any]) -> tuple[int, np.ndarray]:
    ids = batch["dataset_id"].numpy()
    return ids.size * SEQ_LEN, np.bincount(ids, minlength=len(SOURCES)) * SEQ_LEN

  result = measure(iter(loader), count, imports_s)
  return {
    **result,
    "index_build_s": build_s,
    "sample": f"{SEQ_LEN + 1} tokens (tokens + labels), positions not restarted",
  }


def olmo(data: str, workers: int) -> dict[str, Any]:
  from olmo_core.data import DataCollator, NumpyDataLoaderBase, NumpyFSLDataset  # noqa: PLC0415 -- the olmo venv's

  imports_s = time.perf_counter() - STARTED
  paths = [os.path.join(data, "megatron", f"{s}.bin") for s in SOURCES]  # the .bin files are flat uint32 tokens
  work_dir = os.path.join(data, f"olmo-work-{os.getpid()}")
  dataset = NumpyFSLDataset(
    *paths, sequence_length=SEQ_LEN, pad_token_id=VOCAB - 1, eos_token_id=0, vocab_size=VOCAB, dtype=np.uint32
  )
  dataset.work_dir = work_dir
  dataset.prepare()
  per_file = np.array([os.path.getsize(p) // 4 // SEQ_LEN for p in paths])
  file_ends = np.cumsum(per_file)
  loader = NumpyDataLoaderBase.wrap_numpy_dataset(
    dataset,
    global_batch_size=BATCH * SEQ_LEN,
    collator=DataCollator(pad_token_id=VOCAB - 1),
    work_dir=work_dir,
    num_workers=workers,
  )
  loader.reshuffle(epoch=1)

  def count(batch: dict[str, Any]) -> tuple[int, np.ndarray]:
    sources = np.searchsorted(file_ends, batch["index"].numpy(), side="right")
    return sources.size * SEQ_LEN, np.bincount(sources, minlength=len(SOURCES)) * SEQ_LEN

  return {**measure(iter(loader), count, imports_s), "sample": f"{SEQ_LEN} tokens"}


def streaming(data: str, workers: int, remote: str | None) -> dict[str, Any]:
  import torch  # noqa: PLC0415 -- the streaming venv's
  from streaming import Stream, StreamingDataset  # noqa: PLC0415
  from streaming.base.util import clean_stale_shared_memory  # noqa: PLC0415

  imports_s = time.perf_counter() - STARTED
  clean_stale_shared_memory()
  local = os.path.join(data, f"mds-cache-{os.getpid()}")
  streams = [
    Stream(
      remote=f"{remote}/{s}" if remote else None,
      local=os.path.join(local, s) if remote else os.path.join(data, "mds", s),
      proportion=p,
    )
    for s, p in zip(SOURCES, SHARES)
  ]
  dataset = StreamingDataset(streams=streams, shuffle=True, shuffle_seed=0, batch_size=BATCH)
  loader = torch.utils.data.DataLoader(dataset, batch_size=BATCH, num_workers=workers)

  def count(batch: dict[str, Any]) -> tuple[int, np.ndarray]:
    sources = batch["source"].numpy()
    return sources.size * SEQ_LEN, np.bincount(sources, minlength=len(SOURCES)) * SEQ_LEN

  def forever() -> Iterator[Any]:
    while True:
      yield from loader

  return {**measure(forever(), count, imports_s), "sample": f"{SEQ_LEN} tokens and the source"}


def jaxdata_side(data: str, windows: bool, devices: int) -> dict[str, Any]:
  if devices:
    os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
  import jaxdata  # noqa: PLC0415 -- jax itself only with a mesh

  imports_s = time.perf_counter() - STARTED
  datasets = [{"name": s, "path": os.path.join(data, "jaxdata", s)} for s in SOURCES]
  if windows:
    datasets = [{**d, "sampling": "windows"} for d in datasets]
  cfg = jaxdata.PipelineConfig.from_dict(
    {
      "datasets": datasets,
      "mixture": {"weights": dict(zip(SOURCES, SHARES)), "unit": "tokens"},
      "shuffle_block_size": "global",
      "exhausted_policy": "repeat",
      "packing": {"mode": "first_fit", "seq_len": SEQ_LEN},
      "batch": {"global_batch_size": BATCH},
    }
  )
  mesh = None
  if devices:
    import jax  # noqa: PLC0415 -- after XLA_FLAGS

    mesh = jax.make_mesh((devices,), ("data",), axis_types=(jax.sharding.AxisType.Auto,))
  pipe = jaxdata.Pipeline(cfg, mesh=mesh)

  def count(batch: dict[str, Any]) -> tuple[int, np.ndarray]:
    if devices:  # a training loop never copies its batches back: the pipeline's own per-step counts
      sources = np.array(list(pipe.stats()["tokens_per_source"].values()))
      return int(sources.sum()), sources
    ids = batch["source_ids"]
    return int((ids >= 0).sum()), np.bincount(ids[ids >= 0], minlength=len(SOURCES))

  result = measure(pipe, count, imports_s)
  pipe.close()
  what = "a 2,049-token window" if windows else "packed documents"
  return {**result, "sample": f"{what} as six features (tokens, targets, segment ids, positions, loss mask, sources)"}


def levanter_side(data: str, permutation: bool, prefetch: int) -> dict[str, Any]:
  """Levanter's causal-LM training data as its trainer builds it, on an 8-device CPU mesh.

  The caches are make_levanter.py's. Each source: CausalLmDataset(TokenSeqDataset(cache, 2048)) (what
  dataset_for_component makes of a text component, unpacked), given to LmDataConfig as direct
  components, so that its train_set does the rest: the shuffle of each source (its default hierarchical
  block shuffle, or with permutation a full Feistel permutation), the MixtureDataset (blocks of 2,048
  rows, restart when a source runs out) and the NamedLmDataset wrapping. The mesh, its axis mapping
  and the DataLoader are TrainerConfig's and Trainer.data_loader's (prefetch_size 32 there).
  """
  os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
  import haliax  # noqa: PLC0415 -- the levanter venv's, after XLA_FLAGS
  import jax  # noqa: PLC0415
  from levanter.data import DataLoader  # noqa: PLC0415
  from levanter.data.text import CausalLmDataset, DirectDatasetComponent, LmDataConfig, TokenSeqDataset  # noqa: PLC0415
  from levanter.store.cache import TreeCache  # noqa: PLC0415
  from levanter.trainer import TrainerConfig  # noqa: PLC0415

  imports_s = time.perf_counter() - STARTED
  trainer = TrainerConfig(train_batch_size=BATCH)  # default MeshConfig: data -1 (all 8), replica 1, model 1
  mesh = trainer.device_mesh
  Pos = haliax.Axis("position", SEQ_LEN)
  # train_lm.py's keys: data, loader, model, training from the trainer seed
  data_key, _, _, _ = jax.random.split(jax.random.PRNGKey(trainer.seed), 4)
  components: dict[str, Any] = {}
  for s in SOURCES:
    cache = TreeCache.load(os.path.join(data, "levanter", s), {"input_ids": np.zeros((0,), dtype=np.int32)})
    # eos_id None: the passthrough tokenizer's (these ids have no EOS), so no segment ids
    causal = CausalLmDataset(TokenSeqDataset(cache, SEQ_LEN), Pos, eos_id=None)
    components[s] = DirectDatasetComponent(datasets={"train": causal})
  config = LmDataConfig(
    components=components, train_weights=dict(zip(SOURCES, SHARES)), **({"shuffle": True} if permutation else {})
  )
  with haliax.partitioning.set_mesh(mesh), haliax.axis_mapping(trainer.parameter_axis_mapping):  # as Trainer.__enter__
    dataset = config.train_set(Pos, trainer.batch_schedule, key=data_key)
    loader = DataLoader(  # Trainer.data_loader's arguments, prefetch_size aside
      dataset,
      batch_size=BATCH,
      max_buffered_batches=128,
      mesh=mesh,
      axis_resources=trainer.compute_axis_mapping,
      prefetch_size=prefetch,
      batch_axis_name=trainer.batch_axis_name,
      allow_nondivisible_batch_size=trainer.allow_nondivisible_batch_size,
    )
    batches = loader.iter_from_step(0)
    mixture = dataset.dataset  # NamedLmDataset(MixtureDataset)
    order = np.array([SOURCES.index(name) for name in mixture.datasets])
    steps = iter(range(1 + WARMUP, 1 + WARMUP + STEPS))  # the batches measure() counts

    def count(batch: Any) -> tuple[int, np.ndarray]:
      # never copied back: each row's source from the mixture's own block assignment (dataset id << 16 | offset);
      # a batch of 32 lies inside one block of 2,048 rows
      start = next(steps) * BATCH
      block = mixture._get_block(start // mixture.block_size)
      ids = order[block[start % mixture.block_size :][:BATCH] >> 16]
      return ids.size * SEQ_LEN, np.bincount(ids, minlength=len(SOURCES)) * SEQ_LEN

    result = measure(batches, count, imports_s)
  return {
    **result,
    "block_rows": mixture._counts_per_block_per_stage[0][np.argsort(order)].tolist(),  # rows per source per block
    "sample": f"{SEQ_LEN} tokens as an LmExample (tokens int32, loss weight float32; causal mask, no segment ids)",
  }


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("side")
  parser.add_argument("--data", required=True)
  parser.add_argument("--workers", type=int, default=0)
  parser.add_argument("--remote", help="streaming: read the MDS shards from this s3:// prefix")
  args = parser.parse_args()
  side = args.side
  if side.startswith("megatron"):
    result = megatron(args.data, args.workers, side == "megatron-mask")
  elif side == "olmo":
    result = olmo(args.data, args.workers)
  elif side == "streaming":
    result = streaming(args.data, args.workers, args.remote)
  elif side in ("levanter", "levanter-perm") or side.startswith("levanter-prefetch"):
    prefetch = int(side.removeprefix("levanter-prefetch")) if "prefetch" in side else 32
    result = levanter_side(args.data, side == "levanter-perm", prefetch)
  elif side.startswith("jaxdata-"):
    result = jaxdata_side(args.data, "windows" in side, 8 if side.endswith("mesh8") else 0)
  else:
    sys.exit(f"unknown side {side!r}")
  print(json.dumps(result))
  sys.stdout.flush()
  os._exit(0)  # DataLoader workers and process groups: no teardown to time or hang on


if __name__ == "__main__":
  main()
