"""Block checksums of a token file: every range read from a store is checked against the index.

`jaxdata index` records, per token file, one uint64 per BLOCK_BYTES block
(``<stem>.blocks.npy``). A read from object storage is widened to whole
blocks and each block is checked before any of its tokens is used, so a
replaced object, a truncated or corrupted response body, or bytes of
another file are a `DatasetError` naming the file, never different tokens::

    file bytes     |<- block 0 ->|<- block 1 ->|<- block 2 ->|<- 3 ->|
    wanted range                      [=========]
    fetched        whole blocks 1..2, each summed and compared with blocks.npy[1:3]

A block's sum is the wrap-around (mod 2**64) sum of its 8-byte little-endian
words, each times an odd weight derived from the word's position in the
file (splitmix64 of the word's place in its block and of the block), plus
the block's byte count: any change of one word
changes it, a block moved to another place changes it, and random damage
passes with probability about 2**-64. It is a check against damage and
mix-ups, computed with NumPy at memory speed, not a cryptographic seal (the
manifest's sha256 is that, for the whole file).

>>> data = np.arange(40_000, dtype=np.uint16).tobytes()  # 80,000 bytes: blocks 0, 1 and a short 2
>>> sums = block_sums(data)
>>> bad_block(data[BLOCK_BYTES:], 1, sums) is None
True
>>> damaged = bytearray(data); damaged[BLOCK_BYTES + 5] ^= 1
>>> bad_block(bytes(damaged[BLOCK_BYTES:]), 1, sums)
1
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

__all__ = ["BLOCK_BYTES", "bad_block", "block_sums", "blocks_digest", "file_block_sums"]

BLOCK_BYTES = 1 << 13  # 8 KiB: 8 bytes of checksum per block (0.1% of the data); a read widens by < 2 blocks
_WORDS = BLOCK_BYTES // 8
_CHUNK_BLOCKS = 1 << 11  # file_block_sums reads 64 MiB at a time


def _mix(values: np.ndarray) -> np.ndarray:
  """splitmix64's finaliser: well-spread uint64s from consecutive integers."""
  with np.errstate(over="ignore"):
    z = (values.astype(np.uint64) + np.uint64(1)) * np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


_IN_BLOCK = _mix(np.arange(_WORDS))  # per word of a block; combined with a value per block below


def block_sums(data: bytes | memoryview | np.ndarray, first_block: int = 0) -> np.ndarray:
  """The sums of the blocks of `data`, which starts at block `first_block` of its file
  (every block whole but the file's last). The weight of word i of block b is
  (mix(i) XOR mix(b + 2**40)) | 1: odd, and different at every position of the file."""
  raw = np.frombuffer(data, np.uint8) if not isinstance(data, np.ndarray) else data.reshape(-1).view(np.uint8)
  size = raw.size
  blocks = -(-size // BLOCK_BYTES)
  padded = np.zeros(blocks * BLOCK_BYTES, np.uint8)
  padded[:size] = raw
  words = padded.view("<u8").reshape(blocks, _WORDS)
  per_block = _mix(np.arange(first_block, first_block + blocks, dtype=np.uint64) + np.uint64(1 << 40))
  with np.errstate(over="ignore"):
    weights = (_IN_BLOCK[None, :] ^ per_block[:, None]) | np.uint64(1)
    weights *= words
    sums = weights.sum(axis=1, dtype=np.uint64)
    lengths = np.full(blocks, BLOCK_BYTES, np.uint64)
    if blocks:
      lengths[-1] = size - (blocks - 1) * BLOCK_BYTES
    return sums + lengths


def file_block_sums(path: str, digest: Any = None) -> np.ndarray:
  """Every block's sum of a local file, reading it 64 MiB at a time; `digest` (a hashlib object), if
  given, is fed the same bytes, so indexing reads a file once for both."""
  out = []
  with open(path, "rb") as f:
    block = 0
    while True:
      chunk = f.read(_CHUNK_BLOCKS * BLOCK_BYTES)
      if not chunk:
        break
      if digest is not None:
        digest.update(chunk)
      out.append(block_sums(chunk, block))
      block += _CHUNK_BLOCKS
  return np.concatenate(out) if out else np.zeros(0, np.uint64)


def bad_block(data: bytes, first_block: int, expected: np.ndarray) -> int | None:
  """The first block of `data` (whole blocks from `first_block`; the last may be the file's
  short last one) whose sum differs from `expected[block]`, or None."""
  sums = block_sums(data, first_block)
  want = expected[first_block : first_block + sums.size]
  if want.size != sums.size:
    return first_block + want.size
  wrong = np.flatnonzero(sums != want)
  return first_block + int(wrong[0]) if wrong.size else None


def blocks_digest(sums: np.ndarray) -> str:
  """sha256 of block sums as little-endian uint64s: what the manifest records of a blocks file."""
  return hashlib.sha256(np.ascontiguousarray(sums, dtype="<u8").tobytes()).hexdigest()
