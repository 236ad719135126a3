"""Datasets from Python: any iterable of texts or token lists, or a Hugging Face `datasets.Dataset`.

Both stream through the same `DatasetWriter` as `jaxdata convert`, in
batches, so memory stays bounded; the `datasets` package is not imported
(anything with ``.iter(batch_size=...)`` yielding column dicts, or any
iterable of rows, works).

>>> import tempfile
>>> out = tempfile.mkdtemp()
>>> from_iterable(["hello", "", [7, 8, 9]], out=out + "/ds").num_records  # the empty text is skipped
2
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from jaxdata.conversion.example_fields import labels_mask
from jaxdata.conversion.output import prepare_output
from jaxdata.conversion.tokenizers import (
  Tokenizer,
  TokenizerSpec,
  TransformersTokenizer,
  dtype_for_vocab_size,
  load_tokenizer,
)
from jaxdata.errors import InputFormatError
from jaxdata.sources.manifest import Manifest
from jaxdata.sources.writer import DatasetWriter

__all__ = ["from_hf_dataset", "from_iterable"]

BATCH = 1024


def _is_pair(item: Any) -> bool:
  """A (token ids, mask) pair: a tuple of two sequences (a text in the first place is one too, and is
  refused by `_mask_of`: a mask goes with ids)."""

  def sequence(part: Any) -> bool:
    return hasattr(part, "__len__") and not isinstance(part, (str, bytes, dict))

  return (
    isinstance(item, tuple) and len(item) == 2 and (sequence(item[0]) or isinstance(item[0], str)) and sequence(item[1])
  )


def _tokens_of(item: Any, index: int) -> np.ndarray | None:
  """A token list as int64 ids, None for a text; anything else is an error naming the item."""
  if isinstance(item, str):
    return None
  if isinstance(item, (bytes, dict)) or not hasattr(item, "__len__"):
    raise InputFormatError(f"item {index}: expected a str or a sequence of token ids, got {type(item).__name__}")
  try:
    ids = np.asarray(item)
  except ValueError:  # a ragged or nested sequence
    ids = np.asarray(item, dtype=object)
  if ids.ndim != 1 or (ids.size and ids.dtype.kind not in "iu"):
    raise InputFormatError(
      f"item {index}: token ids must be a flat sequence of ints, got dtype {ids.dtype} shape {ids.shape}"
    )
  return ids.astype(np.int64)


def _mask_of(item: Any, ids: np.ndarray | None, index: int) -> np.ndarray | None:
  """The 0 / 1 mask of a (tokens, mask) pair, checked against its ids; None for any other item."""
  if not _is_pair(item):
    return None
  mask = np.asarray(item[1])
  if ids is None:
    raise InputFormatError(f"item {index}: a mask goes with token ids, not with a text (tokenize it first)")
  if mask.ndim != 1:
    raise InputFormatError(
      f"item {index}: its mask has shape {mask.shape}; give a flat list of one 0 / 1 per token id ({ids.size})"
    )
  if mask.size != ids.size:
    raise InputFormatError(f"item {index}: its mask has {mask.size} values for {ids.size} token ids; give one per id")
  if mask.size and (mask.dtype.kind not in "biu" or mask.min() < 0 or mask.max() > 1):
    raise InputFormatError(f"item {index}: a mask holds 0 or 1 per token (trained or not), got {np.unique(mask)[:5]}")
  return mask.astype(np.uint8)


def _encode(
  batch: list[Any], first: int, tokenizer: Tokenizer | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
  """(flat ids, lengths, flat masks or None) of a batch, texts tokenized and token lists as they are,
  in order; where any item is a (tokens, mask) pair, items without a mask train on every token."""
  given = [_tokens_of(item[0] if _is_pair(item) else item, first + i) for i, item in enumerate(batch)]
  masks = [_mask_of(item, ids, first + i) for i, (item, ids) in enumerate(zip(batch, given))]
  texts = [item for item, ids in zip(batch, given) if ids is None]
  if texts and tokenizer is None:
    raise InputFormatError(f"item {first + given.index(None)}: a text, but tokenizer=None (token lists only)")
  encoded: Iterator[np.ndarray] = iter(())
  if texts and tokenizer is not None:
    flat, lengths = tokenizer.encode_batch(texts)
    encoded = iter(np.split(flat, np.cumsum(lengths)[:-1]))
  parts = [ids if ids is not None else next(encoded) for ids in given]
  lengths = np.array([p.size for p in parts], np.int64)
  flat = np.concatenate(parts) if parts else np.zeros(0, np.int64)
  if all(m is None for m in masks):
    return flat, lengths, None
  full = [m if m is not None else np.ones(p.size, np.uint8) for m, p in zip(masks, parts)]
  return flat, lengths, np.concatenate(full)


def from_iterable(
  items: Iterable[Any],
  out: str,
  name: str | None = None,
  tokenizer: TokenizerSpec | str | Any | None = "byte",
  shard_bytes: int = 256 << 20,
  compression: str = "zstd",
  *,
  dtype: str | None = None,
  overwrite: bool = False,
  masks: bool | None = None,
) -> Manifest:
  """Writes a dataset from Python: texts, token lists, or both, streamed in batches; a
  (token ids, mask) pair is an example with its trained-token mask (0 / 1 per id).

  Args:
    items: an iterable of texts (tokenized by `tokenizer`) and / or token
      lists (written as they are). Empty documents are skipped and counted.
    out: the dataset directory to write.
    name: the dataset's name; default: the directory's.
    tokenizer: "byte", "hf:FILE.json", "sp:FILE.model", a `TokenizerSpec`, a
      tokenizer object (transformers' fast tokenizer, a `tokenizers.Tokenizer`),
      or None for token lists only.
    shard_bytes: a shard is closed before it would exceed this size.
    compression: the records' compression: "zstd", "snappy" or "none" (`jaxdata convert --compression`).
    dtype: "uint16" or "uint32"; default: what the vocabulary needs (uint32
      for token lists without a tokenizer).
    overwrite: replace a dataset already in `out`.
    masks: store trained-token masks; default: where the first batch holds a (tokens, mask)
      pair (items without one then train on every token).

  Returns:
    The dataset's `Manifest`.

  Raises:
    ValueError: an id outside the vocabulary or the dtype (naming the item).
    InputFormatError: an item that is neither a text nor a token list.
    FileExistsError: `out` holds a dataset and `overwrite` is not set.

  >>> import tempfile
  >>> from_iterable([[1, 2, 3], [4, 5]], out=tempfile.mkdtemp() + "/ids", tokenizer=None).num_tokens
  5
  """
  model = _tokenizer_of(tokenizer)
  identity = model.identity() if model is not None else {"kind": "pretokenized"}
  np_dtype = np.dtype(dtype) if dtype else (dtype_for_vocab_size(model.vocab_size) if model else np.dtype("<u4"))
  prepare_output(out, overwrite)
  items = iter(items)
  batch = list(itertools.islice(items, BATCH))
  masked = any(_is_pair(item) for item in batch) if masks is None else bool(masks)
  writer = DatasetWriter(
    out, name or os.path.basename(os.path.normpath(out)), np_dtype, identity, shard_bytes, compression, masks=masked
  )
  count, empty = _write_batches(writer, batch, items, model, masked)
  written = count - empty
  stats = {"documents": written, "skipped_empty": empty, "skipped_invalid": 0}
  return writer.finish({**stats, "inputs": [{"path": "python iterable", "documents": written}]})


def _write_batches(
  writer: DatasetWriter, batch: list[Any], items: Iterator[Any], model: Tokenizer | None, masked: bool
) -> tuple[int, int]:
  """Writes `batch` and every later batch of `items`; (items seen, empty ones skipped)."""
  count = empty = 0
  while batch:
    flat, lengths, mask = _encode(batch, count, model)
    if mask is not None and not masked:
      first_pair = count + next(i for i, item in enumerate(batch) if _is_pair(item))
      raise InputFormatError(
        f"item {first_pair}: a (tokens, mask) pair after {count} items without masks; give masks=True"
      )
    if masked and mask is None:
      mask = np.ones(flat.size, np.uint8)
    keep = lengths > 0
    empty += int((~keep).sum())
    if keep.any():
      writer.write_documents(flat, lengths[keep], mask)
    count += len(batch)
    batch = list(itertools.islice(items, BATCH))
  return count, empty


def _tokenizer_of(tokenizer: TokenizerSpec | str | Any | None) -> Tokenizer | None:
  """`from_iterable`'s tokenizer: a spec or its text loaded, a tokenizer object wrapped, None for ids only."""
  if tokenizer is None or isinstance(tokenizer, (str, TokenizerSpec)):
    spec = TokenizerSpec.parse(tokenizer) if isinstance(tokenizer, str) else tokenizer
    return load_tokenizer(spec) if spec is not None else None
  return TransformersTokenizer(tokenizer)  # transformers' fast tokenizer or a tokenizers.Tokenizer


def from_hf_dataset(dataset: Any, out: str, field: str = "text", **options: Any) -> Manifest:
  """`from_iterable` over one column of a Hugging Face dataset (texts or token lists), read in batches.

  Args:
    dataset: a `datasets.Dataset` (read through ``.iter(batch_size=...)``),
      an `IterableDataset`, or any iterable of dict rows; the `datasets`
      package itself is never imported.
    out: the dataset directory to write.
    field: the column holding the text or the token ids. Beside token ids, a
      `labels` column (Hugging Face trainers' form: the ids, -100 where a token
      does not train) becomes the trained-token mask.
    **options: `from_iterable`'s `name`, `tokenizer` (a spec, or a transformers
      tokenizer object), `shard_bytes`, `dtype`, `overwrite`.

  Returns:
    The dataset's `Manifest`.

  Raises:
    InputFormatError: a row without `field`, naming the row.

  >>> import tempfile
  >>> rows = [{"text": "hello"}, {"text": "world"}]
  >>> from_hf_dataset(rows, out=tempfile.mkdtemp() + "/hf").num_records
  2
  """

  splits = _splits(dataset)
  if splits:
    raise InputFormatError(
      f"dataset: a DatasetDict of the splits {splits}; pass one of them, e.g. dataset[{splits[0]!r}]"
    )
  if "dtype" not in options:
    options = {**options, "dtype": _token_dtype(dataset, field)}

  def column() -> Iterator[Any]:
    if hasattr(dataset, "iter"):
      row = 0
      for batch in dataset.iter(batch_size=BATCH):
        # dicts of lists by default; a pyarrow Table with `with_format("arrow")`.
        names = list(getattr(batch, "column_names", None) or batch)
        if field not in names:
          raise InputFormatError(f"row {row}: no column {field!r} (columns: {', '.join(map(str, names))})")
        values = batch[field]
        values = values.to_pylist() if hasattr(values, "to_pylist") else values
        if "labels" in names:
          labels = batch["labels"]
          labels = labels.to_pylist() if hasattr(labels, "to_pylist") else labels
          yield from (_with_labels(v, lab, row + i) for i, (v, lab) in enumerate(zip(values, labels)))
        else:
          yield from values
        row += len(values)
      return
    for row, record in enumerate(dataset):
      if not isinstance(record, dict) or field not in record:
        raise InputFormatError(f"row {row}: no field {field!r}")
      yield _with_labels(record[field], record["labels"], row) if "labels" in record else record[field]

  return from_iterable(column(), out, **options)


def _with_labels(ids: Any, labels: Any, row: int) -> tuple[list[int], np.ndarray]:
  """(ids, mask) from token ids and their labels (`examples.labels_mask`)."""
  if isinstance(ids, str):
    raise InputFormatError(f"row {row}: a 'labels' column needs token ids in the field, not text")
  return list(ids), labels_mask(np.asarray(ids), labels, f"row {row}")


def _splits(dataset: Any) -> list[str]:
  """The split names of a `DatasetDict` (a mapping of names to datasets), else []."""
  if not isinstance(dataset, dict) or not dataset:
    return []
  if all(isinstance(k, str) and hasattr(v, "iter") for k, v in dataset.items()):
    return list(dataset)
  return []


def _token_dtype(dataset: Any, field: str) -> str | None:
  """A token-list column's own integer type where its features say it (`Sequence(Value("uint16"))`):
  the ids keep it; None (from_iterable's default) otherwise."""
  features = getattr(dataset, "features", None)
  feature = features.get(field) if isinstance(features, dict) else None
  inner = getattr(feature, "feature", None)
  if inner is None and isinstance(feature, list) and feature:  # the list form of a sequence feature
    inner = feature[0]
  kind = getattr(inner, "dtype", None)
  return kind if kind in ("uint16", "uint32") else None
