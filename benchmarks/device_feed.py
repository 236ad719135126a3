"""A jitted model step fed by jaxdata against the same step fed by batches already on the device.

    python -m benchmarks.device_feed                    # the accelerator size: ~230M params, bf16, 32 x 2048
    python -m benchmarks.device_feed --size step-3ms    # a few-millisecond step fed every packed-attention feature
    python -m benchmarks.device_feed --size tiny        # what the test suite runs on CPU (tests/test_device_feed.py)

A size whose step does not fit the device's memory (the compiled step's own figure, from XLA, against
the device's limit, or this host's memory on CPU) is refused in one line before anything is allocated.

The model is a small language model in bf16 (token embedding tied to the output, `layers` residual
MLP blocks): big enough at the accelerator size that its step is what a real run waits on. Both
feeds give it the same batches in the same order:

    on device  the first `steps` batches of a pipeline, copied to the device before the clock starts
    jaxdata    a fresh Pipeline over all devices (mesh axis "data"), its defaults, stepping as it yields

Printed, as one JSON line (and a table): the step time of each (medians over the measured steps),
the pipeline's added time per step (goal <= 1% on an accelerator), host-to-device bytes/s of the
pipeline's own transfer (its "output" timer) against `jax.device_put` of the same arrays (one
call per step, waited for), the first batch of a fresh pipeline and restore + first batch; and the
per-step losses of both feeds, which must be identical (the same batches reached the model).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import time
from typing import Any

import numpy as np

from benchmarks.make_corpus import VOCABS, corpus_dir, make_corpus
from benchmarks.pipeline_throughput import TOKEN_SHARES
from jaxdata.cli.parsing import positive_count

WARMUP = 3


@dataclasses.dataclass(frozen=True)
class Size:
  """The model and the batch."""

  vocab: int  # embedding rows (token ids are taken modulo this)
  width: int
  layers: int
  rows: int
  seq_len: int
  steps: int  # measured steps per feed
  corpus_scale: float  # of benchmarks/make_corpus's ~100M tokens
  features: tuple[str, ...] = ("tokens", "targets", "loss_mask")  # what the model reads (and the pipeline makes)


PACKED = ("tokens", "targets", "loss_mask", "segment_ids", "positions")  # what a packed-attention model reads
SIZES = {
  # ~131M embedding + 12 x 8.4M MLP = ~232M parameters: a step of 65,536 tokens is ~9e16 FLOPs.
  "accelerator": Size(vocab=128_256, width=1024, layers=12, rows=32, seq_len=2048, steps=40, corpus_scale=0.2),
  # Steps of a few milliseconds on an accelerator: the pipeline's own rate is what they measure.
  "step-8ms": Size(
    vocab=32_768, width=512, layers=4, rows=32, seq_len=2048, steps=60, corpus_scale=0.2, features=PACKED
  ),
  "step-3ms": Size(
    vocab=8_192, width=256, layers=2, rows=32, seq_len=2048, steps=80, corpus_scale=0.2, features=PACKED
  ),
  "tiny": Size(vocab=512, width=32, layers=2, rows=8, seq_len=64, steps=6, corpus_scale=0.002, features=PACKED),
}


def parameters(size: Size, seed: int = 0) -> dict[str, Any]:
  import jax  # noqa: PLC0415 -- the devices are chosen by the caller's environment
  import jax.numpy as jnp  # noqa: PLC0415

  keys = jax.random.split(jax.random.key(seed), 1 + 2 * size.layers)
  scale = size.width**-0.5
  params: dict[str, Any] = {"embed": jax.random.normal(keys[0], (size.vocab, size.width), jnp.bfloat16) * scale}
  if "positions" in size.features:  # a learned position embedding: the model reads each token's position
    params["position"] = jax.random.normal(keys[0], (size.seq_len, size.width), jnp.bfloat16) * scale
  for i in range(size.layers):
    params[f"up{i}"] = jax.random.normal(keys[1 + 2 * i], (size.width, 4 * size.width), jnp.bfloat16) * scale
    params[f"down{i}"] = jax.random.normal(keys[2 + 2 * i], (4 * size.width, size.width), jnp.bfloat16) * scale * 0.5
  return params


def count_parameters(params: dict[str, Any]) -> int:
  return sum(int(np.prod(p.shape)) for p in params.values())


def make_train_step(size: Size) -> Any:
  """loss and SGD update on tokens / targets / loss_mask; params donated (updated in place)."""
  import jax  # noqa: PLC0415
  import jax.numpy as jnp  # noqa: PLC0415

  def loss_fn(params: dict[str, Any], batch: dict[str, Any]) -> Any:
    tokens = jnp.remainder(batch["tokens"], size.vocab)
    targets = jnp.remainder(batch["targets"], size.vocab)
    x = params["embed"][tokens]
    if "positions" in batch:
      x = x + params["position"][batch["positions"]]
    for i in range(size.layers):
      h = jax.nn.gelu(x @ params[f"up{i}"])
      x = x + h @ params[f"down{i}"]
    logits = (x @ params["embed"].T).astype(jnp.float32)
    log_probs = jax.nn.log_softmax(logits)
    token_loss = -jnp.take_along_axis(log_probs, targets[..., None], axis=-1)[..., 0]
    mask = batch["loss_mask"].astype(jnp.float32)
    if "segment_ids" in batch:  # padding is segment 0 (a packed-attention model masks across segments too)
      mask = mask * (batch["segment_ids"] > 0)
    return (token_loss * mask).sum() / jnp.maximum(mask.sum(), 1.0)

  def step(params: dict[str, Any], batch: dict[str, Any]) -> tuple[dict[str, Any], Any]:
    loss, grads = jax.value_and_grad(loss_fn)(params, batch)
    return jax.tree.map(lambda p, g: p - 0.01 * g.astype(p.dtype), params, grads), loss

  return jax.jit(step, donate_argnums=0)


FED = ("tokens", "targets", "loss_mask")  # the accelerator size's features (batch.features: nothing else is made)


def memory_needed(size: Size) -> int:
  """Bytes the jitted step needs on one device, from XLA's analysis of the step compiled for this backend
  (nothing is allocated): arguments, outputs and temporaries, less what the donated parameters alias."""
  import jax  # noqa: PLC0415
  import jax.numpy as jnp  # noqa: PLC0415

  params = jax.eval_shape(lambda: parameters(size))
  batch = {f: jax.ShapeDtypeStruct((size.rows, size.seq_len), jnp.int32) for f in size.features}
  stats = make_train_step(size).lower(params, batch).compile().memory_analysis()
  used = stats.argument_size_in_bytes + stats.output_size_in_bytes + stats.temp_size_in_bytes
  return int(used - stats.alias_size_in_bytes)


def device_memory() -> tuple[int, str]:
  """(bytes one device may use, what it is): the accelerator's limit, or this host's memory on CPU."""
  import jax  # noqa: PLC0415

  device = jax.devices()[0]
  limit = (device.memory_stats() or {}).get("bytes_limit")
  if limit:
    return int(limit), f"{device.device_kind} memory"
  return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"), f"this host's memory ({device.platform})"


def refusal(size_name: str) -> str | None:
  """The one line refusing a size that does not fit the device, else None."""
  needed, (limit, what) = memory_needed(SIZES[size_name]), device_memory()
  if needed <= limit:
    return None
  smaller = ", ".join(n for n in SIZES if n != size_name)
  return (
    f"--size {size_name}: its step needs {needed / 2**30:.1f} GiB, more than the {limit / 2**30:.1f} GiB of "
    f"{what}; run it on an accelerator, or give a smaller size ({smaller})"
  )


def pipeline_config(corpus: str, size: Size) -> Any:
  import jaxdata  # noqa: PLC0415

  return jaxdata.PipelineConfig.from_dict(
    {
      "datasets": [{"name": n, "path": os.path.join(corpus, n)} for n in TOKEN_SHARES],
      "mixture": {"weights": TOKEN_SHARES, "unit": "tokens"},
      "shuffle_block_size": "global",
      "exhausted_policy": "repeat",
      "packing": {"mode": "first_fit", "seq_len": size.seq_len},
      "batch": {"global_batch_size": size.rows, "features": list(size.features)},
    }
  )


def _timed_steps(train_step: Any, params: Any, batches: Any, count: int) -> tuple[Any, list[float], list[float]]:
  """Runs `count` steps on `batches` (an iterator), each waited for: (params, step seconds, losses)."""
  times, losses = [], []
  for _ in range(count):
    started = time.perf_counter()
    params, loss = train_step(params, next(batches))
    loss.block_until_ready()
    times.append(time.perf_counter() - started)
    losses.append(float(loss))
  return params, times, losses


def measure(corpus: str, size: Size) -> dict[str, Any]:
  import jax  # noqa: PLC0415

  import jaxdata  # noqa: PLC0415

  devices = jax.devices()
  mesh = jax.make_mesh((len(devices),), ("data",), axis_types=(jax.sharding.AxisType.Auto,))
  cfg = pipeline_config(corpus, size)
  total = WARMUP + size.steps
  # The batches on the device: the same pipeline's first `total` steps, placed before the clock starts.
  with jaxdata.Pipeline(cfg, mesh=mesh) as source:
    placed = [jax.block_until_ready(next(source)) for _ in range(total)]
  host = [{k: np.asarray(v) for k, v in b.items()} for b in placed]
  batch_bytes = sum(a.nbytes for a in host[0].values())
  train_step = make_train_step(size)
  params = parameters(size)
  n_params = count_parameters(params)
  params, _, _ = _timed_steps(train_step, params, iter(placed), 1)  # compiles
  params = parameters(size)  # both feeds start from the same parameters
  params, on_device_s, on_device_loss = _timed_steps(train_step, params, iter(placed), total)
  # jax.device_put of the same NumPy arrays, one call per step, waited for.
  sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("data"))
  put_s = []
  for batch in host[WARMUP:]:
    started = time.perf_counter()
    jax.block_until_ready(jax.device_put(batch, sharding))
    put_s.append(time.perf_counter() - started)
  del params
  params = parameters(size)
  started = time.perf_counter()
  pipe = jaxdata.Pipeline(cfg, mesh=mesh)
  first = next(pipe)
  first_batch_s = time.perf_counter() - started
  transfers: list[float] = []  # each step's own transfer time (its stats' "output" timer)
  params, fed_s, fed_loss = _fed(train_step, params, first, pipe, total, transfers)
  transfer_s = statistics.median(transfers[WARMUP:])
  state = pipe.get_state()
  expected = {k: np.asarray(v) for k, v in next(pipe).items()}
  pipe.close()
  started = time.perf_counter()
  with jaxdata.Pipeline(cfg, mesh=mesh) as restored:
    restored.set_state(state)
    again = next(restored)
    restore_s = time.perf_counter() - started
    restored_equal = all(np.array_equal(np.asarray(again[k]), expected[k]) for k in expected)
  on_device = statistics.median(on_device_s[WARMUP:])
  fed = statistics.median(fed_s[WARMUP:])
  return {
    "platform": devices[0].platform,
    "devices": len(devices),
    "device_kind": devices[0].device_kind,
    "parameters": n_params,
    "batch": [size.rows, size.seq_len],
    "features_fed": list(size.features),
    "batch_bytes": batch_bytes,
    "step_s_on_device": on_device,
    "step_s_jaxdata": fed,
    "added_per_step": fed / on_device - 1.0,
    "h2d_bytes_per_s_jaxdata": batch_bytes / transfer_s if transfer_s > 0 else float("inf"),
    "h2d_bytes_per_s_device_put": batch_bytes / statistics.median(put_s),
    "first_batch_s": first_batch_s,
    "restore_first_batch_s": restore_s,
    "restored_equal": restored_equal,
    "losses_equal": on_device_loss == fed_loss,
    "losses": fed_loss,
    "shares": _shares(host, cfg),
  }


def _fed(
  train_step: Any, params: Any, first: Any, pipe: Any, total: int, transfers: list[float]
) -> tuple[Any, list[float], list[float]]:
  """Steps fed by the pipeline as it yields (the first batch already taken); each step's transfer
  time is appended to `transfers`."""

  def batches() -> Any:
    batch = first
    while True:
      transfers.append(pipe.stats()["time_s"]["output"])
      yield batch
      batch = next(pipe)

  return _timed_steps(train_step, params, batches(), total)


def _shares(host: list[dict[str, np.ndarray]], cfg: Any) -> dict[str, float]:
  """Realised token shares of the batches fed (from a run of the same config with source ids)."""
  import jaxdata  # noqa: PLC0415

  raw = cfg.to_dict()
  raw["batch"]["features"] = ["source_ids"]
  counts = np.zeros(len(TOKEN_SHARES))
  with jaxdata.Pipeline(jaxdata.PipelineConfig.from_dict(raw), prefetch=0) as pipe:
    for _ in host:
      ids = next(pipe)["source_ids"]
      counts += np.bincount(ids[ids >= 0], minlength=len(TOKEN_SHARES))
  return dict(zip(TOKEN_SHARES, (counts / counts.sum()).round(4).tolist()))


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--size", choices=sorted(SIZES), default="accelerator")
  parser.add_argument("--corpus", default="/tmp/jaxdata-device-feed", help="written here if absent (uint32 ids)")
  parser.add_argument("--steps", type=positive_count, help="measured steps per feed (default: the size's)")
  args = parser.parse_args()
  size = SIZES[args.size]
  refused = refusal(args.size)
  if refused:
    print(refused, file=sys.stderr)
    sys.exit(2)
  if args.steps:
    size = dataclasses.replace(size, steps=args.steps)
  corpus = corpus_dir(args.corpus, VOCABS["uint32"])
  make_corpus(corpus, scale=size.corpus_scale, vocab_size=VOCABS["uint32"])
  result = measure(corpus, size)
  print(
    f"{result['platform']} x{result['devices']} ({result['device_kind']}), {result['parameters'] / 1e6:.0f}M params "
    f"bf16, batch {size.rows} x {size.seq_len}\n"
    f"  step on device-resident batches {result['step_s_on_device'] * 1e3:9.2f} ms\n"
    f"  step fed by jaxdata              {result['step_s_jaxdata'] * 1e3:9.2f} ms   "
    f"added {100 * result['added_per_step']:+.2f}% (goal <= 1%)\n"
    f"  host-to-device: jaxdata {result['h2d_bytes_per_s_jaxdata'] / 1e9:.2f} GB/s, "
    f"jax.device_put {result['h2d_bytes_per_s_device_put'] / 1e9:.2f} GB/s\n"
    f"  first batch {result['first_batch_s']:.3f} s, restore + first batch {result['restore_first_batch_s']:.3f} s "
    f"(equal: {result['restored_equal']})\n"
    f"  losses of both feeds identical: {result['losses_equal']}; realised shares {result['shares']} "
    f"(target {TOKEN_SHARES})",
    file=sys.stderr,
  )
  print(json.dumps(result))


if __name__ == "__main__":
  main()
