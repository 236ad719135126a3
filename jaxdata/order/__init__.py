"""Stage 2 of the data flow: each dataset's order, pass by pass. Depends on `config` only.

Its modules::

    feistel.py        key derivation, counter-based draws, the Feistel network
    permutation.py    `permute`: exact uniform permutations up to 2^20 elements, the Feistel network above
    dataset_order.py  `DatasetOrder`: shard / within-shard / block / global shuffles as a bijection per pass
    sampled.py        `SampledOrder`: draws with replacement (sampling windows)
    streaming.py      `ShardLanes`: k shards read side by side (`open_shards: k`)
    cursor.py         `DatasetCursor`: where a dataset stands in the stream, plus its look-ahead buffer
"""

from jaxdata.order.cursor import DatasetCursor
from jaxdata.order.dataset_order import DatasetOrder, ShuffleOptions
from jaxdata.order.feistel import derive_key
from jaxdata.order.permutation import permute

__all__ = ["DatasetCursor", "DatasetOrder", "ShuffleOptions", "derive_key", "permute"]
