"""`tf.train.Example` records in TFRecord and ArrayRecord files, written from the published formats.

Independent of jaxdata's reader (which declares the message to protobuf):
the protobuf wire format is encoded by hand, and TFRecord's checksum is a
table-driven CRC-32C (Castagnoli, reflected polynomial 0x82F63B78)::

    Example   = field 1 (bytes): Features
    Features  = repeated field 1 (bytes): map entry { field 1: key (string), field 2: Feature }
    Feature   = field 1: BytesList | field 2: FloatList | field 3: Int64List
    *List     = field 1: values (bytes repeated; floats and int64s packed)
    TFRecord  = per record: u64 length | u32 masked_crc(length) | data | u32 masked_crc(data)
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence

from array_record.python.array_record_module import ArrayRecordWriter

FeatureValue = str | bytes | list[bytes] | list[int] | list[float]


def _crc_table() -> list[int]:
  table = []
  for byte in range(256):
    crc = byte
    for _ in range(8):
      crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    table.append(crc)
  return table


_TABLE = _crc_table()


def crc32c(data: bytes) -> int:
  crc = 0xFFFFFFFF
  for byte in data:
    crc = _TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
  return crc ^ 0xFFFFFFFF


def masked(data: bytes) -> int:
  crc = crc32c(data)
  return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def _varint(value: int) -> bytes:
  value &= (1 << 64) - 1  # int64 as two's complement
  out = bytearray()
  while True:
    low, value = value & 0x7F, value >> 7
    out.append(low | (0x80 if value else 0))
    if not value:
      return bytes(out)


def _delimited(number: int, payload: bytes) -> bytes:
  return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def example(features: Mapping[str, FeatureValue]) -> bytes:
  """A serialized tf.train.Example: str / bytes -> a one-value BytesList, list of bytes -> BytesList,
  list of ints -> Int64List (packed), list of floats -> FloatList (packed)."""
  entries = b""
  for name, value in features.items():
    if isinstance(value, str):
      value = [value.encode()]
    elif isinstance(value, bytes):
      value = [value]
    if value and isinstance(value[0], bytes):
      feature = _delimited(1, b"".join(_delimited(1, v) for v in value))
    elif value and isinstance(value[0], float):
      feature = _delimited(2, _delimited(1, struct.pack(f"<{len(value)}f", *value)))
    else:
      feature = _delimited(3, _delimited(1, b"".join(_varint(v) for v in value)))
    entries += _delimited(1, _delimited(1, name.encode()) + _delimited(2, feature))
  return _delimited(1, entries)


def write_tfrecord(path: str, records: Sequence[bytes]) -> None:
  with open(path, "wb") as f:
    for data in records:
      length = struct.pack("<Q", len(data))
      f.write(length + struct.pack("<I", masked(length)) + data + struct.pack("<I", masked(data)))


def write_array_record(path: str, records: Sequence[bytes]) -> None:
  """As TFDS / MaxText write them: one record per group."""
  writer = ArrayRecordWriter(path, "group_size:1")
  for data in records:
    writer.write(data)
  writer.close()
