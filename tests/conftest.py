"""Shared test setup: an 8-device CPU mesh for JAX and small real corpora."""

from __future__ import annotations

import json
import os
import sys

# Must happen before JAX initialises its backend (any test importing jax).
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# Test support modules (fixtures, workers, campaigns) live in tests/support/: tests import them by name.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "support"))

import numpy as np
import pytest
from hypothesis import settings

settings.register_profile("jaxdata", deadline=None, max_examples=40, derandomize=True)
settings.load_profile("jaxdata")

WORDS = ["alpha", "beta", "gamma", "delta", "épsilon", "zeta", "eta", "θeta", "iota", "kappa"]


def make_texts(count: int, seed: int = 0) -> list[str]:
  """`count` documents of random words (some non-ASCII), lengths 1..60 words."""
  rng = np.random.default_rng(seed)
  return [" ".join(rng.choice(WORDS, size=int(rng.integers(1, 60))).tolist()) for _ in range(count)]


def write_jsonl(path: str, texts: list[str], field: str = "text") -> str:
  with open(path, "w", encoding="utf-8") as f:
    for text in texts:
      f.write(json.dumps({field: text, "id": len(text)}) + "\n")
  return path


@pytest.fixture
def texts() -> list[str]:
  return make_texts(300)
