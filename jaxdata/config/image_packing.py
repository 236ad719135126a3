"""`packing.images`: image-text examples packed whole into rows of three budgets, and what a step of them holds.

A row holds at most `seq_len` tokens (image tokens included), `max_patches` patches and `max_images`
images. The image policy (the processor's resize and patch size) is the datasets' own, recorded when they
were converted; a pipeline resolves it when it opens them (`ImagePacking.policy`), and a step's layout
follows from it::

    tokens, targets, segment_ids, positions, loss_mask, source_ids     int32 [B, S]
    rope_positions                                                     int32 [B, 3, S]   (native policy: t, h, w)
    patches                                                            uint8 [B, P, 3 p p]
    patch_segment_ids, patch_image_ids                                 int32 [B, P]
    patch_positions                                                    int32 [B, P, 3]   (t, h, w in its image)
    image_token_offsets                                                int32 [B, K]      (-1: no image)
    image_grid                                                         int32 [B, K, 3]
    num_images                                                         int32 [B]

>>> from jaxdata.vision.policies import FixedSize
>>> images = ImagePacking(max_patches=8192, max_images=2, policy=FixedSize())
>>> [(f.name, f.shape(4, 2048)) for f in image_features(images)][:2]
[('patches', (4, 8192, 588)), ('patch_segment_ids', (4, 8192))]
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from jaxdata.config.layout import FeatureSpec
from jaxdata.config.schema import TOO_LONG_PAIRS, TooLongPairs
from jaxdata.config.validate import check_choice, check_int, short
from jaxdata.errors import ConfigError
from jaxdata.vision.policies import FixedSize, NativeResolution, image_policy

__all__ = ["ImagePacking", "image_features"]

MAX_IMAGES_PER_ROW = 1 << 12
MAX_PATCHES_PER_ROW = 1 << 22


@dataclasses.dataclass(frozen=True)
class ImagePacking:
  """Image-text examples packed whole (docs/vision.md): at most `max_patches` patches and `max_images`
  images a row, besides its `seq_len` tokens. `too_large`: an example over a budget on its own is left out
  and counted (`drop`), or the pipeline refuses to open, naming it (`error`). `policy`: the datasets'
  image policy (None: the one their manifests record, resolved when a pipeline opens them; given, it
  must equal theirs; a name, `native` or `fixed`, is that policy with its defaults)."""

  max_patches: int
  max_images: int
  too_large: TooLongPairs = "drop"
  policy: FixedSize | NativeResolution | None = None

  def __post_init__(self) -> None:
    check_int(self.max_patches, "packing.images.max_patches", 1, MAX_PATCHES_PER_ROW)
    check_int(self.max_images, "packing.images.max_images", 1, MAX_IMAGES_PER_ROW)
    check_choice(self.too_large, TOO_LONG_PAIRS, "packing.images.too_large")
    if isinstance(self.policy, str):  # a policy's name with its defaults, as --image-policy takes it
      object.__setattr__(self, "policy", {"policy": self.policy})
    if isinstance(self.policy, Mapping):
      try:
        object.__setattr__(self, "policy", image_policy(self.policy))
      except (TypeError, ValueError) as error:
        raise ConfigError(f"packing.images.policy: {error}") from error
    elif self.policy is not None and not isinstance(self.policy, (FixedSize, NativeResolution)):
      raise ConfigError(
        f"packing.images.policy: an image policy mapping ({{policy: native, ...}}), got {short(self.policy)}"
      )

  @property
  def resolved(self) -> FixedSize | NativeResolution:
    """The policy, once a pipeline has resolved it from the datasets."""
    if self.policy is None:
      raise ConfigError(
        "packing.images.policy: not given, and no dataset has been opened to take it from (a pipeline resolves "
        "it from the datasets' manifests when it opens them)"
      )
    return self.policy


def image_features(images: ImagePacking) -> tuple[FeatureSpec, ...]:
  """What a step of image-text rows holds beyond the per-token features (module docstring)."""
  policy = images.resolved
  patch, k = images.max_patches, images.max_images
  rope = (FeatureSpec("rope_positions", extent=(3, 0)),) if isinstance(policy, NativeResolution) else ()
  return (
    *rope,
    FeatureSpec("patches", "uint8", (patch, 3 * policy.patch * policy.patch)),
    FeatureSpec("patch_segment_ids", extent=(patch,)),
    FeatureSpec("patch_image_ids", extent=(patch,)),
    FeatureSpec("patch_positions", extent=(patch, 3)),
    FeatureSpec("image_token_offsets", extent=(k,), fill=-1),
    FeatureSpec("image_grid", extent=(k, 3)),
    FeatureSpec("num_images", scalar=True),
  )
