"""Image-text examples packed whole into rows of three budgets (tokens, patches, images), with a text set mixed
in: every example placed once or counted, no row over a budget, each row's images as the processor cuts them
beside the tokens that stand for them, Qwen2-VL's rotary positions, one compile for a whole pass, and the same
batches after a restore at any step and in every way of making steps."""

from __future__ import annotations

import json

import jax
import numpy as np
import pytest

from jaxdata import StepMaking
from jaxdata.config import PipelineConfig
from jaxdata.conversion import ConvertOptions, convert
from jaxdata.errors import ConfigError, DatasetError, InputFormatError
from jaxdata.mixture.metadata import load_metadata
from jaxdata.pipeline import Pipeline
from jaxdata.pipeline.planner import StepPlanner
from jaxdata.sources import TokenDataset
from jaxdata.transforms.image_rows import assemble_images, merged_positions
from jaxdata.transforms.pieces import Pieces
from jaxdata.vision import NativeResolution
from jaxdata.vision.decode import decoded_patches
from test_vision_convert import _options, vision_inputs  # noqa: F401 -- the fixture, shared

S, P, K = 512, 1200, 2
POLICY = NativeResolution()


@pytest.fixture(scope="module")
def vision_data(vision_inputs, tmp_path_factory):  # noqa: F811 -- the imported fixture
  """The vision chats (0-3 images each, native policy) and a text set tokenized with the same tokenizer."""
  root, rows, _ = vision_inputs
  out = tmp_path_factory.mktemp("packed")
  convert([str(root / "chat.jsonl")], str(out / "vl"), "vl", _options(root, 1))
  rng = np.random.default_rng(3)
  with open(out / "text.jsonl", "w") as f:
    for _ in range(60):
      f.write(json.dumps({"text": " ".join(f"word{int(w)}" for w in rng.integers(0, 50, int(rng.integers(5, 80))))}))
      f.write("\n")
  convert([str(out / "text.jsonl")], str(out / "txt"), "txt", ConvertOptions(tokenizer=f"hf:{root / 'tok'}"))
  return {"vl": str(out / "vl"), "txt": str(out / "txt")}


def vision_config(data: dict, **changes) -> PipelineConfig:
  raw = {
    "datasets": [{"name": "vl", "path": data["vl"]}, {"name": "txt", "path": data["txt"]}],
    "mixture": {"weights": {"vl": 0.7, "txt": 0.3}},
    "packing": {"seq_len": S, "images": {"max_patches": P, "max_images": K}},
    "batch": {"global_batch_size": 4, "drop_remainder": False},
    "exhausted_policy": "stop",
    "seed": 7,
  }
  for key, value in changes.items():
    raw[key] = {**raw[key], **value} if isinstance(value, dict) else value
  return PipelineConfig.from_dict(raw)


def _amounts(data: dict) -> tuple[np.ndarray, np.ndarray]:
  with TokenDataset(data["vl"]) as dataset:
    return np.asarray(dataset.columns["num_patches"], np.int64), np.asarray(dataset.lengths, np.int64)


def test_every_example_is_whole_in_one_row_within_three_budgets_or_counted(vision_data):
  cfg = vision_config(vision_data)
  metas = load_metadata(cfg)
  patches, images = metas["vl"].image_amounts[:, 0], metas["vl"].image_amounts[:, 1]
  lengths = {name: np.asarray(metas[name].lengths) for name in ("vl", "txt")}
  placed, dropped = {0: [], 1: []}, 0
  for plan in StepPlanner(cfg, metas).plans():
    assert (plan.pieces.offset == 0).all() and (plan.pieces.length == plan.pieces.doc_length).all()  # whole
    image_record = np.where(plan.pieces.dataset == 0, plan.pieces.record, -1)
    piece_patches = np.where(image_record >= 0, np.r_[patches, 0][image_record], 0)
    piece_images = np.where(image_record >= 0, np.r_[images, 0][image_record], 0)
    for budget, amount in ((S, plan.pieces.length), (P, piece_patches), (K, piece_images)):
      assert (np.bincount(plan.row, weights=amount, minlength=plan.rows) <= budget).all()
    for d in (0, 1):
      placed[d] += plan.pieces.record[plan.pieces.dataset == d].tolist()
    dropped += plan.dropped_documents
  over = np.flatnonzero((images > K) | (patches > P) | (lengths["vl"] > S))
  assert over.size >= 5  # the budgets bite: examples of three images (and larger ones) are left out
  assert sorted(placed[0]) == sorted(set(range(lengths["vl"].size)) - set(over.tolist()))  # each once
  assert placed[1] and len(set(placed[1])) == len(placed[1])  # the text set mixed in (the pass ends with vl's)
  assert dropped == over.size  # every example left out is counted


def test_each_rows_images_are_the_processors_patches_beside_their_tokens(vision_data):
  cfg = vision_config(vision_data)
  plans = list(StepPlanner(cfg).plans())
  with Pipeline(cfg, prefetch=0) as pipe, TokenDataset(vision_data["vl"]) as dataset:
    batches = [{k: np.asarray(v) for k, v in b.items()} for b in pipe]
    image_token = None
    checked = 0
    assert len(batches) == len(plans)
    for plan, batch in zip(plans, batches):
      seen = np.zeros(plan.rows, np.int64)
      for i in np.lexsort((plan.column, plan.row)):
        if plan.pieces.dataset[i] != 0:
          continue
        row, column, record = int(plan.row[i]), int(plan.column[i]), int(plan.pieces.record[i])
        stored = dataset.read_images(*dataset.locate(np.array([record])))[0]
        for blob, height, width, at in stored:
          k = int(seen[row])
          seen[row] += 1
          grid = POLICY.grids(np.array([height]), np.array([width]))[0]
          n, tokens = int(grid.prod()), int(POLICY.tokens(np.array([height]), np.array([width]))[0])
          offset = int(batch["image_token_offsets"][row, k])
          assert offset == column + at and batch["image_grid"][row, k].tolist() == grid.tolist()
          run = batch["tokens"][row, offset : offset + tokens]
          image_token = int(run[0]) if image_token is None else image_token
          assert (run == image_token).all() and not batch["loss_mask"][row, offset : offset + tokens].any()
          slots = np.flatnonzero(batch["patch_image_ids"][row] == k + 1)
          assert slots.size == n and (np.diff(slots) == 1).all()
          assert np.array_equal(batch["patches"][row, slots], decoded_patches(blob, "x", POLICY))
          assert (batch["patch_segment_ids"][row, slots] == batch["segment_ids"][row, column]).all()
          assert np.array_equal(batch["patch_positions"][row, slots], merged_positions(grid[None], 2))
          checked += 1
      assert batch["num_images"].tolist() == seen.tolist()
      used = batch["patch_image_ids"] > 0
      assert (
        not batch["patches"][~used].any()
        and (batch["image_token_offsets"][batch["image_token_offsets"] < 0] == -1).all()
      )
  assert checked >= 20


def _rope_reference(tokens: np.ndarray, segment_ids: np.ndarray, runs: list[tuple[int, int, int]]) -> np.ndarray:
  """Qwen2-VL's `get_rope_index` read plainly, one segment at a time: text counts on; an image's tokens are
  its start plus (0, h, w) of its merged grid; the text after it resumes at the largest position plus one."""
  out = np.zeros((3, tokens.size), np.int64)
  by_start = {at: (lh, lw) for at, lh, lw in runs}
  c = 0
  while c < tokens.size:
    if segment_ids[c] == 0:
      c += 1
      continue
    segment, position = segment_ids[c], 0
    while c < tokens.size and segment_ids[c] == segment:
      if c in by_start:
        lh, lw = by_start[c]
        for i in range(lh * lw):
          out[:, c + i] = (position, position + i // lw, position + i % lw)
        position, c = int(out[:, c : c + lh * lw].max()) + 1, c + lh * lw
      else:
        out[:, c] = position
        position, c = position + 1, c + 1
  return out


def test_rope_positions_are_qwen2_vls_per_segment(vision_data):
  cfg = vision_config(vision_data)
  with Pipeline(cfg, prefetch=0) as pipe:
    checked = 0
    for batch in pipe:
      batch = {k: np.asarray(v) for k, v in batch.items()}
      for row in range(batch["tokens"].shape[0]):
        k = int(batch["num_images"][row])
        runs = [
          (int(batch["image_token_offsets"][row, j]), int(g[1]) // 2, int(g[2]) // 2)
          for j, g in enumerate(batch["image_grid"][row, :k])
        ]
        expected = _rope_reference(batch["tokens"][row], batch["segment_ids"][row], runs)
        assert batch["rope_positions"][row].tolist() == expected.tolist()
        checked += k
  assert checked >= 20


def test_a_jitted_step_compiles_once_for_the_whole_pass(vision_data):
  traced = []

  @jax.jit
  def step(batch):
    traced.append(1)
    return sum(jax.numpy.sum(v.astype(jax.numpy.float32)) for v in batch.values())

  with Pipeline(vision_config(vision_data), prefetch=2) as pipe:
    steps = [float(step(dict(batch))) for batch in pipe]
  assert len(steps) >= 4 and len(traced) == 1


def _run(cfg: PipelineConfig, steps: int, **kwargs) -> tuple[list, list]:
  states, batches = [], []
  with Pipeline(cfg, **kwargs) as pipe:
    for _ in range(steps):
      states.append(json.loads(json.dumps(pipe.get_state())))
      batches.append({k: np.asarray(v).tobytes() for k, v in next(pipe).items()})
  return states, batches


def test_state_at_every_step_restores_to_the_same_remaining_output_in_every_making(vision_data):
  cfg = vision_config(vision_data, exhausted_policy="repeat")
  steps = 7
  states, batches = _run(cfg, steps, prefetch=0)
  for at in range(steps):
    making = [StepMaking("here"), StepMaking("process"), StepMaking("process", reader_processes=2)][at % 3]
    with Pipeline(cfg, prefetch=2, making=making) as fresh:
      fresh.set_state(states[at])
      rest = [{k: np.asarray(v).tobytes() for k, v in next(fresh).items()} for _ in range(steps - at)]
    assert rest == batches[at:], f"restored at step {at} ({making})"


@pytest.mark.parametrize(
  ("changes", "message"),
  [
    (
      {"packing": {"images": {"max_patches": P, "max_images": K, "too_large": "error"}}},
      "example.? over a row's budgets",
    ),
    (
      {"packing": {"images": {"max_patches": P, "max_images": K, "policy": {"policy": "fixed"}}}},
      "dataset vl: its images were converted with",
    ),
    (
      {"packing": {"mode": "concat", "images": {"max_patches": P, "max_images": K}}},
      "packing.mode: concat cuts examples",
    ),
    ({"packing": {"add_eos": True, "images": {"max_patches": P, "max_images": K}}}, "packing.add_eos"),
    (
      {"packing": {"long_docs": "truncate", "images": {"max_patches": P, "max_images": K}}},
      "packing.long_docs: truncate would cut an example's images",
    ),
    (
      {"packing": {"pairs": {}, "images": {"max_patches": P, "max_images": K}}},
      "packing.images: image-text examples and preference pairs are packed apart",
    ),
    (
      {"datasets": [{"name": "txt", "path": "TXT"}], "mixture": {"weights": {"txt": 1.0}}},
      "packing.images: no dataset holds images, and packing.images.policy is not given",
    ),
    ({"packing": {"images": {"max_patches": 0, "max_images": K}}}, "packing.images.max_patches"),
    (
      {"packing": {"seq_len": 16, "images": {"max_patches": P, "max_images": K}}},
      "datasets.vl: every example exceeds a row's budgets",
    ),
    (
      {"packing": {"linear_warmup": {"start": 64, "steps": 4}, "images": {"max_patches": P, "max_images": K}}},
      "packing.linear_warmup",
    ),
    (
      {"packing": {"images": {"max_patches": P, "max_images": K, "policy": {"policy": "huge"}}}},
      "packing.images.policy",
    ),
  ],
)
def test_bad_image_packing_is_named(vision_data, changes, message):
  if "datasets" in changes:  # the text set alone
    changes = {**changes, "datasets": [{"name": "txt", "path": vision_data["txt"]}]}
  with pytest.raises(ConfigError, match=message):  # at open, or at the first step planned
    with Pipeline(vision_config(vision_data, **changes), prefetch=0) as pipe:
      next(pipe)


def _copy_with(data: dict, tmp_path, change) -> dict:
  """A copy of the image set whose first shard's files `change(copy, manifest)` alters."""
  import shutil  # noqa: PLC0415

  copy = tmp_path / "vl"
  shutil.copytree(data["vl"], copy)
  change(copy, json.loads((copy / "manifest.json").read_text()))
  return {**data, "vl": str(copy)}


def test_a_stale_patch_column_is_named_when_its_example_is_read(vision_data, tmp_path):
  def fewer_patches(copy, manifest):
    column = copy / manifest["shards"][0]["columns"]["num_patches"]
    values = np.load(column)
    values[values > 0] -= 1
    np.save(column, values)

  data = _copy_with(vision_data, tmp_path, fewer_patches)
  with Pipeline(vision_config(data), prefetch=0) as pipe:
    with pytest.raises(
      DatasetError, match=r"record \d+ of dataset 0: holds \d+ images of \d+ patches, its columns say"
    ):
      list(pipe)


def test_a_damaged_image_is_named_by_its_record_and_index_when_read(vision_data):
  cfg = vision_config(vision_data)
  with Pipeline(cfg, prefetch=0) as pipe:
    images, layout = pipe.cfg.packing.images, pipe.cfg.layout  # the policy resolved from the dataset
  with TokenDataset(vision_data["vl"]) as dataset:
    record = int(np.flatnonzero(np.asarray(dataset.columns["num_images"]) == 2)[0])
    stored = dataset.read_images(*dataset.locate(np.array([record])))[0]
  damaged = [stored[0], (stored[1][0][:50] + bytes(200), *stored[1][1:])]  # image 1 cut short
  pieces = Pieces(*(np.array([v]) for v in (0, 0, record, 0, 60, 60)))
  batch = {f.name: np.zeros(f.shape(1, S), f.numpy_dtype) for f in layout.features}
  batch["segment_ids"][0, :60] = 1
  with pytest.raises(
    InputFormatError, match=f"record {record} of dataset 0, image 1: (a damaged|not a readable) image"
  ):
    assemble_images(batch, pieces, np.array([0]), np.array([0]), [damaged], packing=images)


def test_a_gemma3_image_goes_to_the_device_as_uint8_patches_of_2_41_mb():
  from jaxdata.config.image_packing import ImagePacking, image_features  # noqa: PLC0415
  from jaxdata.vision import FixedSize  # noqa: PLC0415

  policy = FixedSize()  # Gemma 3: 896², patches of 14
  patches = int(policy.patches(np.array([896]), np.array([896]))[0])
  spec = next(f for f in image_features(ImagePacking(patches, 1, policy=policy)) if f.name == "patches")
  assert spec.numpy_dtype == np.uint8 and spec.nbytes(1, 2048) == 4096 * 588 == 2_408_448  # float32: 9.6 MB


def test_each_steps_stats_count_its_images_and_patch_fill_as_the_batch_holds_them(vision_data, tmp_path):
  stats = tmp_path / "stats.jsonl"
  with Pipeline(vision_config(vision_data), prefetch=0, stats_path=str(stats)) as pipe:
    batches = [{k: np.asarray(v) for k, v in b.items()} for b in pipe]
  records = [json.loads(line) for line in stats.read_text().splitlines()]
  assert len(records) == len(batches) >= 4
  for record, batch in zip(records, batches):
    assert record["images_per_source"] == {"vl": int(batch["num_images"].sum()), "txt": 0}
    assert record["patch_fill"] == pytest.approx(float(np.mean(batch["patch_image_ids"] > 0)))
  assert sum(r["dropped_documents"] for r in records) >= 5  # the examples over a budget, counted


def test_a_policy_may_be_named_with_its_defaults():
  from jaxdata.config.image_packing import ImagePacking  # noqa: PLC0415

  assert ImagePacking(8, 1, policy="native").policy == NativeResolution()
  assert ImagePacking(8, 1, policy={"policy": "native", "max_pixels": 448 * 448}).policy == NativeResolution(
    max_pixels=448 * 448
  )


def test_planning_never_decodes_an_image(vision_data, monkeypatch):
  """The planner works from the num_images / num_patches columns alone: with every decoder call failing, a
  whole pass still plans, and only making its batches decodes."""
  import jaxdata.vision.decode as decode  # noqa: PLC0415 -- the module whose decoders are made to fail

  def refuse(*args, **kwargs):
    raise AssertionError("an image was decoded")

  for name in ("decoded_patches", "decode_image", "image_size"):
    monkeypatch.setattr(decode, name, refuse)
  plans = list(StepPlanner(vision_config(vision_data)).plans())
  assert len(plans) >= 4 and sum(int(p.images.per_dataset.sum()) for p in plans) >= 20
  with Pipeline(vision_config(vision_data), prefetch=0) as pipe, pytest.raises(AssertionError, match="decoded"):
    next(pipe)
