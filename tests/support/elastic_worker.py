"""One process of a checkpoint / resume run (started by test_elastic.py).

    python elastic_worker.py PORT COUNT INDEX DEVICES CONFIG CKPT OUT MODE SAVE_AT STEPS

MODE save: iterate SAVE_AT steps on a ("data",) mesh over all processes'
devices, save the pipeline with Orbax, stop. MODE restore: restore the
latest checkpoint, iterate STEPS steps, save this process's row blocks of
every batch to OUT/p{INDEX}_step{k}.npz. MODE run: iterate forever, saving at
SAVE_AT and logging batch digests to OUT/digests.txt (for the crash test).
"""

from __future__ import annotations

import hashlib
import os
import sys
import time


def main() -> None:
  port, count, index, devices, config, ckpt, out_dir, mode, save_at, steps = sys.argv[1:]
  count, index, save_at, steps = int(count), int(index), int(save_at), int(steps)
  os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
  os.environ["JAX_PLATFORMS"] = "cpu"
  import jax  # noqa: PLC0415 -- must follow the XLA_FLAGS set above
  import numpy as np  # noqa: PLC0415
  import orbax.checkpoint as ocp  # noqa: PLC0415

  if count > 1:
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(f"localhost:{port}", count, index)
  import jaxdata  # noqa: PLC0415

  cfg = jaxdata.load_config(config)
  devices_sorted = np.array(sorted(jax.devices(), key=lambda d: (d.process_index, d.id)))
  mesh = jax.sharding.Mesh(devices_sorted, ("data",))
  manager = ocp.CheckpointManager(ckpt)
  with jaxdata.Pipeline(cfg, mesh=mesh, prefetch=2) as pipe:
    if mode == "save":
      for _ in range(save_at):
        next(pipe)
      manager.save(save_at, args=ocp.args.Composite(data=jaxdata.checkpoint.Save(pipe)))
      manager.wait_until_finished()
    elif mode == "restore":
      manager.restore(manager.latest_step(), args=ocp.args.Composite(data=jaxdata.checkpoint.Restore(pipe)))
      for step in range(steps):
        batch = next(pipe)
        arrays = {}
        for name, value in batch.items():
          for shard in value.addressable_shards:
            arrays[f"{name}/{shard.index[0].start or 0}"] = np.asarray(shard.data)
        np.savez(os.path.join(out_dir, f"p{index}_step{step}.npz"), **arrays)
    else:  # run: the crash test kills this process at some step after the save
      log = open(os.path.join(out_dir, "digests.txt"), "a")
      step = 0
      if manager.latest_step() is not None:
        step = manager.latest_step()
        manager.restore(step, args=ocp.args.Composite(data=jaxdata.checkpoint.Restore(pipe)))
      params = {"w": jax.numpy.arange(4.0) * step}
      while step < steps:
        batch = next(pipe)
        digest = hashlib.sha256(b"".join(np.asarray(batch[k]).tobytes() for k in sorted(batch))).hexdigest()
        step += 1
        log.write(f"{step} {digest}\n")
        log.flush()
        if step == save_at:
          manager.save(
            step, args=ocp.args.Composite(model=ocp.args.StandardSave(params), data=jaxdata.checkpoint.Save(pipe))
          )
          manager.wait_until_finished()
        time.sleep(0.02)
  manager.close()
  if count > 1:
    jax.distributed.shutdown()


if __name__ == "__main__":
  main()
