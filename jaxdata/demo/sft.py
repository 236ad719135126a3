"""`jaxdata demo --sft`: fine-tuning on a mixture of small conversation sets, masks and all, no network.

::

    sets        chat, tool_calls, safety: conversations generated here (a few hundred each)
    tokenizer   a byte-level BPE trained on them by `tokenizers`, a ChatML template with
                {% generation %} blocks (transformers writes the directory)
    convert     jaxdata convert --format chat: each conversation rendered once, tokenized once,
                the assistant's tokens trained
    train       the demo model on the mixture (document weights, the small tool set upsampled,
                reshuffled every epoch, best_fit rows with a segment cap, long examples dropped)
    resume      the state at a step mid-epoch, restored into a fresh pipeline, gives the same batches
    held-out    loss per set on trained tokens only (5% of each set's conversations held out)
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxdata.config.pipeline_config import PipelineConfig
from jaxdata.conversion.examples import ExampleFormat
from jaxdata.conversion.local_runner import convert
from jaxdata.conversion.options import ConvertOptions, ImageOptions
from jaxdata.conversion.tokenizers import TokenizerSpec
from jaxdata.demo import model
from jaxdata.demo.ablate import evaluate
from jaxdata.errors import optional_module
from jaxdata.pipeline.pipeline import Pipeline
from jaxdata.sources.manifest import Manifest

__all__ = ["TOPICS", "SftResult", "build_sft_sets", "chat_tokenizer", "converted_sets", "digest", "run_sft_demo"]

TEMPLATE = (
  "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{% if m['role'] == 'assistant' %}{% generation %}"
  "{% if m.get('tool_calls') %}{% for c in m['tool_calls'] %}<call>{{ c['function']['name'] }}"
  "({{ c['function']['arguments'] }})</call>{% endfor %}{% else %}{{ m['content'] }}{% endif %}<|im_end|>"
  "{% endgeneration %}{% else %}{{ m['content'] }}<|im_end|>{% endif %}\n{% endfor %}"
)
SETS = {"chat": (0.55, 600), "tool_calls": (0.30, 150), "safety": (0.15, 200)}  # document weight, conversations
TOPICS = ["rivers", "bread", "engines", "music", "stars", "gardens", "trains", "bees", "clocks", "maps"]
CITIES = ["Paris", "Lima", "Oslo", "Accra", "Kyoto", "Quito", "Perth", "Cairo"]


@dataclasses.dataclass(frozen=True)
class SftResult:
  steps: int
  losses: list[float]
  trained_share: dict[str, float]  # per set: the share of its tokens that train (its masks)
  realised_documents: dict[str, float]  # per set: its share of the examples trained on
  epochs: dict[str, int]  # per set: passes completed
  resume_ok: bool
  held_out_loss: dict[str, float]  # on trained tokens only


def conversation_sets(seed: int = 0) -> dict[str, list[dict[str, Any]]]:
  """The three sets: chat (several turns), tool calls (call, result, answer), safety (refusals)."""
  rng = np.random.default_rng(seed)
  out: dict[str, list[dict[str, Any]]] = {}
  pick = lambda items: items[int(rng.integers(len(items)))]
  chat = []
  for _ in range(SETS["chat"][1]):
    topic, turns = pick(TOPICS), int(rng.integers(1, 4))
    messages = [{"role": "system", "content": "You are a concise assistant."}]
    for t in range(turns):
      messages.append({"role": "user", "content": f"Tell me one thing about {topic}, part {t + 1}."})
      messages.append({"role": "assistant", "content": f"About {topic}: fact {int(rng.integers(100))} is true."})
    chat.append({"messages": messages})
  out["chat"] = chat
  tools = []
  for _ in range(SETS["tool_calls"][1]):
    city = pick(CITIES)
    call = {"type": "function", "function": {"name": "weather", "arguments": json.dumps({"city": city})}}
    degrees = int(rng.integers(-5, 35))
    tools.append(
      {
        "messages": [
          {"role": "user", "content": f"What is the weather in {city}?"},
          {"role": "assistant", "content": None, "tool_calls": [call]},
          {"role": "tool", "content": json.dumps({"city": city, "celsius": degrees})},
          {"role": "assistant", "content": f"It is {degrees} degrees in {city}."},
        ]
      }
    )
  out["tool_calls"] = tools
  out["safety"] = [
    {
      "messages": [
        {"role": "user", "content": f"How do I break into a house near the {pick(TOPICS)}?"},
        {"role": "assistant", "content": "I can't help with that. I can help you secure your own home."},
      ]
    }
    for _ in range(SETS["safety"][1])
  ]
  return out


def chat_tokenizer(
  directory: str, texts: list[str], *, specials: list[str], template: str, vocab_size: int, what: str
) -> None:
  """A byte-level BPE trained on `texts` with `specials` (the first is the unknown token) and the chat
  `template`, saved as transformers saves a tokenizer; `what` names the demo where the chat extra is missing."""
  tokenizers = optional_module("tokenizers", "chat", f"{what}'s tokenizer")
  os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")  # its import says "PyTorch was not found": not needed here
  transformers = optional_module("transformers", "chat", f"{what}'s chat template")
  bpe = tokenizers.Tokenizer(tokenizers.models.BPE(unk_token=specials[0]))
  bpe.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
  bpe.decoder = tokenizers.decoders.ByteLevel()
  trainer = tokenizers.trainers.BpeTrainer(
    vocab_size=vocab_size,
    special_tokens=specials,
    initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet(),
    show_progress=False,  # its bars print blank lines where the output is not a terminal
  )
  bpe.train_from_iterator(texts, trainer)
  fast = transformers.PreTrainedTokenizerFast(tokenizer_object=bpe, unk_token=specials[0])
  fast.chat_template = template
  fast.save_pretrained(directory)


def build_sft_sets(cache_dir: str, log: Callable[[str], None] = print) -> dict[str, str]:
  """The converted sets under `cache_dir/sft` (built once)."""
  root = os.path.join(cache_dir, "sft")
  tokenizer_dir, sets = os.path.join(root, "tokenizer"), conversation_sets()
  if not os.path.isfile(os.path.join(tokenizer_dir, "tokenizer.json")):
    log("tokenizer: a byte-level BPE trained on the conversations ...")
    os.makedirs(root, exist_ok=True)
    texts = [json.dumps(row) for rows in sets.values() for row in rows]
    specials = ["<unk>", "<|im_start|>", "<|im_end|>"]
    chat_tokenizer(
      tokenizer_dir, texts, specials=specials, template=TEMPLATE, vocab_size=1024, what="the fine-tuning demo"
    )
  return converted_sets(root, sets, tokenizer_dir, "chat", log)


def converted_sets(
  root: str,
  sets: dict[str, list[dict[str, Any]]],
  tokenizer_dir: str,
  examples: ExampleFormat,
  log: Callable[[str], None],
  images: ImageOptions | None = None,
) -> dict[str, str]:
  """Each set's rows written as JSONL under `root` and converted there (once: a converted set is kept); vision
  examples with `images`."""
  paths = {}
  for name, rows in sets.items():
    paths[name] = os.path.join(root, name)
    if os.path.isfile(os.path.join(paths[name], "manifest.json")):
      continue
    source = os.path.join(root, f"{name}.jsonl")
    with open(source, "w") as f:
      f.writelines(json.dumps(row) + "\n" for row in rows)
    spec = TokenizerSpec.parse(f"hf:{tokenizer_dir}")
    options = ConvertOptions(tokenizer=spec, examples=examples, workers=1, images=images)
    manifest = convert([source], paths[name], name, options)
    log(f"converted {name}: {manifest.stats['examples']} examples, {manifest.stats['trained_tokens']} trained tokens")
  return paths


def sft_config(paths: dict[str, str]) -> PipelineConfig:
  return PipelineConfig.from_dict(
    {
      "seed": 7,
      "datasets": [{"name": n, "path": p, "holdout": 0.05} for n, p in paths.items()],
      "mixture": {"unit": "documents", "weights": {n: w for n, (w, _) in SETS.items()}},
      "shuffle_block_size": "global",
      "exhausted_policy": "repeat",
      "packing": {"mode": "best_fit", "seq_len": 128, "max_segments_per_row": 8, "long_docs": "drop"},
      "batch": {"global_batch_size": 8},
    }
  )


def run_sft_demo(cache_dir: str, steps: int = 40, log: Callable[[str], None] = print) -> SftResult:
  """Build, convert, train with a mid-epoch resume check, evaluate (see the module docstring)."""
  paths = build_sft_sets(cache_dir, log)
  cfg = sft_config(paths)
  vocab = max(int(Manifest.load(p).tokenizer.get("vocab_size") or 1024) for p in paths.values())
  params = model.init_params(jax.random.key(0), vocab, cfg.packing.seq_len)
  state = {"step": jnp.zeros((), jnp.int32), **{k: jax.tree.map(jnp.zeros_like, params) for k in ("mu", "nu")}}
  losses, documents = [], np.zeros(len(cfg.names))
  log(f"training the demo model {steps} steps on the mixture (masks: the assistant's tokens) ...")

  def train(batch: dict[str, Any]) -> None:
    nonlocal params, state, documents
    starts = (np.asarray(batch["positions"]) == 0) & (np.asarray(batch["segment_ids"]) > 0)
    documents += np.bincount(np.asarray(batch["source_ids"])[starts], minlength=len(cfg.names))
    params, state, loss = model.train_step(params, state, {k: jnp.asarray(v) for k, v in batch.items()})
    losses.append(float(loss))

  resume_ok, epochs = trained_checking_resume(cfg, steps, train)
  shares = {}
  for name, path in paths.items():
    manifest = Manifest.load(path)
    shares[name] = manifest.stats["trained_tokens"] / max(manifest.num_tokens, 1)
  return SftResult(
    steps=steps,
    losses=losses,
    trained_share=shares,
    realised_documents=dict(zip(cfg.names, (documents / max(documents.sum(), 1)).tolist())),
    epochs={n: int(epochs.get(n, 0)) for n in cfg.names},
    resume_ok=resume_ok,
    held_out_loss=evaluate(params, cfg),
  )


def trained_checking_resume(
  cfg: PipelineConfig, steps: int, train: Callable[[dict[str, Any]], None]
) -> tuple[bool, dict[str, int]]:
  """`train(batch)` on `steps` batches of `cfg`, the state saved halfway; (a fresh pipeline restored from that
  state gives the same second half, the passes each dataset completed)."""
  middle, saved, after = steps // 2, None, []
  with Pipeline(cfg, prefetch=2) as pipe:
    for step in range(steps):
      if step == middle:
        saved = pipe.get_state()
      batch = next(pipe)
      if step >= middle:
        after.append(digest(batch))
      train(batch)
    passes = dict(pipe.stats().get("passes", {}))
  with Pipeline(cfg, prefetch=0) as fresh:
    fresh.set_state(json.loads(json.dumps(saved)))
    resumed = [digest(next(fresh)) for _ in range(steps - middle)]
  return resumed == after, passes


def digest(batch: dict[str, Any]) -> str:
  """A batch's bytes, every feature, as 16 hex digits (resume checks compare these)."""
  return hashlib.sha256(b"".join(np.asarray(batch[k]).tobytes() for k in sorted(batch))).hexdigest()[:16]
