"""Stage 2 of the data flow: each dataset's order, pass by pass.

`feistel` (key derivation, counter-based draws, the Feistel network),
`permutation` (`permute`: exact uniform permutations up to 2^20 elements,
the Feistel network above), `dataset_order`
(`DatasetOrder`: shard / within-shard / block / global shuffles of one
dataset as a position -> record bijection per pass) and `cursor`
(`DatasetCursor`: where a dataset stands in the stream, plus its
look-ahead buffer). Depends on `config` only.
"""

from jaxdata.order.cursor import DatasetCursor
from jaxdata.order.dataset_order import DatasetOrder, ShuffleOptions
from jaxdata.order.feistel import derive_key
from jaxdata.order.permutation import permute

__all__ = ["DatasetCursor", "DatasetOrder", "ShuffleOptions", "derive_key", "permute"]
