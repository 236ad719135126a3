"""Documents out of `tf.train.Example` records in ArrayRecord or TFRecord files, without TensorFlow.

MaxText's data (and TFDS's) is one `tf.train.Example` per document, with
the text in a named feature, tokenized when loaded. The Example message is
declared here from its published `.proto` (in a private descriptor pool, so
a TensorFlow in the same process is not disturbed) and parsed by protobuf::

    Example  { Features features = 1; }
    Features { map<string, Feature> feature = 1; }
    Feature  { oneof kind { BytesList bytes_list = 1; FloatList float_list = 2; Int64List int64_list = 3; } }
    BytesList / FloatList / Int64List { repeated bytes|float|int64 value = 1; }

A bytes feature holding one string is a text document (UTF-8); an int64
feature is a document of token ids, written as they are. Records are named
``file:record N`` in errors.
"""

from __future__ import annotations

import functools
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
from array_record.python.array_record_module import ArrayRecordReader
from google.protobuf import descriptor_pb2, descriptor_pool, message, message_factory

from jaxdata.conversion.compressed import open_binary, readable_archive
from jaxdata.conversion.inputs import InvalidLog
from jaxdata.conversion.remote_inputs import open_remote
from jaxdata.errors import Error, InputFormatError
from jaxdata.sources.index import close_reader_quietly
from jaxdata.sources.record_files import RIEGELI_SIGNATURE, iter_tfrecord
from jaxdata.sources.stores import is_remote

__all__ = [
  "Document",
  "DuplicateFeatureError",
  "example_message_class",
  "iter_example_documents",
  "parse_example",
]

Document = str | np.ndarray  # a text, or token ids
_READ_BATCH = 1024  # ArrayRecord records read per call

_FIELD = descriptor_pb2.FieldDescriptorProto


def _message(file: Any, name: str, fields: list[tuple[str, int, int, int, str]]) -> Any:
  kind = file.message_type.add(name=name)
  for field_name, number, label, field_type, type_name in fields:
    field = kind.field.add(name=field_name, number=number, label=label, type=field_type)
    if type_name:
      field.type_name = type_name
  return kind


@functools.cache
def example_message_class() -> type[message.Message]:
  """The `tf.train.Example` message class, declared from its .proto in a private descriptor pool."""
  return _example_class(as_map=True)


@functools.cache
def _example_class(as_map: bool) -> type[message.Message]:
  """`as_map=False`: the same wire format with the feature map read as its list of entries, so a
  key given twice is seen (protobuf's map keeps the last one without a word)."""
  package = "jaxdata_example" if as_map else "jaxdata_example_entries"
  file = descriptor_pb2.FileDescriptorProto(name=f"{package}.proto", package=package, syntax="proto3")
  repeated, optional = _FIELD.LABEL_REPEATED, _FIELD.LABEL_OPTIONAL
  _message(file, "BytesList", [("value", 1, repeated, _FIELD.TYPE_BYTES, "")])
  _message(file, "FloatList", [("value", 1, repeated, _FIELD.TYPE_FLOAT, "")])
  _message(file, "Int64List", [("value", 1, repeated, _FIELD.TYPE_INT64, "")])
  feature = _message(
    file,
    "Feature",
    [
      ("bytes_list", 1, optional, _FIELD.TYPE_MESSAGE, f".{package}.BytesList"),
      ("float_list", 2, optional, _FIELD.TYPE_MESSAGE, f".{package}.FloatList"),
      ("int64_list", 3, optional, _FIELD.TYPE_MESSAGE, f".{package}.Int64List"),
    ],
  )
  feature.oneof_decl.add(name="kind")
  for field in feature.field:
    field.oneof_index = 0
  features = _message(
    file, "Features", [("feature", 1, repeated, _FIELD.TYPE_MESSAGE, f".{package}.Features.FeatureEntry")]
  )
  entry = features.nested_type.add(name="FeatureEntry")
  entry.field.add(name="key", number=1, label=optional, type=_FIELD.TYPE_STRING)
  entry.field.add(name="value", number=2, label=optional, type=_FIELD.TYPE_MESSAGE, type_name=f".{package}.Feature")
  entry.options.map_entry = as_map
  _message(file, "Example", [("features", 1, optional, _FIELD.TYPE_MESSAGE, f".{package}.Features")])
  pool = descriptor_pool.DescriptorPool()
  pool.Add(file)
  return message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{package}.Example"))


class DuplicateFeatureError(Error, ValueError):
  """A `tf.train.Example` names one feature key twice (which value is the document is not said)."""


def parse_example(blob: bytes) -> dict[str, list[bytes] | np.ndarray]:
  """A serialized `tf.train.Example` -> {feature: list of bytes | int64 array | float32 array}.

  Raises `google.protobuf.message.DecodeError` for bytes that are not one, and
  `DuplicateFeatureError` for a feature key given twice.
  """
  example = _example_class(as_map=False)()
  example.ParseFromString(blob)
  out: dict[str, Any] = {}
  for entry in example.features.feature:
    name, feature = entry.key, entry.value
    if name in out:
      raise DuplicateFeatureError(f"feature {name!r} is given twice; a feature key is named once")
    kind = feature.WhichOneof("kind")
    if kind == "bytes_list":
      out[name] = list(feature.bytes_list.value)
    elif kind == "int64_list":
      out[name] = np.asarray(feature.int64_list.value, np.int64)
    elif kind == "float_list":
      out[name] = np.asarray(feature.float_list.value, np.float32)
    else:
      out[name] = []  # a feature with no kind set: no values
  return out


def _document(blob: bytes, field: str, where: str, invalid: InvalidLog) -> Document | None:
  try:
    features = parse_example(blob)
  except message.DecodeError as e:
    invalid.report(f"{where}: not a tf.train.Example ({e})")
    return None
  except DuplicateFeatureError as e:
    invalid.report(f"{where}: {e}")
    return None
  if field not in features:
    names = ", ".join(sorted(features)) or "none"
    invalid.report(f"{where}: no feature {field!r} (features: {names}); give the text feature with `field`")
    return None
  value = features[field]
  if isinstance(value, list):
    if len(value) > 1:
      invalid.report(f"{where}: feature {field!r} holds {len(value)} byte strings; a document is one")
      return None
    try:
      return value[0].decode("utf-8") if value else ""
    except UnicodeDecodeError as e:
      invalid.report(f"{where}: feature {field!r} is not valid UTF-8 ({e.reason})")
      return None
  if value.dtype == np.float32:
    invalid.report(f"{where}: feature {field!r} is a float list, not text (bytes) or token ids (int64)")
    return None
  if value.size and int(value.min()) < 0:
    invalid.report(f"{where}: feature {field!r} holds the negative token id {int(value.min())}")
    return None
  return value


def _tfrecord_blobs(path: str, on_bytes: Callable[[int], None]) -> Iterator[tuple[str, bytes]]:
  with open_binary(path) as f:  # .gz: TFRecord's GZIP option
    for number, (_, data) in enumerate(iter_tfrecord(f, path)):
      on_bytes(16 + len(data))
      yield f"{path}:record {number}", data


def _array_record_blobs(path: str, on_bytes: Callable[[int], None]) -> Iterator[tuple[str, bytes]]:
  local, scratch = path, None
  if is_remote(path):  # ArrayRecord reads by offset from a local file: the object is copied first
    scratch = tempfile.mkdtemp(prefix="jaxdata-records-")
    local = os.path.join(scratch, "input.array_record")
    with open_remote(path) as source, open(local, "wb") as target:
      shutil.copyfileobj(source, target, 1 << 20)
  try:
    with open(local, "rb") as f:
      if not f.read(len(RIEGELI_SIGNATURE)).startswith(RIEGELI_SIGNATURE):
        raise InputFormatError(f"{path}: not an ArrayRecord file (no Riegeli signature at its start)")
    try:
      reader = ArrayRecordReader(local, "readahead_buffer_size:0")
    except RuntimeError as e:  # the reader's constructor rejects a damaged footer
      raise InputFormatError(f"{path}: not a readable ArrayRecord file ({str(e)[:200]})") from e
    try:
      if not reader.ok():
        raise InputFormatError(f"{path}: not a readable ArrayRecord file (damaged footer or index)")
      total = reader.num_records()
      for start in range(0, total, _READ_BATCH):
        try:
          blobs = reader.read(list(range(start, min(start + _READ_BATCH, total))))
        except RuntimeError as e:  # a damaged chunk
          raise InputFormatError(f"{path}: read failed near record {start} ({str(e)[:200]})") from e
        for offset, data in enumerate(blobs):
          on_bytes(len(data))
          yield f"{path}:record {start + offset}", data
    finally:
      close_reader_quietly(reader)
  finally:
    if scratch is not None:
      shutil.rmtree(scratch, ignore_errors=True)


def iter_example_documents(
  path: str, fmt: str, field: str, invalid: InvalidLog, on_bytes: Callable[[int], None] = lambda n: None
) -> Iterator[Document]:
  """The document in feature `field` of every record of an ArrayRecord or TFRecord file, in order."""
  blobs = _tfrecord_blobs(path, on_bytes) if fmt == "tfrecord" else _array_record_blobs(path, on_bytes)
  with readable_archive(path):  # a .tfrecord.gz that is cut, damaged or not gzip names the file
    for where, blob in blobs:
      document = _document(blob, field, where, invalid)
      if document is not None:
        yield document
