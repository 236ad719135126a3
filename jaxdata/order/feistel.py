"""Keyed randomness, computed per position: key derivation, counter-based
draws, and a Feistel network for permutations too large to store.

A permutation of a trillion records cannot be stored, so above a size
threshold jaxdata never builds one (`jaxdata.order.permutation`):
`feistel_permute(positions, n, key)` maps each position on its own through
an unbalanced Feistel network on ``bits = ceil(log2 n)`` bits, and walks the
cycle (re-applies the network) until the value lands back inside [0, n)::

    x (bits wide) = [ left | right ]
    round 0: left  ^= F(right, k0)        each round is invertible, so the
    round 1: right ^= F(left,  k1)        network is a bijection on 2**bits;
      ...                                 cycle-walking restricts it to [0, n)
    round 9: right ^= F(left,  k9)        (2**bits < 2n: under 2 walks on average)

F is splitmix64's finaliser of (half ^ round key ^ tweak salt). Ten rounds:
four left position and adjacency statistics visibly biased at n = 10^4.

``n`` and a ``tweak`` may vary per element, so one call can permute records
inside many shards or blocks of different sizes at once.

>>> p = feistel_permute(np.arange(10), 10, key=derive_key(0, "demo"))
>>> sorted(p.tolist()) == list(range(10))
True
"""

from __future__ import annotations

import hashlib
import json

import numpy as np

__all__ = ["GOLDEN", "check_domain", "derive_key", "feistel_permute", "mix64", "uniform"]

ROUNDS = 10
_U64 = np.uint64
GOLDEN = _U64(0x9E3779B97F4A7C15)
_MIX1 = _U64(0xBF58476D1CE4E5B9)
_MIX2 = _U64(0x94D049BB133111EB)


def derive_key(seed: int, *parts: str | int) -> int:
  """A 64-bit key hashed from a seed and labels (dataset, pass, level, ...).

  Hashing, not adding: seed 42 pass 1 and seed 43 pass 0 get unrelated keys.

  >>> derive_key(42, "web", 1) == derive_key(43, "web", 0)
  False
  """
  blob = json.dumps([int(seed), *parts], separators=(",", ":")).encode()
  return int.from_bytes(hashlib.blake2b(blob, digest_size=8).digest(), "little")


def mix64(v: np.ndarray) -> np.ndarray:
  """splitmix64's finaliser: a bijective avalanche on uint64 (in place)."""
  v ^= v >> _U64(30)
  v *= _MIX1
  v ^= v >> _U64(27)
  v *= _MIX2
  v ^= v >> _U64(31)
  return v


def _round_keys(key: int) -> list[np.uint64]:
  state = np.array([key], dtype=_U64)
  keys = []
  for _ in range(ROUNDS):
    state += GOLDEN
    keys.append(mix64(state.copy())[0])
  return keys


def _bit_length(v: np.ndarray) -> np.ndarray:
  """Number of bits needed for each value (0 -> 0), as uint64."""
  # float64 log2 is exact enough: values here are below 2**53 or powers of 2 - 1.
  out = np.zeros(v.shape, dtype=_U64)
  nonzero = v > 0
  out[nonzero] = np.floor(np.log2(v[nonzero].astype(np.float64))).astype(_U64) + _U64(1)
  return out


def check_domain(
  positions: np.ndarray | int, n: np.ndarray | int, tweak: np.ndarray | int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """Positions, sizes and tweaks as int64 arrays, checked: sizes in [1, 2**62],
  positions in [0, n), `n` and `tweak` scalar or shaped like `positions`."""
  x = np.asarray(positions, dtype=np.int64)
  sizes = np.asarray(n, dtype=np.int64)
  tweaks = np.asarray(tweak, dtype=np.int64)
  for name, value in (("n", sizes), ("tweak", tweaks)):
    if value.ndim and value.shape != x.shape:
      raise ValueError(f"{name}: shape {value.shape} does not match positions {x.shape}")
  if x.size == 0:
    return x, sizes, tweaks
  if sizes.min() < 1 or sizes.max() > 1 << 62:
    raise ValueError(f"n: domain sizes must lie in [1, 2**62], got {sizes.min()}..{sizes.max()}")
  outside = (x < 0) | (x >= sizes)
  if outside.any():
    bad = np.flatnonzero(outside.ravel())[0]
    size = sizes.ravel()[bad] if sizes.ndim else sizes
    raise ValueError(f"positions: {x.ravel()[bad]} is outside [0, {size})")
  return x, sizes, tweaks


def feistel_permute(
  positions: np.ndarray | int,
  n: np.ndarray | int,
  key: int,
  tweak: np.ndarray | int = 0,
) -> np.ndarray:
  """Maps each position in [0, n) to its image under the keyed Feistel
  bijection; arguments and result as for `jaxdata.order.permutation.permute`.
  Works in chunks of `_CHUNK` positions, so extra memory stays a few MB
  whatever the input."""
  x, sizes, tweaks = check_domain(positions, n, tweak)
  if x.size == 0:
    return x.copy()
  keys = _round_keys(key)
  flat_x, flat_n, flat_t = x.ravel(), sizes.ravel(), tweaks.ravel()
  out = np.empty(flat_x.size, dtype=np.int64)
  for start in range(0, flat_x.size, _CHUNK):
    part = slice(start, start + _CHUNK)
    out[part] = _permute_chunk(
      flat_x[part],
      flat_n[part] if sizes.ndim else flat_n,
      flat_t[part] if tweaks.ndim else flat_t,
      keys,
    )
  return out.reshape(x.shape)


_CHUNK = 1 << 18


def _permute_chunk(x: np.ndarray, sizes: np.ndarray, tweaks: np.ndarray, keys: list[np.uint64]) -> np.ndarray:
  """`permute` on a flat chunk; `sizes` / `tweaks` have 1 or len(x) elements."""
  salt = mix64(tweaks.astype(_U64) * GOLDEN + _U64(0x632BE59BD9B4E019))
  # bits to cover [0, n): bit_length(n - 1), at least 2 so both halves exist.
  bits = np.maximum(_bit_length((sizes - 1).astype(_U64)), _U64(2))
  right_bits = bits >> _U64(1)
  right_mask = (_U64(1) << right_bits) - _U64(1)
  left_mask = (_U64(1) << (bits - right_bits)) - _U64(1)
  limit = sizes.astype(_U64)
  per_element = [a for a in (salt, right_bits, right_mask, left_mask, limit)]
  out = x.astype(_U64)
  todo = None  # None: every element of the chunk
  while True:
    params = [a if a.size == 1 or todo is None else a[todo] for a in per_element]
    current = out if todo is None else out[todo]
    y = _feistel(current, params[1], params[2], params[3], params[0], keys)
    walk = y >= params[4]
    if todo is None:
      out = y
      todo = np.flatnonzero(walk)
    else:
      out[todo] = y
      todo = todo[walk]
    if not todo.size:
      return out.astype(np.int64)


def _feistel(
  x: np.ndarray,
  right_bits: np.ndarray,
  right_mask: np.ndarray,
  left_mask: np.ndarray,
  tweak: np.ndarray,
  keys: list[np.uint64],
) -> np.ndarray:
  left = x >> right_bits
  right = x & right_mask
  for r, k in enumerate(keys):
    salt = tweak + k
    if r % 2 == 0:
      left ^= mix64(right ^ salt) & left_mask
    else:
      right ^= mix64(left ^ salt) & right_mask
  return (left << right_bits) | right


def uniform(key: int, counters: np.ndarray) -> np.ndarray:
  """Counter-based uniform floats in [0, 1): one per counter, a pure function
  of (key, counter), so draw i never depends on how many came before it.

  >>> u = uniform(derive_key(0, "mix"), np.arange(3))
  >>> bool(((u >= 0) & (u < 1)).all()), bool(uniform(derive_key(0, "mix"), np.arange(1, 2))[0] == u[1])
  (True, True)
  """
  state = np.asarray(counters, dtype=np.int64).astype(_U64) * GOLDEN
  state ^= np.uint64(key)
  bits = mix64(mix64(state) + GOLDEN)
  return (bits >> _U64(11)).astype(np.float64) * (1.0 / (1 << 53))
