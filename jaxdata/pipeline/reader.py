"""`DocumentReader`: the tokens of a set of document pieces, in one batched read per dataset.

Every distinct document is read once, however many pieces of it there are::

    pieces (dataset, record, ...)  ->  per dataset: unique records -> TokenDataset.read (one call)
                                   ->  flat tokens of all datasets + start of each piece's document
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from jaxdata.pipeline.vocabulary import TokenBound
from jaxdata.sources.dataset import TokenDataset
from jaxdata.transforms.pieces import Pieces

__all__ = ["DocumentReader", "ReadLog"]

ReadLog = list[tuple[range, str, np.ndarray]]  # (steps, dataset, records) of every read


class DocumentReader:
  """Reads pieces' documents from `datasets` (in config order).

  Every token read is held to `bound` (see `jaxdata.pipeline.vocabulary`).
  `read_log`, if a list, gets (steps, dataset name, records) of every read.
  """

  def __init__(
      self, datasets: Sequence[TokenDataset], names: Sequence[str], bound: TokenBound,
      read_log: ReadLog | None = None,
  ) -> None:
    self.datasets = list(datasets)
    self.names = tuple(names)
    self.bound = bound
    self.read_log = read_log

  def read(self, steps: range, pieces: Pieces) -> tuple[np.ndarray, np.ndarray]:
    """(flat tokens, start of each piece's document in them) for `pieces` of `steps`."""
    parts, doc_start, base = [], np.zeros(len(pieces), np.int64), 0
    for d, dataset in enumerate(self.datasets):
      mine = np.flatnonzero(pieces.dataset == d)
      if not mine.size:
        continue
      records, inverse = np.unique(pieces.record[mine], return_inverse=True)
      if self.read_log is not None:
        self.read_log.append((steps, self.names[d], records))
      ragged = dataset.read(*dataset.locate(records))
      self.bound.check(dataset, records, ragged.tokens, ragged.offsets)
      parts.append(ragged.tokens)
      doc_start[mine] = base + ragged.offsets[:-1][inverse]
      base += ragged.tokens.size
    tokens = np.concatenate(parts) if parts else np.zeros(0, np.int64)
    return tokens, doc_start

  def close(self) -> None:
    for dataset in self.datasets:
      dataset.close()
