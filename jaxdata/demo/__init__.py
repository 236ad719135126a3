"""`jaxdata demo`: the whole product on this machine (see `jaxdata.demo.run`).

    corpus.py   the demo datasets, built from what every Python install has
    model.py    the tiny language model (attention inside segments)
    run.py      corpus, pipeline, training, checkpoint and the restart check, wired
    online.py   `jaxdata demo --online doremi`: a controller steering the mixture every step
    sft.py      `jaxdata demo --sft`: fine-tuning on small conversation sets with masks
    dpo.py      `jaxdata demo --dpo`: a DPO loss on generated preference pairs, packed whole
    vision.py   `jaxdata demo --vision`: a tiny vision-language model on generated pictures of shapes
    ablate.py   `jaxdata ablate`: a fixed-budget mixture comparison with the demo's model

This module holds only what the CLI needs before JAX starts.
"""

from __future__ import annotations

import os

__all__ = ["DEVICES", "default_cache_dir", "xla_flags"]

DEVICES = 8


def default_cache_dir() -> str:
  base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
  return os.path.join(base, "jaxdata", "demo")


def xla_flags() -> str:
  """XLA_FLAGS with DEVICES emulated CPU devices (kept if already set)."""
  flags = os.environ.get("XLA_FLAGS", "")
  if "xla_force_host_platform_device_count" not in flags:
    flags = f"{flags} --xla_force_host_platform_device_count={DEVICES}".strip()
  return flags
