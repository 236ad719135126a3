"""`permute`: keyed random permutations of [0, n), looked up position by position.

Two regimes, chosen per element by its domain size n::

    n <= EXACT_MAX (2^20)   exact: every element i < n gets the 64-bit key
                            splitmix64(salt(key, tweak, n) + i * golden); the
                            permutation is the order of those keys (argsort).
                            Uniform over all n! orders, except when two keys
                            collide (probability < n^2 / 2^65, < 3e-8).
                            Groups of 256+ elements are sorted once and cached.
    n >  EXACT_MAX          a 10-round keyed Feistel network with cycle walking
                            (`feistel_permute`): O(1) memory for any n, a
                            pseudo-random bijection (not every order reachable).

``n`` and ``tweak`` may vary per element, so one call permutes records
inside many shards or blocks of different sizes at once; a (tweak, n) pair
selects an independent permutation.

>>> p = permute(np.arange(6), 6, key=derive_key(0, "demo"))
>>> sorted(p.tolist()) == list(range(6)), p.tolist() == permute(np.arange(6), 6, derive_key(0, "demo")).tolist()
(True, True)
"""

from __future__ import annotations

import collections
import threading

import numpy as np

from jaxdata.order.feistel import GOLDEN, check_domain, derive_key, feistel_permute, mix64

__all__ = [
  "CACHED_MIN",
  "EXACT_MAX",
  "derive_key",
  "forget_permutations",
  "permute",
  "release_permutations",
  "reserve_permutations",
  "stable_argsort",
]

EXACT_MAX = 1 << 20
_SMALL = 256  # groups below this size are sorted together, vectorised, uncached
CACHED_MIN = _SMALL  # the smallest permutation the cache holds
_SMALL_BATCH = 1 << 14  # positions per vectorised batch: at most 4M keys sorted at once
_CACHE_ENTRIES = 1 << 23  # cached permutation entries (int32): 32 MB, plus what the orders in use reserve
_U64 = np.uint64
_SIZE_SALT = _U64(0xD6E8FEB86659FD93)


def permute(
  positions: np.ndarray | int,
  n: np.ndarray | int,
  key: int,
  tweak: np.ndarray | int = 0,
) -> np.ndarray:
  """The image of each position in [0, n) under the permutation selected by
  (key, tweak, n); int64, shaped like `positions`.

  Args:
    positions: int array (any shape) of values in [0, n).
    n: domain size, scalar or an array shaped like `positions`; up to 2**62.
    key: 64-bit key from `derive_key`.
    tweak: selects an independent permutation per element (a shard or block
      index), scalar or an array shaped like `positions`.
  """
  x, sizes, tweaks = check_domain(positions, n, tweak)
  if x.size == 0:
    return x.copy()
  if sizes.ndim == 0 and tweaks.ndim == 0:  # one permutation: no grouping
    size, one_tweak = int(sizes), int(tweaks)
    if size > EXACT_MAX:
      return feistel_permute(x, size, key, one_tweak)
    if size < _SMALL:
      return _image(key, one_tweak, size)[x].astype(np.int64)
    return _CACHE.get(key, one_tweak, size)[x].astype(np.int64)
  flat_x = x.ravel()
  flat_n = np.broadcast_to(sizes.ravel() if sizes.ndim else sizes, flat_x.shape)
  flat_t = np.broadcast_to(tweaks.ravel() if tweaks.ndim else tweaks, flat_x.shape)
  out = np.empty(flat_x.size, dtype=np.int64)
  large = flat_n > EXACT_MAX
  small = flat_n < _SMALL
  for mask, method in ((large, feistel_permute), (small, _sorted_together), (~large & ~small, _sorted_once)):
    if mask.any():
      out[mask] = method(flat_x[mask], flat_n[mask], key, flat_t[mask])
  return out.reshape(x.shape)


def _salts(key: int, tweaks: np.ndarray, sizes: np.ndarray) -> np.ndarray:
  """One 64-bit salt per (key, tweak, n): independent streams of sort keys."""
  state = mix64(tweaks.astype(_U64) * GOLDEN ^ _U64(key))
  return mix64(state + sizes.astype(_U64) * _SIZE_SALT)


def _sort_keys(salts: np.ndarray, local: np.ndarray) -> np.ndarray:
  """splitmix64's output for counter `local` of the stream seeded by `salts`."""
  return mix64(salts + (local.astype(_U64) + _U64(1)) * GOLDEN)


def _image(key: int, tweak: int, size: int) -> np.ndarray:
  """The permutation of (key, tweak, size): image[i] for every i < size (int32)."""
  salt = _salts(key, np.array([tweak]), np.array([size]))
  return stable_argsort(_sort_keys(salt, np.arange(size))).astype(np.int32)


def stable_argsort(keys: np.ndarray) -> np.ndarray:
  """`np.argsort(keys, kind="stable")` of uint64 keys, 5x faster for 2^20 of them.

  Each key's high bits and its index share one uint64, sorted by value (a
  plain sort is much faster than an argsort); runs whose high bits tie are
  then ordered by their full keys, index breaking ties::

      packed = key >> b << b | index      (b = bits of the largest index)
      sort(packed)                        order by (key >> b, index)
      runs of equal key >> b              re-sorted by (key, index): rare (n^2 / 2^(65-b) pairs)

  >>> keys = np.array([7 << 60, 3, 3, 1 << 62], dtype=np.uint64)
  >>> stable_argsort(keys).tolist() == np.argsort(keys, kind="stable").tolist()
  True
  """
  size = keys.size
  bits = max(1, (size - 1).bit_length())
  packed = (keys >> _U64(bits)) << _U64(bits) | np.arange(size, dtype=_U64)
  packed.sort()
  order = (packed & _U64((1 << bits) - 1)).astype(np.int64)
  high = packed >> _U64(bits)
  tied = np.flatnonzero(high[1:] == high[:-1])
  if tied.size:
    starts = tied[np.concatenate([[True], tied[1:] != tied[:-1] + 1])]
    ends = tied[np.concatenate([tied[1:] != tied[:-1] + 1, [True]])] + 2
    for start, end in zip(starts.tolist(), ends.tolist()):
      run = order[start:end]
      order[start:end] = run[np.lexsort((run, keys[run]))]
  return order


def _groups(sizes: np.ndarray, tweaks: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """Distinct (n, tweak) pairs: their sizes, tweaks, and each element's group."""
  order = np.lexsort((tweaks, sizes))
  sorted_sizes, sorted_tweaks = sizes[order], tweaks[order]
  first = np.ones(order.size, dtype=bool)
  first[1:] = (sorted_sizes[1:] != sorted_sizes[:-1]) | (sorted_tweaks[1:] != sorted_tweaks[:-1])
  group_of_element = np.empty(order.size, dtype=np.int64)
  group_of_element[order] = np.cumsum(first) - 1
  return sorted_sizes[first], sorted_tweaks[first], group_of_element


def _sorted_together(x: np.ndarray, sizes: np.ndarray, key: int, tweaks: np.ndarray) -> np.ndarray:
  """Small domains: all groups' keys generated and sorted in one lexsort."""
  out = np.empty(x.size, dtype=np.int64)
  for start in range(0, x.size, _SMALL_BATCH):
    part = slice(start, start + _SMALL_BATCH)
    group_size, group_tweak, group_of_element = _groups(sizes[part], tweaks[part])
    starts = np.cumsum(group_size) - group_size
    group = np.repeat(np.arange(group_size.size), group_size)
    local = np.arange(group.size) - starts[group]
    keys = _sort_keys(_salts(key, group_tweak, group_size)[group], local)
    order = np.lexsort((keys, group))  # by group, then by key: each group's argsort, concatenated
    image = order - starts[group]
    out[part] = image[starts[group_of_element] + x[part]]
  return out


class _PermutationCache:
  """Least recently used permutations, bounded by their total entries."""

  def __init__(self, max_entries: int) -> None:
    self.max_entries = max_entries
    self.reserved = 0  # entries the orders in use asked to keep (reserve_permutations), beyond max_entries
    self.entries = 0
    self.table: collections.OrderedDict[tuple[int, int, int], np.ndarray] = collections.OrderedDict()
    self.lock = threading.RLock()  # reentrant: an order's finalizer may run inside get / forget (gc)

  def get(self, key: int, tweak: int, size: int) -> np.ndarray:
    with self.lock:
      found = self.table.get((key, tweak, size))
      if found is not None:
        self.table.move_to_end((key, tweak, size))
        return found
    image = _image(key, tweak, size)
    with self.lock:
      self.table[(key, tweak, size)] = image
      self.entries += size
      while self.entries > self.max_entries + self.reserved and len(self.table) > 1:
        _, evicted = self.table.popitem(last=False)
        self.entries -= evicted.size
    return image

  def forget(self, keys: set[int] | None) -> None:
    """Drops every permutation of these keys (a finished pass's: the stream will not ask again); None: all."""
    with self.lock:
      for entry in [e for e in self.table if keys is None or e[0] in keys]:
        self.entries -= self.table.pop(entry).size


_CACHE = _PermutationCache(_CACHE_ENTRIES)


def reserve_permutations(entries: int) -> None:
  """Lets the cache hold `entries` more: an order whose permutation it looks up every step (a global
  shuffle of up to EXACT_MAX records) reserves its size. Without it, a mixture whose permutations
  together exceed the cache (100 datasets of 10^6 documents: 10^8 entries) evicts each one before
  its next use and sorts 10^6 keys per dataset per step (40 s a step instead of 50 ms)."""
  with _CACHE.lock:
    _CACHE.reserved += entries


def release_permutations(entries: int) -> None:
  """Gives back what `reserve_permutations` reserved (the order is gone)."""
  with _CACHE.lock:
    _CACHE.reserved -= entries


def forget_permutations(keys: set[int] | None = None) -> None:
  """Frees the cached permutations of `keys`, or all of them (recomputed, identical, if ever asked for again)."""
  _CACHE.forget(keys)


def _sorted_once(x: np.ndarray, sizes: np.ndarray, key: int, tweaks: np.ndarray) -> np.ndarray:
  """Domains of 256 .. EXACT_MAX elements: each group's permutation is
  computed once (O(n log n)) and cached, then looked up."""
  group_size, group_tweak, group_of_element = _groups(sizes, tweaks)
  out = np.empty(x.size, dtype=np.int64)
  by_group = np.argsort(group_of_element, kind="stable")
  bounds = np.searchsorted(group_of_element[by_group], np.arange(group_size.size + 1))
  for g in range(group_size.size):
    members = by_group[bounds[g] : bounds[g + 1]]
    image = _CACHE.get(key, int(group_tweak[g]), int(group_size[g]))
    out[members] = image[x[members]]
  return out
