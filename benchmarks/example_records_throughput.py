"""Converting MaxText's data: tf.train.Example records (TFRecord, ArrayRecord) against the same texts as JSONL.

    python -m benchmarks.example_records_throughput [--out /tmp/jaxdata-example-bench] [--mb 64] [--workers 2]

The texts are the converter benchmark's English-like documents (200-4,000
characters). They are written three ways: JSONL, TFRecord and ArrayRecord
files of `tf.train.Example` records with a `text` bytes feature (as TFDS
and MaxText keep C4), 8 files each. Each is converted with the byte
tokenizer; printed per input kind: wall time, documents/s, input MB/s, and
the ratio to JSONL. The three outputs are checked to hold identical
documents. TensorFlow is not used (nor installed): jaxdata parses the
records with protobuf.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import struct
import time

import numpy as np
from array_record.python.array_record_module import ArrayRecordWriter

from benchmarks.convert_throughput import write_jsonl
from jaxdata.conversion.example_records import example_message_class
from jaxdata.conversion.local_runner import convert
from jaxdata.conversion.options import ConvertOptions
from jaxdata.sources.opening import open_dataset
from jaxdata.sources.record_files import masked_crc32c

FILES = 8


def _examples(texts: list[str]) -> list[bytes]:
  example_type = example_message_class()
  out = []
  for text in texts:
    example = example_type()
    example.features.feature["text"].bytes_list.value.append(text.encode())
    out.append(example.SerializeToString())
  return out


def write_inputs(root: str, megabytes: float) -> dict[str, str]:
  """The same texts as JSONL, TFRecord and ArrayRecord directories (8 files each)."""
  source = os.path.join(root, "texts.jsonl")
  if not os.path.exists(source):
    write_jsonl(source, megabytes, seed=0)
  with open(source, encoding="utf-8") as f:
    texts = [json.loads(line)["text"] for line in f]
  parts = np.array_split(np.arange(len(texts)), FILES)
  dirs = {kind: os.path.join(root, kind) for kind in ("jsonl", "tfrecord", "arrayrecord")}
  if all(os.path.isdir(d) for d in dirs.values()):
    return dirs
  for directory in dirs.values():
    os.makedirs(directory, exist_ok=True)
  for i, part in enumerate(parts):
    chunk = [texts[j] for j in part]
    with open(os.path.join(dirs["jsonl"], f"c4-{i:05d}.jsonl"), "w", encoding="utf-8") as f:
      f.writelines(json.dumps({"text": t}) + "\n" for t in chunk)
    records = _examples(chunk)
    with open(os.path.join(dirs["tfrecord"], f"c4-train.tfrecord-{i:05d}-of-{FILES:05d}"), "wb") as f:
      for data in records:
        length = struct.pack("<Q", len(data))
        f.write(length + struct.pack("<I", masked_crc32c(length)) + data + struct.pack("<I", masked_crc32c(data)))
    writer = ArrayRecordWriter(
      os.path.join(dirs["arrayrecord"], f"c4-train.array_record-{i:05d}-of-{FILES:05d}"), "group_size:1"
    )
    for data in records:
      writer.write(data)
    writer.close()
  return dirs


def _size(directory: str) -> int:
  return sum(os.path.getsize(os.path.join(directory, n)) for n in os.listdir(directory))


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--out", default="/tmp/jaxdata-example-bench")
  parser.add_argument("--mb", type=float, default=64)
  parser.add_argument("--workers", type=int, default=2)
  args = parser.parse_args()
  os.makedirs(args.out, exist_ok=True)
  dirs = write_inputs(args.out, args.mb)
  results, reference = {}, None
  for kind, directory in dirs.items():
    out = os.path.join(args.out, f"out-{kind}")
    shutil.rmtree(out, ignore_errors=True)
    started = time.perf_counter()
    manifest = convert([directory], out, "c4", ConvertOptions(workers=args.workers))
    seconds = time.perf_counter() - started
    results[kind] = seconds
    with open_dataset(out) as dataset:
      documents = dataset.read_global(np.arange(dataset.num_records)).tokens
    if reference is None:
      reference = documents
    assert np.array_equal(documents, reference), f"{kind}: other documents than JSONL's"
    mb = _size(directory) / 1e6
    print(
      f"{kind:12s} {seconds:7.2f} s  {manifest.num_records / seconds:10,.0f} docs/s  {mb / seconds:7.1f} input MB/s  "
      f"{mb:7.1f} MB in  {results['jsonl'] / seconds:5.2f}x JSONL's speed"
    )


if __name__ == "__main__":
  main()
