"""Tokenizing one work unit, sizing the units, and the stats a conversion records: shared by both runners."""

from __future__ import annotations

import dataclasses
import hashlib
import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from jaxdata.conversion.example_records import Document
from jaxdata.conversion.examples import ExampleEncoder, example_encoder
from jaxdata.conversion.formats import DocumentRead, unit_documents
from jaxdata.conversion.inputs import InvalidLog, Record
from jaxdata.conversion.options import ConvertOptions
from jaxdata.conversion.preference import PreferenceEncoder, pair_record
from jaxdata.conversion.tokenizers import Tokenizer, TokenizerSpec, dtype_for_vocab_size, load_tokenizer
from jaxdata.conversion.work_units import WorkUnit
from jaxdata.errors import InputFormatError
from jaxdata.sources.columns import pair_columns
from jaxdata.sources.fileutil import file_sha256
from jaxdata.sources.manifest import TOKENS_ONLY, WITH_IMAGES, WITH_MASK, WITH_PAIR_MARKS, Manifest, ShardInfo

__all__ = ["UnitResult", "cached_tokenizer", "converted_manifest", "tokenize_unit", "tokenizer_record", "unit_size"]

MIN_UNIT_BYTES = 1 << 20
MAX_UNIT_BYTES = 64 << 20


@dataclasses.dataclass(frozen=True)
class UnitResult:
  """What tokenizing one unit produced besides its tokens."""

  unit: int
  file_index: int
  documents: int
  tokens: int
  empty: int
  invalid: int
  invalid_examples: list[str]
  trained_tokens: int = 0  # fine-tuning examples: the tokens their masks train (text: every token)
  pairs: int = 0  # preference records with both sides (the others: KTO examples, one side)
  trained_rejected: int = 0  # preference records: the trained tokens of rejected sides


_tokenizers: dict[TokenizerSpec, Tokenizer] = {}


def cached_tokenizer(spec: TokenizerSpec) -> Tokenizer:
  # A worker process tokenizes many units; load the model once per process.
  if spec not in _tokenizers:
    _tokenizers[spec] = load_tokenizer(spec)
  return _tokenizers[spec]


def tokenize_unit(
  unit: WorkUnit, options: ConvertOptions, on_progress: Callable[[int, int], None] = lambda b, d: None
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, UnitResult]:
  """(tokens, lengths of the non-empty documents, trained-token masks of fine-tuning examples or None,
  counts) of one unit; `on_progress(bytes, documents)` hears what was done since it last called."""
  tokenizer = cached_tokenizer(options.tokenizer)
  dtype = dtype_for_vocab_size(tokenizer.vocab_size)
  invalid = InvalidLog(options.skip_invalid)
  pending = [0]
  tokens, lengths, masks, empty = [], [], [], 0
  encoder = _cached_encoder(options) if options.examples != "text" else None

  # Progress in input bytes, exactly `unit.size` over the unit: a reader may count more (a whole
  # compressed file decompressed, Parquet rows in memory) but the bar's total is the input's size.
  budget = [unit.size]

  def consumed(count: int) -> None:
    pending[0] += count

  def reported() -> int:
    step = min(pending[0], budget[0])
    budget[0] -= step
    pending[0] = 0
    return step

  def flush(documents: list[Any]) -> int:
    if encoder is not None:
      pairs = PreferenceEncoder(encoder, options.pair_fields) if options.examples == "preference" else None
      flat, found, mask = _encode_examples(encoder, documents, invalid, pairs)
      masks.append(mask)
    else:
      flat, found = _encode(tokenizer, documents, unit.path, options.field)
    tokens.append(flat.astype(dtype))
    lengths.append(found[found > 0])
    on_progress(reported(), len(documents))
    return int((found == 0).sum())

  batch: list[Any] = []
  records = encoder is not None
  for text in unit_documents(unit, options, DocumentRead(invalid, consumed, records)):
    batch.append(text)
    if len(batch) == options.batch_documents:
      empty += flush(batch)
      batch = []
  if batch:
    empty += flush(batch)
  pending[0] = budget[0]  # what the reader counted less than the unit's size (never more)
  on_progress(reported(), 0)
  masked = encoder is not None
  return _unit_output(
    unit,
    tokens,
    lengths,
    masks if masked else None,
    dtype=dtype,
    empty=empty,
    invalid=invalid,
    preference=options.examples == "preference",
  )


def _unit_output(
  unit: WorkUnit,
  tokens: list[np.ndarray],
  lengths: list[np.ndarray],
  masks: list[np.ndarray] | None,
  *,
  dtype: np.dtype,
  empty: int,
  invalid: InvalidLog,
  preference: bool,
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, UnitResult]:
  """A unit's batches joined, with its counts (trained tokens, pairs, trained rejected tokens)."""
  all_tokens = np.concatenate(tokens) if tokens else np.zeros(0, dtype)
  all_lengths = np.concatenate(lengths).astype(np.int64) if lengths else np.zeros(0, np.int64)
  all_masks = (np.concatenate(masks) if masks else np.zeros(0, np.uint8)) if masks is not None else None
  trained = int((all_masks & 1).sum()) if all_masks is not None else int(all_tokens.size)  # bit 0: trained
  pairs = trained_rejected = 0
  if preference and all_masks is not None:
    chosen = pair_columns(all_lengths, all_masks)["chosen_length"].astype(np.int64)
    pairs = int(((chosen > 0) & (chosen < all_lengths)).sum())
    trained_rejected = int((all_masks == 3).sum())  # trained (bit 0) on the rejected side (bit 1)
  result = UnitResult(
    unit.index,
    unit.file_index,
    int(all_lengths.size),
    int(all_tokens.size),
    empty,
    invalid.count,
    invalid.examples,
    trained,
    pairs,
    trained_rejected,
  )
  return all_tokens, all_lengths, all_masks, result


_encoders: dict[tuple[ConvertOptions, bytes], ExampleEncoder] = {}


def record_features(options: ConvertOptions) -> tuple[str, ...]:
  """What each record of the converted dataset holds beside its ids (the manifest's `features`)."""
  if options.examples == "preference":
    return WITH_PAIR_MARKS
  if options.examples == "vision":
    return WITH_IMAGES
  return WITH_MASK if options.examples != "text" else TOKENS_ONLY


def _cached_encoder(options: ConvertOptions) -> ExampleEncoder:
  # A worker process renders many units: load the tokenizer and template once (a rewritten template: again).
  template = b""
  if options.chat_template and os.path.isfile(options.chat_template):
    with open(options.chat_template, "rb") as f:
      template = f.read()
  key = (options, template)
  if key not in _encoders:
    field = "messages" if options.examples == "chat" and options.field == "text" else options.field
    _encoders[key] = example_encoder(
      options.examples,
      options.tokenizer.path or "",  # (ConvertOptions requires one for examples)
      field,
      options.train_on,
      options.chat_template or None,
      options.chat_template_text,
      system_prompt_field=options.system_prompt_field,
      template_kwargs_field=options.template_kwargs_field,
      max_tokens=options.max_example_tokens,
      tokenizer_kind=options.tokenizer.kind,
    )
  return _encoders[key]


def _encode_examples(
  encoder: ExampleEncoder, records: list[Record], invalid: InvalidLog, preference: PreferenceEncoder | None = None
) -> tuple[np.ndarray, ...]:
  """(flat ids, lengths, flat masks) of fine-tuning records (with `preference`: preference records, one pair a
  record, `pair_record`'s marks as the masks); a bad one is reported (named, counted)."""
  parts, mask_parts = [], []
  for record in records:  # rendering a conversation is per example: the template sees one at a time
    try:
      if preference is not None:
        ids, mask = pair_record(preference.encode(record.values, record.where))
      else:
        ids, mask = encoder.encode(record.values, record.where)
    except InputFormatError as e:
      invalid.report(str(e))
      continue
    parts.append(ids)
    mask_parts.append(mask)
  if not parts:
    return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.uint8)
  lengths = np.array([p.size for p in parts], np.int64)
  return np.concatenate(parts), lengths, np.concatenate(mask_parts)


def _encode(tokenizer: Tokenizer, documents: list[Document], path: str, field: str) -> tuple[np.ndarray, np.ndarray]:
  """(flat ids, length of each document): texts tokenized in one call, token-id documents (an
  Example's int64 feature) as they are, in the documents' order."""
  texts = [d for d in documents if isinstance(d, str)]
  if len(texts) == len(documents):
    return tokenizer.encode_batch(texts)
  flat_texts, text_lengths = tokenizer.encode_batch(texts) if texts else (np.zeros(0, np.int64), np.zeros(0, np.int64))
  text_starts = np.concatenate([[0], np.cumsum(text_lengths)]).astype(np.int64)
  parts, lengths, text = [], [], 0
  for document in documents:
    if isinstance(document, str):
      parts.append(flat_texts[text_starts[text] : text_starts[text + 1]])
      text += 1
    else:
      if document.size and int(document.max()) >= tokenizer.vocab_size:
        raise InputFormatError(
          f"{path}: feature {field!r} holds token id {int(document.max())}, beyond the tokenizer's "
          f"vocabulary of {tokenizer.vocab_size}; give the tokenizer these ids come from (`tokenizer`)"
        )
      parts.append(document)
    lengths.append(parts[-1].size)
  return np.concatenate(parts), np.asarray(lengths, np.int64)


def _template_sha256(options: ConvertOptions) -> str:
  """sha256 of the chat template the examples were rendered with (a file's bytes, or the text's UTF-8)."""
  if options.chat_template:
    return file_sha256(options.chat_template)
  encoder = _cached_encoder(options)  # its template: the text given, or the tokenizer's (its "default" of several)
  text = options.chat_template_text or encoder.template or str(encoder.tokenizer.chat_template or "")
  return hashlib.sha256(text.encode("utf-8")).hexdigest()


def unit_size(total_bytes: int, workers: int, options: ConvertOptions) -> int:
  """Units small enough that every worker has several (and the first finishes in about a second)."""
  if options.unit_bytes:
    return options.unit_bytes
  return int(min(MAX_UNIT_BYTES, max(MIN_UNIT_BYTES, total_bytes // max(1, 4 * workers))))


def _image_stats(options: ConvertOptions) -> dict[str, Any]:
  """The image policy and image tokens a vision dataset's ids were made with (readers check them)."""
  assert options.images is not None
  policy = options.images.policy
  return {"policy": {"policy": policy.name, **dataclasses.asdict(policy)}, "tokens": options.images.tokens}


def _pair_stats(results: Sequence[UnitResult]) -> dict[str, int]:
  """Pairs, KTO examples (one side) and each side's trained tokens."""
  trained, rejected = sum(r.trained_tokens for r in results), sum(r.trained_rejected for r in results)
  pairs = sum(r.pairs for r in results)
  return {
    "pairs": pairs,
    "unpaired_examples": sum(r.documents for r in results) - pairs,
    "trained_tokens_chosen": trained - rejected,
    "trained_tokens_rejected": rejected,
  }


def conversion_stats(files: Sequence[str], results: Sequence[UnitResult], options: ConvertOptions) -> dict[str, Any]:
  """The manifest's stats: totals, per input file, and the options that shape the output."""
  per_file = []
  for index, path in enumerate(files):
    mine = [r for r in results if r.file_index == index]
    per_file.append(
      {
        "path": path,
        "documents": sum(r.documents for r in mine),
        "tokens": sum(r.tokens for r in mine),
        "skipped_empty": sum(r.empty for r in mine),
        "skipped_invalid": sum(r.invalid for r in mine),
      }
    )
  examples = [m for r in results for m in r.invalid_examples]
  # examples rendered with a chat template (chat; preference pairs where there is one)
  rendered = options.examples == "chat" or (
    options.examples == "preference" and _cached_encoder(options).kind == "chat"
  )
  fine_tuning = (
    {
      "examples": sum(r.documents for r in results),
      "trained_tokens": sum(r.trained_tokens for r in results),
      "refused_examples": sum(r.invalid for r in results),
      "example_format": options.examples,
      "train_on": options.train_on,
      **({"chat_template_sha256": _template_sha256(options)} if rendered else {}),
      # which rule decided the trained tokens: the template's generation blocks, or whole assistant turns
      **({"mask_rule": _cached_encoder(options).mask_rule} if rendered and options.train_on != "all" else {}),
      **(_pair_stats(results) if options.examples == "preference" else {}),
      **({"images": _image_stats(options)} if options.images is not None else {}),
    }
    if options.examples != "text"
    else {}
  )
  return {
    **fine_tuning,
    "documents": sum(r.documents for r in results),
    "skipped_empty": sum(r.empty for r in results),
    "skipped_invalid": sum(r.invalid for r in results),
    "invalid_examples": examples[:20],
    "inputs": per_file,
    "options": {
      "input_format": options.input_format,
      "field": options.field,
      "text_mode": options.text_mode,
      "shard_bytes": options.shard_bytes,
    },
  }


def tokenizer_record(tokenizer: Tokenizer, options: ConvertOptions) -> dict[str, Any]:
  """What the manifest records of the tokenizer: its identity with its special ids (bos, eos, pad, unk),
  and for chat examples the id of the end-of-turn marker the template writes (when it is one token)."""
  record = tokenizer.identity()
  if options.examples == "chat":
    end_of_turn = _cached_encoder(options).end_of_turn_id()
    if end_of_turn is not None:
      record["end_of_turn_id"] = end_of_turn
  return record


def converted_manifest(
  name: str,
  dtype: str,
  tokenizer: dict[str, Any],
  shards: Sequence[ShardInfo],
  files: Sequence[str],
  results: Sequence[UnitResult],
  *,
  options: ConvertOptions,
) -> Manifest:
  """The manifest of a conversion every runner writes alike: its shards (in order), stats and features."""
  return Manifest(
    name=name,
    dtype=dtype,
    tokenizer=tokenizer,
    shards=tuple(shards),
    stats=conversion_stats(files, results, options),
    features=record_features(options),
  )
