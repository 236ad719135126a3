"""Stage 3 of the data flow: the mixture of datasets as one stream of documents.

`stream` (`DocumentStream`, `DocBatch`, `DocRef`, `DatasetMeta`) and
`interleave` (which dataset supplies each next document: the `Interleave`
strategies, exact or random). Depends on `config`, `sources` and `order`.
"""

from jaxdata.mixture.interleave import ExactInterleave, Interleave, RandomInterleave, make_interleave
from jaxdata.mixture.stream import DatasetMeta, DocBatch, DocRef, DocumentStream

__all__ = [
  "DatasetMeta",
  "DocBatch",
  "DocRef",
  "DocumentStream",
  "ExactInterleave",
  "Interleave",
  "RandomInterleave",
  "make_interleave",
]
