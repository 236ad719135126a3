"""Row placement for the fit packers: which row each piece goes to.

Both take piece lengths in placement order and return a row per piece (-1:
no row has room), in O(log rows) per piece; plain Python ints, since the
loop is inherently sequential. These are the reference versions: packing
places through `kernels.first_fit_rows`, which runs `first_fit` in C where
the extension was built (the same rows, tested against this one).

`documents` keeps a split document's pieces in order: pieces with the same
id >= 0 belong to one document, in offset order; once one of them finds no
row, the later ones are not placed either (they wait for the next step),
so a document's pieces never come out of order.
"""

from __future__ import annotations

import bisect

__all__ = ["best_fit", "first_fit"]


def first_fit(
  lengths: list[int], rows: int, seq_len: int, documents: list[int] | None = None, max_segments: int = 0
) -> list[int]:
  """Row of each length (-1: no room), lowest row with room first; with
  `max_segments` > 0, a row holding that many pieces takes no more.

  A max segment tree over the rows' free space (-1 for a closed row): O(log rows) per piece.

  >>> first_fit([3, 3, 2, 2], rows=2, seq_len=5)
  [0, 1, 0, 1]
  """
  size = 1
  while size < rows:
    size *= 2
  tree = [-1] * (2 * size)
  tree[size : size + rows] = [seq_len] * rows
  for node in range(size - 1, 0, -1):
    left, right = tree[2 * node], tree[2 * node + 1]
    tree[node] = left if left > right else right
  out = []
  blocked: set[int] = set()
  segments = [0] * rows
  for i, length in enumerate(lengths):
    document = documents[i] if documents is not None else -1
    if tree[1] < length or document in blocked:
      out.append(-1)
      if document >= 0:
        blocked.add(document)
      continue
    node = 1
    while node < size:
      node <<= 1
      if tree[node] < length:
        node += 1
    out.append(node - size)
    tree[node] -= length
    segments[node - size] += 1
    if segments[node - size] == max_segments:
      tree[node] = -1  # the row is closed
    node >>= 1
    while node:
      left, right = tree[2 * node], tree[2 * node + 1]
      top = left if left > right else right
      if tree[node] == top:
        break
      tree[node] = top
      node >>= 1
  return out


def best_fit(
  lengths: list[int], rows: int, seq_len: int, documents: list[int] | None = None, max_segments: int = 0
) -> list[int]:
  """Row of each length (-1: no room), the row with the least room that fits
  (ties: lowest row); with `max_segments` > 0, a row holding that many pieces
  takes no more. Keys free << 32 | row kept sorted: O(log rows) search.

  >>> best_fit([3, 3, 2, 2], rows=2, seq_len=5)
  [0, 1, 0, 1]
  """
  shift = 32
  keys = [(seq_len << shift) | r for r in range(rows)]  # sorted: equal free space, rows ascending
  mask = (1 << shift) - 1
  out = []
  blocked: set[int] = set()
  segments = [0] * rows
  for index, length in enumerate(lengths):
    document = documents[index] if documents is not None else -1
    i = bisect.bisect_left(keys, length << shift)
    if i == len(keys) or document in blocked:
      out.append(-1)
      if document >= 0:
        blocked.add(document)
      continue
    key = keys.pop(i)
    row = key & mask
    segments[row] += 1
    if segments[row] != max_segments:  # else the row is closed: its key stays out
      bisect.insort(keys, (((key >> shift) - length) << shift) | row)
    out.append(row)
  return out
