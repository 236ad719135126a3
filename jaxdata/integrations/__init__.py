"""Integrations with the tools people already run (each module is another tool's API).

Its modules::

    maxtext.py         a pipeline from MaxText's data config keys, MaxText's batch features
    maxtext_keys.py    MaxText's data keys -> a `PipelineConfig` (honoured or refused; the table in maxtext_keys.json)
    maxtext_files.py   MaxText's file keys: train-file specs, mixture files, each glob's dataset selected whole
    maxtext_tokenizer.py  MaxText's tokenizer keys: special ids, tokenizer_path checked against the datasets
    maxtext_values.py  MaxText's data keys' types, checked where they enter
    maxtext_hf.py      MaxText's dataset_type hf: the files load_dataset would read, converted when opened
    maxtext_olmo.py    MaxText's dataset_type olmo_grain: OLMo's flat token files read in place as windows
    megatron.py        Megatron's --data-path blend and --split as a jaxdata mixture
    levanter.py        Levanter's chat dataset format -> conversion options (the same masks)
    grain.py           `PipelineDataset`: a pipeline as a Grain `IterDataset` / `DatasetIterator`
    grain_mixture.py   `MixtureDataset`: jaxdata's mixture stage as a Grain `IterDataset` of documents
"""

from jaxdata._lazy import lazy_exports

__all__ = ["MixtureDataset", "PipelineDataset"]

__getattr__, __dir__ = lazy_exports(
  __name__,
  {"MixtureDataset": "jaxdata.integrations.grain_mixture", "PipelineDataset": "jaxdata.integrations.grain"},
  package_globals=globals(),
)
