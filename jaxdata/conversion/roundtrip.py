"""`check_roundtrip`: do a converted dataset's first documents decode to the texts they came from?

A normalising tokenizer (SentencePiece's default NFKC rules drop newlines
and runs of spaces) converts without error but cannot give the text back;
this reads the first N documents of the inputs again, in conversion order,
and compares each with the decoded tokens of its record.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from jaxdata.conversion.formats import DocumentRead, configured_format, format_of, plan_units, unit_documents
from jaxdata.conversion.input_files import expand_inputs
from jaxdata.conversion.inputs import InvalidLog
from jaxdata.conversion.options import ConvertOptions
from jaxdata.conversion.tokenizers import load_tokenizer
from jaxdata.sources.dataset import TokenDataset

__all__ = ["RoundtripReport", "check_roundtrip"]


@dataclasses.dataclass(frozen=True)
class RoundtripReport:
  checked: int
  mismatches: int
  examples: list[str]  # the first few, with where the texts first differ


def check_roundtrip(out_dir: str, inputs: Sequence[str], options: ConvertOptions, count: int) -> RoundtripReport:
  tokenizer = load_tokenizer(options.tokenizer)
  files = expand_inputs(inputs, options.include, options.exclude)
  units = plan_units(files, [configured_format(format_of(f, options.input_format), options) for f in files], 1 << 62)
  texts: list[str] = []
  for unit in units:
    # A conversion that reached the dataset skipped invalid records (or had none): so does this.
    for text in unit_documents(unit, options, DocumentRead(InvalidLog(skip_invalid=True))):
      if tokenizer.encode_batch([text])[1][0] > 0:  # empty documents were skipped too
        texts.append(text)
      if len(texts) == count:
        break
    if len(texts) == count:
      break
  with TokenDataset(out_dir) as dataset:
    documents = dataset.read_global(np.arange(len(texts))).to_list()
  examples: list[str] = []
  mismatches = 0
  for i, (text, ids) in enumerate(zip(texts, documents)):
    decoded = tokenizer.decode(ids)
    if decoded != text:
      mismatches += 1
      if len(examples) < 5:
        at = next((k for k, (a, b) in enumerate(zip(text, decoded)) if a != b), min(len(text), len(decoded)))
        examples.append(
          f"document {i}: differs at character {at}: {text[max(0, at - 20) : at + 20]!r} -> "
          f"{decoded[max(0, at - 20) : at + 20]!r}"
        )
  return RoundtripReport(len(texts), mismatches, examples)
