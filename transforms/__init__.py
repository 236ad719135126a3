"""Stage 4 of the data flow: packing documents into rows, planned from lengths.

`pieces` (`Pieces`: parts of documents as parallel arrays), `fit` (row
placement for first / best fit), `strategies` (the `PackingStrategy` of
each mode), `packing` (`Packer`, `StepPlan`), `packer_state` (`PackerState`:
its done flag and carry, typed), `assemble` (a step's NumPy rows from its plan
and the documents' tokens), `kernels` (the per-step loops, in C from
``_native.c`` where it was built, else NumPy: the same outputs) and
`pairs` (preference pairs laid out whole, `packing.pairs`),
`balance` (rows spread so every host's block reads a similar amount) and
`budgets` (whole image-text examples into rows of three budgets: tokens,
patches, images; `BudgetFit`, the strategy of packing.images) and
`image_rows` (each row's images decoded into patches beside their tokens).
Depends on `config` only: documents arrive through the `DocumentSource`
protocol, so nothing here imports the stream.

This directory sits at the repository root and installs as
``jaxdata.transforms`` (see ``pyproject.toml``); no top-level
``transforms`` module is installed.
"""

from jaxdata.transforms.assemble import FEATURES, DocumentTokens, RowPlacement, assemble_rows
from jaxdata.transforms.fit import best_fit, first_fit
from jaxdata.transforms.packing import DocumentSource, Packer, PackingStrategy, StepPlan, packing_strategy
from jaxdata.transforms.pieces import Pieces

__all__ = [
  "DocumentSource",
  "DocumentTokens",
  "FEATURES",
  "Packer",
  "PackingStrategy",
  "Pieces",
  "RowPlacement",
  "StepPlan",
  "assemble_rows",
  "best_fit",
  "first_fit",
  "packing_strategy",
]
