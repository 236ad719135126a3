"""Tokenizers for `jaxdata convert`: byte-level (default), Hugging Face, SentencePiece.

A tokenizer turns a batch of strings into one flat token array plus per-document
lengths, so the converter never handles one small array per document:

>>> tok = ByteTokenizer()
>>> flat, lengths = tok.encode_batch(["hi", "", "é"])
>>> flat.tolist(), lengths.tolist()
([107, 108, 198, 172], [2, 0, 2])
>>> tok.decode(flat[:2])
'hi'
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import os
from typing import Any, Protocol

import numpy as np

from jaxdata.sources.fileutil import file_sha256

# Optional extras: each is needed only by its own tokenizer class.
hf_tokenizers: Any
sentencepiece: Any
try:
  import tokenizers as hf_tokenizers
except ImportError:
  hf_tokenizers = None
try:
  import sentencepiece
except ImportError:
  sentencepiece = None

__all__ = [
  "ByteTokenizer",
  "HuggingFaceTokenizer",
  "SentencePieceTokenizer",
  "Tokenizer",
  "TransformersTokenizer",
  "TokenizerSpec",
  "content_sha256",
  "dtype_for_vocab_size",
  "load_tokenizer",
  "roundtrip_warning",
]

TOKENIZER_KINDS = ("byte", "huggingface", "sentencepiece")


class Tokenizer(Protocol):
  """What the converter needs from a tokenizer."""

  vocab_size: int

  def identity(self) -> dict[str, Any]:
    """A JSON-able description stored in the manifest (kind, file hash, size)."""
    ...

  def encode_batch(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Returns (flat token ids as int64, per-text token counts as int64)."""
    ...

  def decode(self, ids: np.ndarray) -> str:
    """The text of token ids (round-trip checks)."""
    ...


@dataclasses.dataclass(frozen=True)
class TokenizerSpec:
  """Which tokenizer to build: ``kind`` and, except for ``byte``, a model file.

  Picklable and cheap, so converter worker processes rebuild the tokenizer
  from it. `parse` accepts the CLI form: ``byte``, ``hf:tok.json``,
  ``sp:model.model``, or a bare path ending in ``.json`` / ``.model``.
  """

  kind: str = "byte"
  path: str | None = None

  def __post_init__(self) -> None:
    if self.kind not in TOKENIZER_KINDS:
      raise ValueError(f"tokenizer kind: {self.kind!r} is not one of {TOKENIZER_KINDS}")
    if self.kind == "byte" and self.path is not None:
      raise ValueError("tokenizer path: the byte tokenizer takes no model file")
    if self.kind != "byte" and not self.path:
      raise ValueError(f"tokenizer path: a {self.kind} tokenizer needs a model file")

  @classmethod
  def parse(cls, text: str) -> TokenizerSpec:
    if text == "byte":
      return cls("byte")
    prefix, sep, rest = text.partition(":")
    if sep and prefix in ("hf", "huggingface"):
      return cls("huggingface", rest)
    if sep and prefix in ("sp", "sentencepiece"):
      return cls("sentencepiece", rest)
    if text.endswith(".json"):
      return cls("huggingface", text)
    if text.endswith(".model"):
      return cls("sentencepiece", text)
    raise ValueError(
      f"tokenizer: cannot tell the kind of {text!r}; use 'byte', 'hf:DIR' (a tokenizer directory), 'hf:PATH.json' "
      "or 'sp:PATH.model'"
    )


def dtype_for_vocab_size(vocab_size: int) -> np.dtype:
  """uint16 when every id fits in 16 bits, else uint32 (little-endian)."""
  if vocab_size <= 0:
    raise ValueError(f"vocab_size: must be positive, got {vocab_size}")
  if vocab_size <= 1 << 16:
    return np.dtype("<u2")
  if vocab_size <= 1 << 32:
    return np.dtype("<u4")
  raise ValueError(f"vocab_size: {vocab_size} does not fit in uint32")


def content_sha256(tokenizer: Any) -> str:
  """What a Hugging Face tokenizer is, however it was given (`hf:DIR`, a tokenizer.json, an object):
  sha256 of its canonical JSON without the padding and truncation a caller may have switched on.
  A file's own bytes differ from it (its layout, its key order)."""
  content = json.loads(tokenizer.to_str())
  content["padding"] = content["truncation"] = None
  return hashlib.sha256(json.dumps(content, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _lengths_of(pieces: list[Any]) -> np.ndarray:
  return np.fromiter(map(len, pieces), dtype=np.int64, count=len(pieces))


class ByteTokenizer:
  """UTF-8 bytes shifted by 3, after three special ids. Needs no model file.

  ids: 0 = EOS, 1 = BOS, 2 = PAD, 3 + b for byte b. Vocabulary 259 (uint16).
  """

  EOS_ID = 0
  BOS_ID = 1
  PAD_ID = 2
  BYTE_OFFSET = 3
  vocab_size = 256 + BYTE_OFFSET

  def identity(self) -> dict[str, Any]:
    return {
      "kind": "byte",
      "vocab_size": self.vocab_size,
      "eos_id": self.EOS_ID,
      "bos_id": self.BOS_ID,
      "pad_id": self.PAD_ID,
      "byte_offset": self.BYTE_OFFSET,
    }

  def encode_batch(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    encoded = [t.encode("utf-8") for t in texts]
    flat = np.frombuffer(b"".join(encoded), dtype=np.uint8).astype(np.int64)
    return flat + self.BYTE_OFFSET, _lengths_of(encoded)

  def encode_with_offsets(self, text: str) -> tuple[np.ndarray, np.ndarray]:
    """(ids, each id's [start, end) in characters of `text`): a byte's is its character's.

    >>> ids, offsets = ByteTokenizer().encode_with_offsets("aé")
    >>> offsets.tolist()
    [[0, 1], [1, 2], [1, 2]]
    """
    flat, _ = self.encode_batch([text])
    return flat, _byte_offsets_to_characters(text, np.arange(flat.size), np.arange(1, flat.size + 1))

  def decode(self, ids: np.ndarray) -> str:
    ids = np.asarray(ids)
    byte_ids = ids[ids >= self.BYTE_OFFSET] - self.BYTE_OFFSET
    return byte_ids.astype(np.uint8).tobytes().decode("utf-8", errors="replace")


class HuggingFaceTokenizer:
  """A Hugging Face ``tokenizers`` JSON file; special tokens are not added."""

  def __init__(self, path: str) -> None:
    if hf_tokenizers is None:
      raise ImportError("tokenizer: Hugging Face tokenizers are not installed; pip install 'jaxdata[tokenizers]'")
    if os.path.isdir(path):  # a tokenizer directory (transformers' layout): its tokenizer.json
      path = os.path.join(path, "tokenizer.json")
    self._path = path
    try:
      self._tokenizer = hf_tokenizers.Tokenizer.from_file(path)
    except Exception as e:  # the tokenizers library raises a bare Exception here
      hint = " (a SentencePiece model? use sp:FILE)" if path.endswith(".model") else ""
      raise ValueError(f"tokenizer: {path} is not a Hugging Face tokenizer.json{hint}: {str(e)[:200]}") from e
    self.vocab_size = self._tokenizer.get_vocab_size(with_added_tokens=True)

  @property
  def backend(self) -> Any:
    """The `tokenizers.Tokenizer` read from the file."""
    return self._tokenizer

  def identity(self) -> dict[str, Any]:
    return {
      "kind": "huggingface",
      "file": os.path.basename(self._path),
      "sha256": file_sha256(self._path),
      "content_sha256": content_sha256(self._tokenizer),
      "vocab_size": self.vocab_size,
      **self.special_ids(),
    }

  def special_ids(self) -> dict[str, int]:
    """bos_id, eos_id, pad_id, unk_id as the tokenizer_config.json beside the tokenizer.json names them
    (transformers' layout); a token it does not name, or one not in the vocabulary, is left out."""
    config_path = os.path.join(os.path.dirname(self._path) or ".", "tokenizer_config.json")
    if not os.path.isfile(config_path):
      return {}
    try:
      with open(config_path, encoding="utf-8") as f:
        config = json.load(f)
    except (OSError, ValueError) as e:
      raise ValueError(f"tokenizer: {config_path} is not readable JSON ({str(e)[:200]})") from e
    out = {}
    for name in ("bos", "eos", "pad", "unk"):
      token = config.get(f"{name}_token") if isinstance(config, dict) else None
      if isinstance(token, dict):  # an AddedToken as transformers saves it
        token = token.get("content")
      token_id = self._tokenizer.token_to_id(token) if isinstance(token, str) else None
      if token_id is not None:
        out[f"{name}_id"] = int(token_id)
    return out

  def encode_batch(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    encodings = self._tokenizer.encode_batch(texts, add_special_tokens=False)
    ids = [e.ids for e in encodings]
    flat = np.fromiter(itertools.chain.from_iterable(ids), dtype=np.int64)
    return flat, _lengths_of(ids)

  def decode(self, ids: np.ndarray) -> str:
    return self._tokenizer.decode(np.asarray(ids).tolist(), skip_special_tokens=False)


class TransformersTokenizer:
  """A transformers fast tokenizer object (what `AutoTokenizer.from_pretrained` returns) or a
  `tokenizers.Tokenizer`, used as it is; special tokens are not added."""

  def __init__(self, tokenizer: Any) -> None:
    backend = getattr(tokenizer, "backend_tokenizer", tokenizer)
    if not callable(getattr(backend, "encode_batch", None)) or not callable(getattr(backend, "to_str", None)):
      raise TypeError(
        f"tokenizer: {type(tokenizer).__name__} is not a fast tokenizer (transformers' PreTrainedTokenizerFast "
        "or a tokenizers.Tokenizer); give a fast tokenizer, 'hf:DIR' or a TokenizerSpec"
      )
    self._source, self._backend = tokenizer, backend
    self.vocab_size = int(backend.get_vocab_size(with_added_tokens=True))

  def identity(self) -> dict[str, Any]:
    ids = {f"{name}_id": getattr(self._source, f"{name}_token_id", None) for name in ("bos", "eos", "pad", "unk")}
    return {
      "kind": "huggingface",
      "file": "(a tokenizer object)",
      "sha256": hashlib.sha256(self._backend.to_str().encode()).hexdigest(),
      "content_sha256": content_sha256(self._backend),
      "vocab_size": self.vocab_size,
      **{k: int(v) for k, v in ids.items() if isinstance(v, int) and not isinstance(v, bool)},
    }

  def encode_batch(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    ids = [e.ids for e in self._backend.encode_batch(texts, add_special_tokens=False)]
    return np.fromiter(itertools.chain.from_iterable(ids), dtype=np.int64), _lengths_of(ids)

  def decode(self, ids: np.ndarray) -> str:
    return str(self._backend.decode(np.asarray(ids).tolist(), skip_special_tokens=False))


class SentencePieceTokenizer:
  """A SentencePiece ``.model`` file; BOS/EOS are not added."""

  def __init__(self, path: str) -> None:
    if sentencepiece is None:
      raise ImportError("tokenizer: sentencepiece is not installed; pip install 'jaxdata[sentencepiece]'")
    self._path = path
    try:
      self._processor = sentencepiece.SentencePieceProcessor(model_file=path)
    except (OSError, RuntimeError) as e:
      hint = " (a Hugging Face tokenizer? use hf:FILE)" if path.endswith(".json") else ""
      raise ValueError(f"tokenizer: {path} is not a SentencePiece model{hint}: {str(e)[:200]}") from e
    self.vocab_size = int(self._processor.get_piece_size())

  def identity(self) -> dict[str, Any]:
    ids = {
      "bos_id": self._processor.bos_id(),
      "eos_id": self._processor.eos_id(),
      "pad_id": self._processor.pad_id(),
      "unk_id": self._processor.unk_id(),
    }
    return {
      "kind": "sentencepiece",
      "file": os.path.basename(self._path),
      "sha256": file_sha256(self._path),
      "vocab_size": self.vocab_size,
      **{k: int(v) for k, v in ids.items() if v >= 0},  # -1: the model has none
    }

  def encode_batch(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    ids = self._processor.encode(texts)
    flat = np.fromiter(itertools.chain.from_iterable(ids), dtype=np.int64)
    return flat, _lengths_of(ids)

  def encode_with_offsets(self, text: str) -> tuple[np.ndarray, np.ndarray]:
    """(ids, each id's [start, end) in characters of `text`), from the pieces' byte spans. Pieces of no
    span (a character that normalisation expands, `½` -> `1⁄2`, or byte fallback: all but the last
    piece; the dummy prefix `▁`) take the span of the next piece that has one: they stand for its text."""
    pieces = self._processor.encode(text, return_type="proto").pieces
    ids = np.fromiter((p.id for p in pieces), dtype=np.int64, count=len(pieces))
    begin = np.fromiter((p.begin for p in pieces), dtype=np.int64, count=len(pieces))
    end = np.fromiter((p.end for p in pieces), dtype=np.int64, count=len(pieces))
    spanned = np.flatnonzero(end > begin)
    if spanned.size:  # each empty piece: the next spanned piece's span (after the last one: the last's)
      take = spanned[np.minimum(np.searchsorted(spanned, np.arange(ids.size)), spanned.size - 1)]
      begin, end = begin[take], end[take]
    return ids, _byte_offsets_to_characters(text, begin, end)

  def decode(self, ids: np.ndarray) -> str:
    return self._processor.decode(np.asarray(ids).tolist())


def _byte_offsets_to_characters(text: str, begin: np.ndarray, end: np.ndarray) -> np.ndarray:
  """[n, 2] character offsets of byte spans [begin, end) of `text`'s UTF-8 (a span inside a character:
  that character)."""
  widths = np.fromiter((len(c.encode("utf-8")) for c in text), dtype=np.int64, count=len(text))
  starts = np.cumsum(widths) - widths  # each character's first byte
  first = np.searchsorted(starts, begin, side="right") - 1
  last = np.searchsorted(starts, np.maximum(end, begin + 1) - 1, side="right") - 1
  out = np.stack([np.maximum(first, 0), last + 1], axis=1) if len(text) else np.zeros((begin.size, 2), np.int64)
  out[end <= begin] = np.stack([np.maximum(first, 0), np.maximum(first, 0)], axis=1)[end <= begin]  # no bytes
  return out.astype(np.int64)


ROUNDTRIP_PROBE = "Line one\n\n  indented\tline two  \nCAFÉ ﬁ ½ — 𝔘"


def roundtrip_warning(tokenizer: Tokenizer) -> str | None:
  """A warning if the tokenizer does not give back a probe text with newlines, runs of spaces,
  tabs and Unicode compatibility characters (SentencePiece's default normalisation drops some)."""
  flat, _ = tokenizer.encode_batch([ROUNDTRIP_PROBE])
  decoded = tokenizer.decode(flat)
  if decoded == ROUNDTRIP_PROBE:
    return None
  return (
    f"the tokenizer does not round-trip text: {ROUNDTRIP_PROBE!r} decodes to {decoded!r} (a normalising "
    "tokenizer: converted documents will not decode to their text; check with `check_roundtrip`)"
  )


def load_tokenizer(spec: TokenizerSpec) -> Tokenizer:
  """The tokenizer a spec names: byte-level, Hugging Face (`tokenizers`) or SentencePiece.

  Args:
    spec: a `TokenizerSpec` (`TokenizerSpec.parse("hf:tokenizer.json")`, ...).

  Returns:
    A `Tokenizer`: `encode_batch(texts)` -> (flat ids, lengths), `decode`,
    `vocab_size`, `identity()` (what the manifest records).

  Raises:
    FileNotFoundError: the model file does not exist.
    ImportError: naming the extra (`tokenizers`, `sentencepiece`) to install.

  >>> load_tokenizer(TokenizerSpec.parse("byte")).vocab_size  # 256 bytes and 3 special ids
  259
  """
  if spec.kind == "byte":
    return ByteTokenizer()
  assert spec.path is not None
  directory = spec.kind == "huggingface" and os.path.isdir(spec.path)  # transformers' layout: DIR/tokenizer.json
  if not (os.path.isfile(spec.path) or (directory and os.path.isfile(os.path.join(spec.path, "tokenizer.json")))):
    what = f"{spec.path}/tokenizer.json" if directory else spec.path
    raise FileNotFoundError(f"tokenizer: model file {what} does not exist")
  if spec.kind == "huggingface":
    return HuggingFaceTokenizer(spec.path)
  return SentencePieceTokenizer(spec.path)
