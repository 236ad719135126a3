"""Files of serialized records, as MaxText and TensorFlow keep data: ArrayRecord and TFRecord.

Recognised by their bytes, not their names, so that `jaxdata index` can say
what a file is instead of guessing a token dtype::

    ArrayRecord (Riegeli)   the fixed 64-byte file signature: 83 af 70 d1 0d 88 4a 3f ...
    TFRecord                per record: u64 length | u32 masked crc32c(length) | data | u32 masked crc32c(data)

`iter_tfrecord` reads TFRecord framing with both checksums checked; a
damaged or truncated file is an `InputFormatError` naming the record and
its byte offset.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import IO

import google_crc32c

from jaxdata.errors import InputFormatError

__all__ = [
  "RIEGELI_SIGNATURE",
  "convert_hint",
  "example_feature_names",
  "iter_tfrecord",
  "masked_crc32c",
  "record_file_kind",
]

# Every Riegeli file (ArrayRecord's container) begins with this signature block.
RIEGELI_SIGNATURE = bytes.fromhex(
  "83af70d10d884a3f0000000000000000400000000000000091bac23c9287e1a90000000000000000e19f13c0e9b1c37273"
)
_MASK_DELTA = 0xA282EAD8


def masked_crc32c(data: bytes) -> int:
  """TFRecord's checksum: crc32c rotated right by 15 bits plus a constant (mod 2^32)."""
  crc = google_crc32c.value(data)
  return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def record_file_kind(head: bytes) -> str | None:
  """ "ArrayRecord", "TFRecord" or None, from a file's first 64 bytes (or all of a shorter file)."""
  if head.startswith(RIEGELI_SIGNATURE):
    return "ArrayRecord"
  if len(head) >= 12:
    (crc,) = struct.unpack("<I", head[8:12])
    if masked_crc32c(head[:8]) == crc:  # a 1-in-2^32 chance for raw ids
      return "TFRecord"
  return None


def _varint(blob: bytes, at: int) -> tuple[int, int]:
  """(value, position after it); ValueError past the end."""
  value, shift = 0, 0
  while True:
    if at >= len(blob) or shift > 63:
      raise ValueError("varint runs past the end")
    byte = blob[at]
    value |= (byte & 0x7F) << shift
    at, shift = at + 1, shift + 7
    if not byte & 0x80:
      return value, at


def _delimited_fields(blob: bytes) -> list[tuple[int, bytes]]:
  """(field number, payload) of a message made only of length-delimited fields; ValueError otherwise."""
  fields, at = [], 0
  while at < len(blob):
    key, at = _varint(blob, at)
    if key & 7 != 2:
      raise ValueError(f"wire type {key & 7}")
    length, at = _varint(blob, at)
    if at + length > len(blob):
      raise ValueError("a field runs past the end")
    fields.append((key >> 3, blob[at : at + length]))
    at += length
  return fields


def example_feature_names(blob: bytes) -> list[str] | None:
  """The feature names if `blob` is a serialized `tf.train.Example` (wire format walked, not
  parsed by protobuf: enough to tell it from token ids), else None."""
  try:
    top = _delimited_fields(blob)
    if len(top) != 1 or top[0][0] != 1:
      return None
    names = []
    for number, entry in _delimited_fields(top[0][1]):
      key = dict(_delimited_fields(entry)).get(1) if number == 1 else None
      if key is None:
        return None
      names.append(key.decode("utf-8"))
  except (ValueError, UnicodeDecodeError):
    return None
  return names if names else None


def convert_hint(path: str, kind: str, features: list[str] | None) -> str:
  """What `jaxdata index` says of a file of records: what it is and the command that converts it."""
  what = f"{kind} file of tf.train.Example records" if features is not None or kind == "TFRecord" else f"{kind} file"
  listed = f" (features: {', '.join(features)})" if features else ""
  field = features[0] if features and len(features) == 1 else "FEATURE"
  article = "an" if kind == "ArrayRecord" else "a"
  return (
    f"{path}: {article} {what}{listed}, as MaxText and TFDS keep data, not token ids; convert it: "
    f"jaxdata convert {path} --out DIR --name NAME --field {field} --tokenizer YOUR_TOKENIZER"
  )


_READ_CHUNK = 64 << 20


def _read_up_to(f: IO[bytes], length: int) -> bytes:
  """`length` bytes, or fewer at the end of the file: read in bounded chunks, so that a damaged
  length (up to 2^64) is a truncated record, never an attempt to allocate it."""
  parts, left = [], length
  while left > 0:
    chunk = f.read(min(left, _READ_CHUNK))
    if not chunk:
      break
    parts.append(chunk)
    left -= len(chunk)
  return b"".join(parts)


def iter_tfrecord(f: IO[bytes], path: str) -> Iterator[tuple[int, bytes]]:
  """(byte offset, data) of every record of an open TFRecord file, checksums checked."""
  offset, number = 0, 0
  while header := f.read(12):
    where = f"{path}: record {number} at byte {offset}"
    if len(header) < 12:
      raise InputFormatError(f"{where}: the file ends inside a record header (truncated)")
    length, length_crc = struct.unpack("<QI", header)
    if masked_crc32c(header[:8]) != length_crc:
      raise InputFormatError(f"{where}: the length's checksum does not match (not a TFRecord file, or damaged)")
    data = _read_up_to(f, length)
    footer = f.read(4)
    if len(data) < length or len(footer) < 4:
      raise InputFormatError(f"{where}: the file ends inside a record of {length} bytes (truncated)")
    if masked_crc32c(data) != struct.unpack("<I", footer)[0]:
      raise InputFormatError(f"{where}: the data's checksum does not match (damaged)")
    yield offset, data
    offset += 16 + length
    number += 1
