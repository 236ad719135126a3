"""The dataset manifest: ``manifest.json`` beside the shards it describes.

::

    data/web/
      manifest.json                  shards, counts, dtype, tokenizer, fingerprint
      web-00000.array_record         one record = one document, raw little-endian ids
      web-00000.lengths.npy          uint32 token count of every record
      web-00001.array_record
      web-00001.lengths.npy

Paths inside the manifest are relative to its directory and must stay
inside it (no absolute paths, no ``..``), so a dataset directory can be
moved or copied as a whole and a manifest cannot make jaxdata read, or
report on, any other file. The fingerprint is required.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from typing import Any

from jaxdata.errors import DatasetError
from jaxdata.sources.columns import PAIR_COLUMNS
from jaxdata.sources.image_records import IMAGE_COLUMNS

__all__ = [
  "COMPRESSIONS",
  "FORMAT_VERSION",
  "TOKENS_ONLY",
  "WITH_MASK",
  "WITH_IMAGES",
  "WITH_PAIR_MARKS",
  "MANIFEST_NAME",
  "MAX_MANIFEST_BYTES",
  "Manifest",
  "ShardInfo",
  "WRITER_OPTIONS",
  "writer_options",
]

# group_size:1 makes every record its own chunk: a random read decodes one record.
WRITER_OPTIONS = "group_size:1"
# Record compression, by name. zstd (ArrayRecord's default) stores token ids in
# fewer bytes but every read decodes them: 2.7x the CPU per uint32 token of
# "none" (docs/performance.md). Readers need no option: each chunk names its own.
COMPRESSIONS = {"zstd": "", "snappy": ",snappy", "none": ",uncompressed"}


def writer_options(compression: str = "zstd") -> str:
  """ArrayRecord writer options for a compression name (a key of COMPRESSIONS).

  >>> writer_options("none")
  'group_size:1,uncompressed'
  """
  if compression not in COMPRESSIONS:
    raise ValueError(f"compression: {compression!r} is not one of {sorted(COMPRESSIONS)}")
  return WRITER_OPTIONS + COMPRESSIONS[compression]


FORMAT_VERSION = 3  # 2: shards carry sample_sha256; 3: format and data_root (1 and 2 are still read)
# 4: features: a dataset with trained-token masks (written only for those, so older jaxdata still reads the rest)
MASK_FORMAT_VERSION = 4
FORMATS = ("arrayrecord", "megatron", "flat")
TOKENS_ONLY = ("tokens",)
WITH_MASK = ("tokens", "mask")  # each record: its ids, then one byte (0 or 1) per id: is it trained
# A preference pair (or one side of a KTO example) per record: its ids (the chosen side's, then the rejected
# side's), then one byte per id: bit 0 trained, bit 1 the rejected side (`jaxdata.conversion.preference`).
WITH_PAIR_MARKS = ("tokens", "pair_marks")
# An example with images per record: its ids (each image's run of image tokens in place), a mask byte per id,
# then its images as stored (`jaxdata.sources.image_records`); columns num_images and num_patches beside it.
WITH_IMAGES = ("tokens", "mask", "images")
FEATURE_SETS = (TOKENS_ONLY, WITH_MASK, WITH_PAIR_MARKS, WITH_IMAGES)
MANIFEST_NAME = "manifest.json"
MAX_MANIFEST_BYTES = 64 << 20  # a manifest lists shards: even 10^5 of them stay far below
TOKEN_DTYPES = ("uint16", "uint32")
TOKEN_ITEMSIZE = {"uint16": 2, "uint32": 4}


_RAW_SUFFIXES = (".jsonl", ".json", ".parquet", ".txt", ".gz", ".zst")  # text a dataset is converted from
_OTHER_TOOLS = {".array_record": "arrayrecord", ".bin": "megatron", ".idx": "megatron", ".npy": "flat"}


def _not_a_dataset_hint(directory: str) -> str:
  """What to do with a path that holds no manifest: raw text is converted (or named as `inputs:`), token
  files another tool wrote are indexed in place."""
  if os.path.isfile(directory) and directory.endswith(_RAW_SUFFIXES):
    return (
      f"; {os.path.basename(directory)} is raw text: name it under the dataset's `inputs:` with a `tokenizer:` "
      "(converted once, cached), or convert it with `jaxdata convert`"
    )
  names = os.listdir(directory) if os.path.isdir(directory) else []
  found = sorted({fmt for name in names for suffix, fmt in _OTHER_TOOLS.items() if name.endswith(suffix)})
  if found:
    dtype = " --dtype uint16|uint32" if found[0] != "megatron" else ""  # Megatron's .idx records its dtype
    return (
      f"; it holds token files another tool wrote: index them in place with `jaxdata index {directory} "
      f"--format {found[0]}{dtype}` (no tokens copied)"
    )
  if any(name.endswith(_RAW_SUFFIXES) for name in names):
    return "; it holds raw text files: name them under the dataset's `inputs:` with a `tokenizer:`, or `jaxdata convert` them"
  return ""


@dataclasses.dataclass(frozen=True)
class ShardInfo:
  """One ArrayRecord shard and its lengths index, as listed in the manifest."""

  path: str
  lengths_path: str
  num_records: int
  num_tokens: int
  num_bytes: int
  sha256: str
  sample_sha256: str = ""  # fileutil.sample_sha256; empty in format 1 manifests
  starts_path: str = ""  # megatron / flat: each document's first token (int64 .npy); "" for arrayrecord
  data_offset: int = 0  # flat: bytes before the first token (a .npy file's header)
  index_sha256: str = ""  # megatron / flat: fileutil.index_sha256 of its lengths and starts; "" if indexed before
  blocks_path: str = ""  # megatron / flat: block_sums of the token file (uint64 .npy), checked on reads from a store
  block_bytes: int = 0  # the block size of blocks_path
  blocks_sha256: str = ""  # sha256 of the block sums (uint64, little-endian): a rewritten blocks_path is named
  # sha256 of the records as written (ids and masks, before compression) and their lengths: what the order's
  # fingerprint guards, the same for any --compression; "" for shards written before it or indexed in place
  records_sha256: str = ""
  # per-record columns (`jaxdata.sources.columns`): name -> .npy file beside the shard; {} where none
  columns: dict[str, str] = dataclasses.field(default_factory=dict)

  def files(self) -> list[str]:
    """The shard's files, relative to the dataset directory."""
    return [self.path, self.lengths_path, *self.columns.values()]

  def to_json(self) -> dict[str, Any]:
    out = dataclasses.asdict(self)
    if not self.columns:
      del out["columns"]  # as manifests without columns were written
    return out


@dataclasses.dataclass(frozen=True)
class Manifest:
  """What a dataset directory holds; validated on load, written last on save."""

  name: str
  dtype: str
  tokenizer: dict[str, Any]
  shards: tuple[ShardInfo, ...]
  stats: dict[str, Any] = dataclasses.field(default_factory=dict)
  format_version: int = FORMAT_VERSION
  format: str = "arrayrecord"
  # megatron / flat: where the token files lie, "" for the manifest's own directory (their paths
  # are relative to it); an absolute path or URL when the metadata was written elsewhere.
  data_root: str = ""
  features: tuple[str, ...] = TOKENS_ONLY  # WITH_MASK: every record carries its trained-token mask

  def __post_init__(self) -> None:
    if not self.name:
      raise ValueError("name: a dataset needs a non-empty name")
    if self.dtype not in TOKEN_DTYPES:
      raise ValueError(f"dtype: {self.dtype!r} is not one of {TOKEN_DTYPES}")
    if self.format not in FORMATS:
      raise ValueError(f"format: {self.format!r} is not one of {FORMATS}")
    if self.format == "arrayrecord" and self.data_root:
      raise ValueError("data_root: an arrayrecord dataset's shards lie beside its manifest")
    if self.format != "arrayrecord" and any(not s.starts_path for s in self.shards):
      raise ValueError(f"shards: every shard of a {self.format} dataset needs a starts_path")
    object.__setattr__(self, "features", tuple(self.features))
    if self.features not in FEATURE_SETS:
      raise ValueError(f"features: {list(self.features)} is not one of {[list(f) for f in FEATURE_SETS]}")
    if self.has_mask and self.format != "arrayrecord":
      raise ValueError(f"features: a {self.format} dataset holds ids only; masks live in ArrayRecord records")
    if self.holds_pairs and any(set(PAIR_COLUMNS) - set(s.columns) for s in self.shards):
      raise ValueError(f"shards: every shard of a dataset of pairs lists the columns {list(PAIR_COLUMNS)}")
    if self.holds_images and any(set(IMAGE_COLUMNS) - set(s.columns) for s in self.shards):
      raise ValueError(f"shards: every shard of an image-text dataset lists the columns {list(IMAGE_COLUMNS)}")
    if self.has_mask and self.format_version < MASK_FORMAT_VERSION:
      object.__setattr__(self, "format_version", MASK_FORMAT_VERSION)

  @property
  def has_mask(self) -> bool:
    """Whether every record carries a byte per id after its ids (a trained-token mask, or a pair's marks)."""
    return self.features in (WITH_MASK, WITH_PAIR_MARKS, WITH_IMAGES)

  @property
  def holds_images(self) -> bool:
    """Whether each record ends with its example's images (`WITH_IMAGES`)."""
    return self.features == WITH_IMAGES

  @property
  def holds_pairs(self) -> bool:
    """Whether each record is a preference pair (`WITH_PAIR_MARKS`)."""
    return self.features == WITH_PAIR_MARKS

  @property
  def record_itemsize(self) -> int:
    """Bytes a token takes in a record: its id, and its mask byte when there is one."""
    return TOKEN_ITEMSIZE[self.dtype] + int(self.has_mask)

  @property
  def num_records(self) -> int:
    return sum(s.num_records for s in self.shards)

  @property
  def num_tokens(self) -> int:
    return sum(s.num_tokens for s in self.shards)

  @property
  def fingerprint(self) -> str:
    """sha256 over dtype, tokenizer and every shard's name, counts and hash: the hash of its records'
    content where the writer recorded one (so a copy written with another compression has the same
    fingerprint), else of its file.

    Two datasets with the same fingerprint hold the same documents in the
    same shards; the checkpoint fingerprint builds on it.
    """
    content = {
      "dtype": self.dtype,
      "tokenizer": self.tokenizer,
      "shards": [
        [s.path, s.num_records, s.num_tokens, s.records_sha256 or s.sha256]
        + ([s.index_sha256] if s.index_sha256 else [])
        for s in self.shards
      ],
    }
    if self.format != "arrayrecord":  # unchanged for every dataset written before flat sources
      content["format"] = self.format
    if self.has_mask:  # unchanged for every dataset without masks
      content["features"] = list(self.features)
    blob = json.dumps(content, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()

  def to_json(self) -> dict[str, Any]:
    return {
      "format_version": self.format_version,
      "name": self.name,
      "dtype": self.dtype,
      "tokenizer": self.tokenizer,
      "num_records": self.num_records,
      "num_tokens": self.num_tokens,
      "fingerprint": self.fingerprint,
      "shards": [s.to_json() for s in self.shards],
      "stats": self.stats,
      "format": self.format,
      "data_root": self.data_root,
      **({"features": list(self.features)} if self.has_mask else {}),
    }

  def save(self, directory: str) -> str:
    """Writes ``manifest.json`` atomically (temp file + rename); returns its path."""
    path = os.path.join(directory, MANIFEST_NAME)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
      json.dump(self.to_json(), f, indent=1, sort_keys=True)
      f.write("\n")
    os.replace(tmp, path)
    return path

  @classmethod
  def load(cls, directory: str) -> Manifest:
    """Reads and checks ``DIRECTORY/manifest.json``; errors name the field."""
    path = os.path.join(directory, MANIFEST_NAME)
    if not os.path.isfile(path):
      raise DatasetError(f"{path}: no manifest (is {directory} a jaxdata dataset?){_not_a_dataset_hint(directory)}")
    with open(path, "rb") as f:
      blob = f.read(MAX_MANIFEST_BYTES + 1)
    return cls.parse(blob, path)

  @classmethod
  def parse(cls, blob: bytes, path: str) -> Manifest:
    """A manifest from the bytes of `path` (a file or an object's URL)."""
    try:
      if len(blob) > MAX_MANIFEST_BYTES:
        raise DatasetError(f"{path}: larger than {MAX_MANIFEST_BYTES >> 20} MiB; not a jaxdata manifest")
      raw = json.loads(blob.decode("utf-8"))
    except UnicodeDecodeError as e:
      raise DatasetError(f"{path}: not UTF-8 text (byte {e.start})") from e
    except json.JSONDecodeError as e:
      raise DatasetError(f"{path}: not valid JSON ({e})") from e
    except RecursionError as e:
      raise DatasetError(f"{path}: nested too deeply to be a jaxdata manifest") from e
    return cls.from_json(raw, source=path)

  @classmethod
  def from_json(cls, raw: Any, source: str = MANIFEST_NAME) -> Manifest:
    if not isinstance(raw, dict):
      raise DatasetError(f"{source}: expected a JSON object")
    version = _field(raw, "format_version", int, source)
    if version > MASK_FORMAT_VERSION:
      raise DatasetError(
        f"{source}: format_version {version} is newer than this jaxdata reads ({MASK_FORMAT_VERSION}); upgrade jaxdata"
      )
    shards_raw = _field(raw, "shards", list, source)
    shards = []
    for i, entry in enumerate(shards_raw):
      where = f"{source}: shards[{i}]"
      if not isinstance(entry, dict):
        raise DatasetError(f"{where}: expected an object")
      shards.append(
        ShardInfo(
          path=_inside(_field(entry, "path", str, where), f"{where}.path"),
          lengths_path=_inside(_field(entry, "lengths_path", str, where), f"{where}.lengths_path"),
          num_records=_field(entry, "num_records", int, where),
          num_tokens=_field(entry, "num_tokens", int, where),
          num_bytes=_field(entry, "num_bytes", int, where),
          sha256=_field(entry, "sha256", str, where),
          sample_sha256=_field(entry, "sample_sha256", str, where) if version >= 2 else "",
          starts_path=_inside(_field(entry, "starts_path", str, where), f"{where}.starts_path")
          if entry.get("starts_path", "") != ""
          else "",
          data_offset=_field(entry, "data_offset", int, where) if "data_offset" in entry else 0,
          index_sha256=_field(entry, "index_sha256", str, where) if "index_sha256" in entry else "",
          blocks_path=_inside(_field(entry, "blocks_path", str, where), f"{where}.blocks_path")
          if entry.get("blocks_path", "") != ""
          else "",
          block_bytes=_field(entry, "block_bytes", int, where) if "block_bytes" in entry else 0,
          blocks_sha256=_field(entry, "blocks_sha256", str, where) if "blocks_sha256" in entry else "",
          records_sha256=_field(entry, "records_sha256", str, where) if "records_sha256" in entry else "",
          columns=_columns(entry, where),
        )
      )
    try:
      manifest = cls(
        name=_field(raw, "name", str, source),
        dtype=_field(raw, "dtype", str, source),
        tokenizer=_field(raw, "tokenizer", dict, source),
        shards=tuple(shards),
        stats=raw.get("stats", {}),
        format_version=version,
        format=_field(raw, "format", str, source) if version >= 3 else "arrayrecord",
        data_root=_field(raw, "data_root", str, source) if version >= 3 else "",
        features=tuple(_field(raw, "features", list, source)) if version >= 4 else TOKENS_ONLY,
      )
    except ValueError as e:
      raise DatasetError(f"{source}: {e}") from e
    stored = _field(raw, "fingerprint", str, source)
    if stored != manifest.fingerprint:
      raise DatasetError(
        f"{source}: fingerprint {stored[:12]!r}... does not match the listed "
        f"shards ({manifest.fingerprint[:12]}...); the manifest was edited"
      )
    return manifest


def _columns(entry: dict[str, Any], where: str) -> dict[str, str]:
  raw = _field(entry, "columns", dict, where) if "columns" in entry else {}
  for name, path in raw.items():
    if not isinstance(path, str) or not name.isidentifier():
      raise DatasetError(f"{where}.columns: {name!r}: expected a column name and a file name, got {path!r:.100}")
    _inside(path, f"{where}.columns.{name}")
  return dict(raw)


def _inside(path: str, where: str) -> str:
  """A manifest path: relative, normalised, inside the dataset directory."""
  normal = os.path.normpath(path)
  if not path or os.path.isabs(path) or normal.startswith("..") or "\0" in path or os.path.splitdrive(path)[0]:
    raise DatasetError(f"{where}: {path[:200]!r} is not a path inside the dataset directory")
  return path


def _field(raw: dict[str, Any], key: str, kind: type, where: str) -> Any:
  if key not in raw:
    raise DatasetError(f"{where}: missing field {key!r}")
  value = raw[key]
  # bool is an int subclass; a count of `true` is a typo, not a number.
  if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
    raise DatasetError(f"{where}: field {key!r} should be {kind.__name__}, got {type(value).__name__}")
  return value
