"""Stage 3 of the data flow: the mixture of datasets as one stream of documents.
Depends on `config`, `sources` and `order`.

    stream.py       `DocumentStream`, `DocBatch`, `DocRef`: the mixture as one deterministic stream
    documents.py    `DocRef`, `DocBatch`: documents of the stream, one at a time or as columns
    weights.py      `MixtureWeights`: the weights each step draws with (schedule, updates, config changes)
    endless.py      refusals of a stream that could never end
    stream_state.py `StreamState`: where the stream stands (cursors, interleave, updates), typed and frozen
    metadata.py     `DatasetMeta`: what the mixture needs of a dataset, loaded for a config
    interleave.py   which dataset supplies each next document: the `Interleave` strategies, exact or random
    pick_loops.py   the loops that pick, one document at a time
    updates.py      `MixtureUpdates`: weights the training loop sets while the stream runs
    changes.py      `ConfigChange`: a change of config at a restore, one entry of the stream's history
    holdout.py      held-out documents: chosen by a keyed order, never trained on
"""

from jaxdata.mixture.documents import DocBatch, DocRef
from jaxdata.mixture.interleave import ExactInterleave, Interleave, RandomInterleave, make_interleave
from jaxdata.mixture.stream import DatasetMeta, DocumentStream

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
