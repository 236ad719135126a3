"""Images in the rows: how an image becomes tokens and patches (the first step of image-text data).

Its modules::

    policies.py   image policies: the processor's resize, patch grid and token count from an image's size
                  alone (FixedSize: Gemma 3, SigLIP, LLaVA; NativeResolution: Qwen2-VL, 2.5-VL, 3-VL)
    image_tokens.py  how images appear in a model's text: the template's placeholder, the processor's run
    decode.py     image bytes to upright RGB pixels and patches, each awkward kind (alpha, CMYK, 16-bit,
                  EXIF, animated, bombs, corrupt bytes) with a stated behaviour
    device.py     on the device: uint8 patches normalised with the processor's mean and std, Qwen's layout

Pillow is imported only by `decode` (the `vision` extra), jax only by `device`.
"""

from jaxdata._lazy import lazy_exports

__all__ = [
  "FixedSize",
  "NativeResolution",
  "decode_image",
  "decoded_patches",
  "image_patches",
  "image_policy",
  "image_size",
  "normalize_patches",
  "temporal_patches",
]

__getattr__, __dir__ = lazy_exports(
  __name__,
  {
    "FixedSize": "jaxdata.vision.policies",
    "NativeResolution": "jaxdata.vision.policies",
    "image_policy": "jaxdata.vision.policies",
    "decode_image": "jaxdata.vision.decode",
    "decoded_patches": "jaxdata.vision.decode",
    "image_patches": "jaxdata.vision.decode",
    "image_size": "jaxdata.vision.decode",
    "normalize_patches": "jaxdata.vision.device",
    "temporal_patches": "jaxdata.vision.device",
  },
  package_globals=globals(),
)
