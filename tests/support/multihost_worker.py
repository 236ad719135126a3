"""One process of a multi-host pipeline run (started by test_multihost.py).

    python multihost_worker.py PORT NUM_PROCESSES PROCESS_ID CONFIG OUT_DIR STEPS [WORKERS]

Initialises jax.distributed on localhost with 4 CPU devices, builds a
("data",) mesh over all processes' devices, iterates the pipeline, and saves
for every step the addressable row blocks and the documents it read (with
WORKERS > 0, the pipeline's worker processes read: no read log), and for
remote datasets the bytes of shards it fetched.
"""

from __future__ import annotations

import contextlib
import os
import sys


def main() -> None:
  port, count, index, config, out_dir, steps = sys.argv[1:7]
  workers = int(sys.argv[7]) if len(sys.argv) > 7 else 0  # -1: no readers, the planner in its own process
  os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
  os.environ["JAX_PLATFORMS"] = "cpu"
  os.environ["JAXDATA_CACHE_DIR"] = os.path.join(out_dir, f"cache{index}")  # remote data: one cache per "host"
  import jax  # noqa: PLC0415 -- must follow the XLA_FLAGS set above
  import numpy as np  # noqa: PLC0415

  jax.config.update("jax_cpu_collectives_implementation", "gloo")
  jax.distributed.initialize(f"localhost:{port}", int(count), int(index))
  import jaxdata  # noqa: PLC0415

  cfg = jaxdata.load_config(config)
  devices = np.array(sorted(jax.devices(), key=lambda d: (d.process_index, d.id)))
  mesh = jax.sharding.Mesh(devices, ("data",))
  import jaxdata.testing  # noqa: PLC0415

  with contextlib.ExitStack() as stack:
    log = [] if workers else stack.enter_context(jaxdata.testing.recorded_reads())
    pipe = stack.enter_context(
      jaxdata.Pipeline(
        cfg,
        mesh=mesh,
        prefetch=2,
        read_ahead_tokens=2 * 8 * 32,
        making=jaxdata.StepMaking("process" if workers else "here", reader_processes=max(workers, 0)),
      )
    )
    jaxdata.testing.wait_for_processes(pipe)  # so that the steps saved are the workers', not the in-process start's
    for step in range(int(steps)):
      batch = next(pipe)
      arrays = {}
      for name, value in batch.items():
        for shard in value.addressable_shards:
          start = shard.index[0].start or 0
          arrays[f"{name}/{start}"] = np.asarray(shard.data)
      np.savez(os.path.join(out_dir, f"p{index}_step{step}.npz"), **arrays)
    state = pipe.get_state()
    if workers:  # (the planner's windows: prefetch may have made the first steps before it was ready)
      assert pipe.execution().steps_from_processes >= int(steps) - (2 if workers < 0 else 0)
    # Remote datasets: the bytes of shards this process fetched, per dataset.
    fetched = {
      d.name: ds.remote.fetched_bytes for d, ds in zip(cfg.datasets, jaxdata.testing.opened_datasets(pipe)) if ds.remote
    }
  reads = {f"{steps.start}-{steps.stop}/{name}": records for steps, name, records in log}
  np.savez(os.path.join(out_dir, f"p{index}_reads.npz"), **reads)
  import json  # noqa: PLC0415

  with open(os.path.join(out_dir, f"p{index}_state.json"), "w") as f:
    json.dump(state, f)
  with open(os.path.join(out_dir, f"p{index}_fetched.json"), "w") as f:
    json.dump(fetched, f)
  jax.distributed.shutdown()


if __name__ == "__main__":
  main()
