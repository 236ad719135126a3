"""Conversion: raw text (JSONL, Parquet, plain text; local or in a bucket) into a dataset directory.

One job, in the order the data moves through it::

    options.py          ConvertOptions, input formats, text modes (light: the CLI's parser reads it)
    input_files.py      which files are the inputs (walks, globs; caches skipped) and their formats
    inputs.py           files -> documents with their locations; remote_inputs.py for gs:// and s3://
    compressed.py       a file's bytes: local or remote, .gz / .zst decompressed, damaged archives named
    work_units.py       inputs cut into units that tokenize independently
    formats.py          input formats as registered types: the files each reads, its units, its documents
    plan.py             `ConversionPlan`: files, formats, tokenizer, units; what every runner executes alike
    tokenizers.py       byte-level, Hugging Face, SentencePiece
    example_fields.py   a record's fields before any template: given ids and labels, messages and their weights
    template_tokenizer.py  the tokenizer a chat template renders with (transformers', or ours called as one)
    examples.py         fine-tuning examples (chat, prompt / completion) -> ids and trained-token masks
    turns.py            where each assistant turn lies in a rendering without generation blocks
    sentinels.py        where each content lies in a rendering (a sentinel rendering aligned); the marker probes
    image_inputs.py     the images a vision record names, as the bytes they came in (paths, bytes, HF structs)
    vision_examples.py  vision examples (chat with images, captions, interleaved) -> ids with each image's run
    vision_units.py     one unit of vision examples -> tokens, masks, and its images as they came
    preference.py       preference pairs (chosen / rejected, KTO labels) -> both sides, one prompt; a pair as one record
    example_records.py  documents out of tf.train.Example records (ArrayRecord, TFRecord)
    tokenize_units.py   one unit -> tokens + lengths; unit sizes; the manifest's stats
    shard_jobs.py       shards planned from lengths, written independently
    output.py           the output directory: refuse or clear
    local_runner.py     `convert`: the phases in processes on this machine
    input_cache.py      `built_dataset`: raw inputs named in a config, converted once into a keyed cache
    shared_build.py     `build_part`: one process's share of a build several run together (resumable)
    bucket_cache.py     `published_dataset`: that cache kept in gs:// / s3:// for hosts without a shared disk
    cache_listing.py    `cached_datasets` / `prune_caches`: those caches listed with their sizes, the stale removed
    beam_runner.py      `convert_with_beam`: the same phases as an Apache Beam pipeline
    ray_runner.py       `convert_with_ray`: the same phases as Ray tasks
    roundtrip.py        do converted documents decode to their text?
    from_python.py      datasets from Python iterables or a Hugging Face Dataset

`convert`, `ConvertOptions`, `from_iterable` and `from_hf_dataset` are
also `jaxdata`'s; the tokenizers are this package's. Nothing is imported
until a name is used.
"""

from jaxdata._lazy import lazy_exports

__all__ = [
  "ByteTokenizer",
  "ConvertOptions",
  "HuggingFaceTokenizer",
  "SentencePieceTokenizer",
  "TokenizerSpec",
  "convert",
  "from_hf_dataset",
  "from_iterable",
  "load_tokenizer",
]

_TOKENIZERS = "jaxdata.conversion.tokenizers"
__getattr__, __dir__ = lazy_exports(
  __name__,
  {
    **dict.fromkeys(
      ("ByteTokenizer", "HuggingFaceTokenizer", "SentencePieceTokenizer", "TokenizerSpec", "load_tokenizer"),
      _TOKENIZERS,
    ),
    "ConvertOptions": "jaxdata.conversion.options",
    "convert": "jaxdata.conversion.local_runner",
    **dict.fromkeys(("from_hf_dataset", "from_iterable"), "jaxdata.conversion.from_python"),
  },
  package_globals=globals(),
)
