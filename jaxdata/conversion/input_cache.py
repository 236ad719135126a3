"""Raw inputs converted once into a cache, keyed by what decides the dataset: `built_dataset`.

A config may name raw files instead of a converted dataset. The first run
converts them (all cores, the local runner's work units); later runs find the
cache by its key and open it at once::

    key = sha256 of  every input file: path, size, mtime, sampled hash (fileutil.sample_sha256)
                     the tokenizer's files, the chat template's text, every conversion option
    ROOT/NAME-KEY16/            the dataset (manifest.json written last: complete or absent)
    ROOT/.NAME-KEY16.building   the shards being written (renamed into place when sealed)
    ROOT/.NAME-KEY16.units      the finished units and shards' records (`conversion.shared_build`)
    ROOT/.NAME-KEY16.lock-I     one builder per process index: a second run waits, then reuses
    ROOT/NAME.last.json         the last key's parts: a rebuild says which changed

The processes that share ROOT (a pod's hosts) divide the build; process 0
seals it. A build interrupted (Ctrl-C, a full disk, a killed host) leaves no
cache under the final name, so nothing half-written is ever opened, and
keeps its finished units: the next run resumes. A file that changes while
it is converted is named and the build stops.
"""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import json
import multiprocessing
import os
import shlex
import shutil
import time
from collections.abc import Callable, Mapping
from typing import Any

from jaxdata.conversion.input_files import CACHE_TAG, expand_inputs
from jaxdata.conversion.options import ConvertOptions
from jaxdata.conversion.remote_inputs import environment_options, remote_head_sha256, remote_states
from jaxdata.conversion.shared_build import build_part
from jaxdata.errors import ConfigError, DatasetError, InputFormatError
from jaxdata.sources.fileutil import file_sha256, sample_sha256
from jaxdata.sources.manifest import MANIFEST_NAME
from jaxdata.sources.stores import is_remote

__all__ = ["CacheKey", "built_dataset", "cache_key", "convert_command_line", "refuse_too_large"]

KEY_VERSION = 2  # bumped when what the key covers changes (2: the chat template apart from the tokenizer)
CACHE_TAG_TEXT = (
  "Signature: 8a477f597d28d172789f06886806bc55\n"
  "# This directory holds jaxdata's caches of converted raw inputs (jaxdata cache list / prune).\n"
)
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja")


@dataclasses.dataclass(frozen=True)
class CacheKey:
  """What decides a converted dataset, and its digest (the cache directory's suffix)."""

  files: tuple[tuple[str, int, int, str], ...]  # (path, size, mtime_ns, sampled sha256) of every input
  tokenizer: str  # sha256 of the tokenizer's files
  template: str  # sha256 of the chat template's text ("" where none is given)
  options: str  # the conversion options, as sorted JSON

  @property
  def digest(self) -> str:
    text = json.dumps([KEY_VERSION, self.files, self.tokenizer, self.template, self.options])
    return hashlib.sha256(text.encode()).hexdigest()

  def changes_from(self, before: Mapping[str, Any]) -> list[str]:
    """What differs from a key's parts as `last.json` recorded them: one phrase each."""
    changes = []
    old_files = {f[0]: tuple(f) for f in before.get("files", [])}
    new_files = {f[0]: f for f in self.files}
    for path in sorted(set(old_files) | set(new_files)):
      if path not in old_files:
        changes.append(f"{path} is new")
      elif path not in new_files:
        changes.append(f"{path} is gone")
      elif old_files[path] != new_files[path]:
        old, new = old_files[path], new_files[path]
        how = f"size {old[1]:,} -> {new[1]:,}" if old[1] != new[1] else "same size, modified or rewritten"
        changes.append(f"{path} changed ({how})")
    for part in ("tokenizer", "template", "options"):
      if before.get(part) != getattr(self, part):
        changes.append(f"the {part} changed")
    return changes


def _tokenizer_digests(options: ConvertOptions) -> tuple[str, str]:
  """(sha256 of the tokenizer's files less its chat template, sha256 of the chat template the conversion
  renders: its own file, else the tokenizer's; "" where none is rendered). A template edited for one
  dataset then rebuilds only the datasets that render it, not every one sharing the tokenizer."""
  own = ""
  if options.chat_template:
    with open(options.chat_template, "rb") as f:
      own = hashlib.sha256(f.read()).hexdigest()
  spec = options.tokenizer
  if spec.kind == "byte" or spec.path is None:
    return "byte", own
  digest = hashlib.sha256(spec.kind.encode())
  # a named file's neighbours too: transformers reads the special ids from tokenizer_config.json beside it
  folder = spec.path if os.path.isdir(spec.path) else os.path.dirname(spec.path)
  paths = sorted({os.path.join(folder, n) for n in _TOKENIZER_FILES} | ({spec.path} if folder != spec.path else set()))
  found = [p for p in paths if os.path.isfile(p)]
  if not found or not os.path.exists(spec.path):
    what = f"holds no tokenizer files ({', '.join(_TOKENIZER_FILES)})" if os.path.isdir(spec.path) else "does not exist"
    raise ConfigError(f"tokenizer: {spec.path} {what}")
  templates = []  # the tokenizer's own chat template: its file, and the one its config holds
  for path in found:
    name = os.path.basename(path)
    if name == "chat_template.jinja":
      templates.append(file_sha256(path))
      continue
    content = file_sha256(path)
    if name == "tokenizer_config.json":
      config = _json_file(path)
      if isinstance(config, dict) and "chat_template" in config:
        templates.append(hashlib.sha256(json.dumps(config.pop("chat_template"), sort_keys=True).encode()).hexdigest())
        content = hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()
    digest.update(name.encode() + content.encode())
  renders = options.examples != "text" and not options.chat_template_text
  template = own or (hashlib.sha256("".join(templates).encode()).hexdigest() if renders and templates else "")
  return digest.hexdigest(), template


def _json_file(path: str) -> Any:
  """A JSON file's content; None where it is not JSON (its bytes are keyed then)."""
  try:
    with open(path, encoding="utf-8") as f:
      return json.load(f)
  except (OSError, ValueError):
    return None


def _file_state(path: str, full_hash: bool) -> tuple[str, int, int, str]:
  stat = os.stat(path)
  return (
    os.path.abspath(path),
    stat.st_size,
    stat.st_mtime_ns,
    file_sha256(path) if full_hash else sample_sha256(path),
  )


def cache_key(inputs: list[str], options: ConvertOptions, full_hash: bool = False) -> CacheKey:
  """The key of the dataset `inputs` convert to with `options` (every input's state read now: its path,
  size, modification time and a hash of 16 sampled blocks, or with `full_hash` of every byte)."""
  if any(is_remote(p) for p in inputs):
    environment_options()  # buckets as the environment reaches them (not as a Beam run in this process set them)
  try:
    files = expand_inputs(inputs, options.include, options.exclude)
  except FileNotFoundError as error:
    raise ConfigError(f"inputs: {str(error).removeprefix('input: ')}: the glob must match a file") from error
  if not files:
    raise ConfigError(f"inputs: {', '.join(inputs)} match no file")
  tokenizer, template = _tokenizer_digests(options)
  decided = dataclasses.asdict(options)
  for unkeyed in ("workers", "tokenizer", "chat_template"):  # workers never change the output; the others: above
    decided.pop(unkeyed)
  remote = [p for p in files if is_remote(p)]
  states = dict(zip(remote, remote_states(remote))) if remote else {}
  return CacheKey(
    files=tuple((p, *states[p], remote_head_sha256(p)) if p in states else _file_state(p, full_hash) for p in files),
    tokenizer=tokenizer,
    template=template,
    options=json.dumps(decided, sort_keys=True, default=list),
  )


def built_dataset(
  name: str,
  inputs: list[str],
  options: ConvertOptions,
  root: str,
  log: Callable[[str], None] = lambda m: None,
  max_bytes: int | None = None,
  *,
  process: tuple[int, int] = (0, 1),
  wait_s: float = 3600.0,
  key: CacheKey | None = None,
  full_hash: bool = False,
) -> str:
  """The directory of the dataset `inputs` convert to: the cache's, built now if it is not there (`key`: the
  inputs' key when the caller has just read it, `cache_key(inputs, options)` otherwise). Inputs
  larger than `max_bytes` are not converted here: the ConfigError gives the command that builds the
  same cache on an engine. `process`: (this process's index, the processes that build together: the hosts
  of a pod sharing `root`), each converting its share (`conversion.shared_build`); process 0 seals it.
  `full_hash`: the key hashes every byte of the inputs (`cache_key`). `root` is tagged as a cache
  (CACHEDIR.TAG): an input directory that holds it never reads the cache as inputs."""
  _refuse_inside_a_worker(name)
  key = key or cache_key(inputs, options, full_hash)
  tag_cache_directory(root)
  target = os.path.join(root, f"{name}-{key.digest[:16]}")
  if os.path.isfile(os.path.join(target, MANIFEST_NAME)):
    return target
  refuse_too_large(key, max_bytes, convert_command_line(name, inputs, options, target))
  index, count = process
  stem = os.path.join(root, f".{name}-{key.digest[:16]}")
  with open(f"{stem}.lock-{index}", "w") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)  # a second run of this process index waits here, then reuses the cache
    if os.path.isfile(os.path.join(target, MANIFEST_NAME)):
      log(f"{name}: another run built the cache {target}; reusing it")
      return target
    if index == 0:
      _say_why(name, key, root, log)
    staging, units = f"{stem}.building", f"{stem}.units"

    def sealed() -> bool:  # process 0 finished the cache without needing more of this process
      return os.path.isfile(os.path.join(target, MANIFEST_NAME))

    try:
      manifest = build_part(
        inputs, staging, units, name, options, index, count=count, wait_s=wait_s, log=log, sealed=sealed
      )
      if manifest is None:  # another process seals the cache
        _wait_for_cache(target, wait_s, name)
        return target
      _seal(name, staging, target, log, unchanged=lambda: _check_unchanged(name, key, inputs, options, full_hash))
    except InputFormatError:  # bad or changing inputs: nothing of this build is worth keeping (process 0 clears it,
      if index == 0:  # after the others have read the error it left for them)
        for leftover in (staging, units):
          shutil.rmtree(leftover, ignore_errors=True)
      raise
    # any other stop (Ctrl-C, a full disk, a killed host) keeps the finished units: the next run resumes
    shutil.rmtree(units, ignore_errors=True)
    _remember(root, name, key)
    log(f"{name}: converted into the cache {target}")
  return target


def _refuse_inside_a_worker(name: str) -> None:
  if getattr(multiprocessing.current_process(), "_inheriting", False):
    raise RuntimeError(
      f"{name}: a conversion worker is importing the script that builds the cache (it would wait on that "
      "build's lock forever): put the script's code under `if __name__ == '__main__':`"
    )


def _remember(root: str, name: str, key: CacheKey) -> None:
  """The key of the last build of `name` under `root`: the next build says what changed since."""
  with open(os.path.join(root, f"{name}.last.json"), "w") as f:
    json.dump(_parts(key), f)


def _check_unchanged(name: str, key: CacheKey, inputs: list[str], options: ConvertOptions, full_hash: bool) -> None:
  """An InputFormatError when the inputs' key is no longer `key`: they changed while they were converted."""
  after = cache_key(inputs, options, full_hash)
  if after != key:
    raise InputFormatError(
      f"{name}: inputs changed while they were converted ({', '.join(after.changes_from(_parts(key)))}); "
      "nothing was cached: run again once they are stable"
    )


def _seal(name: str, staging: str, target: str, log: Callable[[str], None], unchanged: Callable[[], None]) -> None:
  """The built dataset moved under the cache's name, once `unchanged()` says its inputs held still."""
  unchanged()
  if os.path.isdir(target):  # a cache someone half removed (its manifest gone): replaced whole
    log(f"{name}: {target} has no manifest.json (half removed); building it again")
    shutil.rmtree(target)
  os.replace(staging, target)


def tag_cache_directory(root: str) -> None:
  """`root`, made and tagged as a cache (CACHEDIR.TAG, the Cache Directory Tagging convention): backup tools
  and `expand_inputs` skip it."""
  os.makedirs(root, exist_ok=True)
  tag = os.path.join(root, CACHE_TAG)
  if not os.path.isfile(tag):
    with open(tag, "w") as f:
      f.write(CACHE_TAG_TEXT)


def refuse_too_large(key: CacheKey, max_bytes: int | None, command: str) -> None:
  """A ConfigError giving `command` (the engine's build of the same cache) for inputs over `max_bytes`."""
  size = sum(f[1] for f in key.files)
  if max_bytes is not None and size > max_bytes:
    raise ConfigError(
      f"inputs: {size:,} bytes, more than inputs_max_bytes ({max_bytes:,}) to convert in place; build the "
      f"same cache on an engine, then run again: {command}"
    )


def _wait_for_cache(target: str, wait_s: float, name: str) -> None:
  deadline = time.monotonic() + wait_s
  while not os.path.isfile(os.path.join(target, MANIFEST_NAME)):
    if time.monotonic() > deadline:
      raise DatasetError(f"{name}: process 0 did not seal the cache {target} within {wait_s:.0f} s; run again")
    time.sleep(0.2)


_FLAGS = {  # ConvertOptions field -> jaxdata convert's flag (the fields the command line can set)
  "field": "--field",
  "train_on": "--train-on",
  "chat_template": "--chat-template",
  "max_example_tokens": "--max-tokens",
  "text_mode": "--text-mode",
  "shard_bytes": "--shard-size",
  "compression": "--compression",
  "skip_invalid": "--skip-invalid",
}


def convert_command_line(name: str, inputs: list[str], options: ConvertOptions, out: str, runner: str = "beam") -> str:
  """The `jaxdata convert` command that writes the dataset `built_dataset` would, into `out`."""
  default = ConvertOptions()
  words = ["jaxdata", "convert", *inputs, "--out", out, "--name", name, "--tokenizer", _spec_text(options)]
  if options.examples != "text" or options.input_format != "auto":
    words += ["--format", options.examples if options.examples != "text" else options.input_format]
  for field, flag in _FLAGS.items():
    value = getattr(options, field)
    if value != getattr(default, field):
      words += [flag] if isinstance(value, bool) else [flag, str(value)]
  for field, flag in (("include", "--include"), ("exclude", "--exclude")):
    for pattern in getattr(options, field):
      words += [flag, pattern]
  words += ["--runner", runner]
  unflagged = [
    f.name
    for f in dataclasses.fields(ConvertOptions)
    if f.name not in {*_FLAGS, "tokenizer", "examples", "input_format", "include", "exclude", "workers"}
    and getattr(options, f.name) != getattr(default, f.name)
  ]
  line = " ".join(shlex.quote(w) for w in words)
  if unflagged:  # no flag for these: the Python call writes them
    line += f"  (options without a flag: {', '.join(unflagged)}: call jaxdata.conversion.beam_runner.convert_with_beam)"
  return line


def _spec_text(options: ConvertOptions) -> str:
  spec = options.tokenizer
  return "byte" if spec.kind == "byte" else f"{'hf' if spec.kind == 'huggingface' else 'sp'}:{spec.path}"


def _parts(key: CacheKey) -> dict[str, Any]:
  return {
    "files": [list(f) for f in key.files],
    "tokenizer": key.tokenizer,
    "template": key.template,
    "options": key.options,
    "digest": key.digest,  # the cache it names (jaxdata cache list: the current one of its name)
  }


def _say_why(name: str, key: CacheKey, root: str, log: Callable[[str], None]) -> None:
  last = os.path.join(root, f"{name}.last.json")
  if not os.path.isfile(last):
    log(f"{name}: converting its {len(key.files)} input files into a cache (the first time)")
    return
  with open(last) as f:
    before = json.load(f)
  changes = key.changes_from(before) or ["its cache is not there"]
  log(f"{name}: converting again: {'; '.join(changes[:5])}{'; ...' if len(changes) > 5 else ''}")
