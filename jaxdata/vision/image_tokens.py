"""How images appear in a model's text (`ImageTokens`), for the models whose processors jaxdata follows::

    name      template writes per image                       processor replaces   with
    qwen-vl   <|vision_start|><|image_pad|><|vision_end|>     <|image_pad|>        <|image_pad|> x n
    gemma3    <start_of_image>                                <start_of_image>     \\n\\n<start_of_image> <image_soft_token> x n <end_of_image>\\n\\n
    llava     <image>                                         <image>              <image> x n

>>> IMAGE_TOKENS["qwen-vl"].expansion(2)
'<|image_pad|><|image_pad|>'
"""

from __future__ import annotations

import dataclasses

__all__ = ["IMAGE_TOKENS", "ImageTokens"]


@dataclasses.dataclass(frozen=True)
class ImageTokens:
  """How images appear in a model's text: what its template writes per image (`in_text`), the part of it the
  processor replaces (`placeholder`), and the replacement: `before`, `image_token` once per image token, `after`."""

  in_text: str
  placeholder: str
  image_token: str
  before: str = ""
  after: str = ""

  def expansion(self, tokens: int) -> str:
    return self.before + self.image_token * tokens + self.after


QWEN_VL = ImageTokens("<|vision_start|><|image_pad|><|vision_end|>", "<|image_pad|>", "<|image_pad|>")
GEMMA3 = ImageTokens(
  "<start_of_image>", "<start_of_image>", "<image_soft_token>", "\n\n<start_of_image>", "<end_of_image>\n\n"
)
LLAVA = ImageTokens("<image>", "<image>", "<image>")
IMAGE_TOKENS = {"qwen-vl": QWEN_VL, "gemma3": GEMMA3, "llava": LLAVA}
