"""Megatron's blend and split: `--data-path 0.3 A 0.7 B --split 969,30,1` as a jaxdata mixture.

::

    --data-path 0.3 A 0.7 B     datasets A, B (Megatron .bin / .idx prefixes) with token shares 0.3, 0.7
    --data-path A B             no weights: shares proportional to the datasets' tokens (Megatron: their sizes)
    --split 969,30,1            normalised to [0.969, 0.03, 0.001]; book-ends [0, .969), [.969, .999), [.999, 1]
                                split s of a dataset of n documents: documents [round(b0 n), round(b1 n))

Each prefix is indexed once (`jaxdata index --format megatron`) into its own
metadata directory, `index_dir/<prefix name>` (the files are read in place);
each dataset then reads only its split's documents (`documents: [start,
stop]`), in Megatron's document order before any shuffle. The split is cut
in Megatron's numbering, which counts empty documents (jaxdata leaves them
out), so a split holds the same documents as Megatron's. Megatron's
weights are shares of samples of seq_len tokens: of tokens, as jaxdata's.
What differs is the packing: Megatron cuts one token stream into windows,
jaxdata packs documents into rows.

>>> megatron_split_ranges("969,30,1", 1000)
[(0, 969), (969, 999), (999, 1000)]
>>> parse_blend("0.3 data/web_text_document 0.7 data/code_text_document")
[(0.3, 'data/web_text_document'), (0.7, 'data/code_text_document')]
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Sequence
from typing import Any

from jaxdata.config.pipeline_config import PipelineConfig
from jaxdata.errors import ConfigError, DatasetError
from jaxdata.sources.fileutil import file_sha256, sample_sha256
from jaxdata.sources.flat_format import read_megatron_index
from jaxdata.sources.flat_index import build_flat_index
from jaxdata.sources.manifest import MANIFEST_NAME, Manifest
from jaxdata.sources.opening import open_dataset
from jaxdata.sources.subset import RangeView

__all__ = ["megatron_config", "megatron_raw", "megatron_split_ranges", "parse_blend"]

MEGATRON_SPLITS = ("train", "valid", "test")


def _is_number(text: str) -> bool:
  try:
    float(text)
  except ValueError:
    return False
  return True


def parse_blend(data_path: str | Sequence[str]) -> list[tuple[float | None, str]]:
  """Megatron's `--data-path`: "w1 p1 w2 p2 ..." (weights) or "p1 p2 ..." (None: by size)."""
  if not isinstance(data_path, (str, Sequence)) or (
    not isinstance(data_path, str) and not all(isinstance(t, (str, int, float)) for t in data_path)
  ):
    raise ConfigError(f"data_path: give 'weight prefix weight prefix ...' or prefixes, got {data_path!r:.200}")
  tokens = data_path.split() if isinstance(data_path, str) else [str(t) for t in data_path]
  if not tokens:
    raise ConfigError("data_path: give one or more prefixes, each optionally after its weight")
  if not any(_is_number(t) for t in tokens):
    return [(None, t) for t in tokens]
  if len(tokens) % 2 or not all(_is_number(w) and not _is_number(p) for w, p in zip(tokens[::2], tokens[1::2])):
    raise ConfigError(f"data_path: {' '.join(tokens)!r} is not 'weight prefix weight prefix ...'")
  weights = [float(w) for w in tokens[::2]]
  if any(not w >= 0 for w in weights) or not sum(weights) > 0:
    raise ConfigError(f"data_path: weights must be >= 0 and not all 0, got {weights}")
  return list(zip(weights, tokens[1::2]))


def megatron_split_ranges(split: str, num_documents: int) -> list[tuple[int, int]]:
  """[start, stop) documents of train, valid and test, as Megatron-Core cuts a dataset by `--split`."""
  words = [w for w in re.split(r"[,/\s]+", str(split).strip()) if w]
  odd = next((w for w in words if re.fullmatch(r"[0-9.]+[eE][+-]?[0-9]+", w)), None)
  if odd is not None:  # Megatron-Core takes the runs of digits and points it finds: '1e2' would be 1 and 2
    found = [float(x) for x in re.findall(r"[0-9]+(?:\.[0-9]*)?|\.[0-9]+", odd)]
    raise ConfigError(
      f"split: {split!r}: {odd!r} is not a plain decimal; Megatron-Core's split parser reads only digits and "
      f"points, so it would take {found} from it, not what it says: write plain ratios such as '969,30,1'"
    )
  try:
    values = [float(w) for w in words]
  except ValueError:
    values = []
  if (
    not values
    or len(values) > len(MEGATRON_SPLITS)
    or not all(math.isfinite(v) and v >= 0 for v in values)
    or not sum(values) > 0
  ):
    raise ConfigError(f"split: {split!r} is not up to three ratios >= 0 such as '969,30,1'")
  values += [0.0] * (len(MEGATRON_SPLITS) - len(values))
  total = sum(values)
  ends, cumulative = [0.0], 0.0
  for value in values:
    cumulative += value / total
    ends.append(min(cumulative, 1.0))
  ends[-1] = 1.0
  return [(int(round(a * num_documents)), int(round(b * num_documents))) for a, b in zip(ends, ends[1:])]


def _prefix(path: str) -> str:
  return path[:-4] if path.endswith((".bin", ".idx")) else path


def _indexed(prefix: str, index_dir: str, name: str, tokenizer: dict[str, Any] | None = None) -> str:
  """The metadata directory of one prefix, built with `jaxdata index --format megatron` when missing,
  and built again when the .bin / .idx changed since (size, sampled hash, the .idx's sha256). A
  directory holding anything else (another dataset, another prefix's index, other files) is refused:
  only an index jaxdata wrote for this same prefix is ever replaced."""
  out_dir = os.path.join(index_dir, name)
  for suffix in (".bin", ".idx"):
    if not os.path.isfile(prefix + suffix):
      raise ConfigError(f"data_path: {prefix}{suffix} does not exist (a Megatron prefix names a .bin / .idx pair)")
  if os.path.isfile(os.path.join(out_dir, MANIFEST_NAME)):
    manifest = _own_index(out_dir, prefix)
    if _index_is_current(manifest, prefix) and tokenizer in (None, manifest.tokenizer):
      return out_dir
  elif os.path.isdir(out_dir) and os.listdir(out_dir):
    raise ConfigError(
      f"index_dir: {out_dir} already holds files and no jaxdata index of {prefix}; nothing was changed: "
      "give another --index-dir, or empty that directory"
    )
  build_flat_index("megatron", [prefix], out_dir=out_dir, name=name, force=True, tokenizer=tokenizer)
  return out_dir


def _own_index(out_dir: str, prefix: str) -> Manifest:
  """The manifest in `out_dir` if it is jaxdata's Megatron index of `prefix`; else a ConfigError."""
  try:
    manifest = Manifest.load(out_dir)
  except DatasetError as e:
    raise ConfigError(f"index_dir: {out_dir} holds a manifest jaxdata cannot read ({e}); nothing was changed") from e
  bin_path = os.path.realpath(prefix + ".bin")
  root = manifest.data_root or out_dir
  indexed = [os.path.realpath(os.path.join(root, shard.path)) for shard in manifest.shards]
  if manifest.format != "megatron" or indexed != [bin_path]:
    what = f"a {manifest.format} dataset" if manifest.format != "megatron" else f"the Megatron index of {indexed}"
    raise ConfigError(
      f"index_dir: {out_dir} holds {what} ({manifest.name!r}), not jaxdata's index of {prefix}; nothing was "
      "changed: give another --index-dir"
    )
  return manifest


def _index_is_current(manifest: Manifest, prefix: str) -> bool:
  shard = manifest.shards[0]
  return (
    shard.num_bytes == os.path.getsize(prefix + ".bin")
    and shard.sample_sha256 == sample_sha256(prefix + ".bin")
    and manifest.stats.get("idx_sha256") == [file_sha256(prefix + ".idx")]
  )


def megatron_config(data_path: str | Sequence[str], **options: Any) -> PipelineConfig:
  """A `PipelineConfig` of Megatron's blend, reading the documents of split `which`: `megatron_raw`'s
  keys (its arguments are this function's) as a config."""
  return PipelineConfig.from_dict(megatron_raw(data_path, **options))


def megatron_raw(
  data_path: str | Sequence[str],
  split: str = "969,30,1",
  which: str = "train",
  index_dir: str | None = None,
  seq_len: int = 2048,
  global_batch_size: int = 256,
  *,
  seed: int = 1234,
  tokenizer: dict[str, Any] | None = None,
  **extra: Any,
) -> dict[str, Any]:
  """The config of Megatron's blend, reading the documents of split `which`, as the keys it sets
  (every other key keeps its default).

  Args:
    data_path: `--data-path`, as a string or its words.
    split: `--split` ("969,30,1").
    which: "train", "valid" or "test".
    index_dir: where each prefix's metadata goes (`<index_dir>/<prefix
      name>`); default: `jaxdata-index` beside the first prefix.
    seq_len, global_batch_size, seed: `--seq-length`, `--global-batch-size`, `--seed`.
    tokenizer: the identity of the tokenizer that wrote the ids (recorded in each index,
      so the data mixes with data converted by the same tokenizer).
    extra: jaxdata keys added or overridden (packing, shuffles, pass policies).

  Documents are shuffled globally, afresh every pass (`shuffle_block_size: global`), as
  Megatron's GPTDataset shuffles its document index every epoch; valid and test keep
  every token (their last batch is padded, not dropped).
  """
  if which not in MEGATRON_SPLITS:
    raise ConfigError(f"which: one of {', '.join(MEGATRON_SPLITS)}, got {which!r}")
  blend = parse_blend(data_path)
  megatron_split_ranges(split, 1)  # a bad split is named before any file is indexed
  prefixes = [_prefix(p) for _, p in blend]
  names = [os.path.basename(p) for p in prefixes]
  if len(set(names)) < len(names):
    names = [f"{n}_{i}" for i, n in enumerate(names)]
  index_dir = index_dir or os.path.join(os.path.dirname(os.path.abspath(prefixes[0])), "jaxdata-index")
  datasets, weights = [], {}
  for (weight, _), prefix, name in zip(blend, prefixes, names):
    directory = _indexed(prefix, index_dir, name, tokenizer)
    # Megatron numbers every document of the .idx, empty ones included; jaxdata's records leave those out.
    index = read_megatron_index(prefix + ".idx", prefix + ".bin")
    megatron_documents = int(index.lengths.size) + index.empty
    first, last = megatron_split_ranges(split, megatron_documents)[MEGATRON_SPLITS.index(which)]
    start, stop = int(index.records_before(first)), int(index.records_before(last))
    if start == stop:
      raise ConfigError(
        f"split: {split!r} gives {which} no document of {prefix} ({megatron_documents} documents); "
        f"pick another split or leave {which} out"
      )
    datasets.append({"name": name, "path": directory, "documents": [start, stop]})
    weights[name] = weight if weight is not None else _range_tokens(directory, start, stop)
  return _megatron_keys(datasets, weights, which, seq_len, global_batch_size, seed=seed, extra=extra)


def _megatron_keys(
  datasets: list[dict[str, Any]],
  weights: dict[str, Any],
  which: str,
  seq_len: int,
  global_batch_size: int,
  *,
  seed: int,
  extra: dict[str, Any],
) -> dict[str, Any]:
  """The config keys of Megatron's blend over `datasets`: its shuffle, its rows, its pass policy."""
  raw: dict[str, Any] = {
    "seed": seed,
    "datasets": datasets,
    "mixture": {"weights": weights},
    # Megatron's GPTDataset shuffles its documents every epoch: a global permutation per pass
    "shuffle_block_size": "global",
    "packing": {"seq_len": seq_len},
    "batch": {"global_batch_size": global_batch_size},
    "exhausted_policy": "repeat",
  }
  if which != "train":  # valid / test: every dataset's documents at least once, the mixture held, no token dropped
    raw["stop_after_passes"] = 1
    raw["batch"]["drop_remainder"] = False
  raw.update(extra)
  return raw


def _range_tokens(directory: str, start: int, stop: int) -> int:
  """The tokens of documents [start, stop): an unweighted blend's share (Megatron weighs by size)."""
  with open_dataset(directory) as dataset:
    return int(RangeView(dataset, start, stop).lengths.sum())
