"""What each column of `jaxdata plan` and `jaxdata mesh` means, in plain words.

Printed under the tables (not with `--json`), wrapped to the terminal::

    what the columns mean:
      passes (run): processed / U_d over the whole run: how many times ...
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from typing import Any

__all__ = ["MESH_LEGEND", "PLAN_LEGEND", "SAMPLING_WINDOWS_LEGEND", "print_legend"]

PLAN_LEGEND = (
  ("unique U_d", "tokens in the dataset, each counted once."),
  ("natural", "U_d as a share of all datasets' tokens: the mixture that sampling in proportion to size would give."),
  ("sampling w_d", "the share of each step's tokens the mixture gives the dataset in that phase."),
  (
    "upsampling",
    "w_d / natural: above 1x the dataset is repeated faster than the others, below 1x it is "
    "seen less than its size alone would give.",
  ),
  ("processed", "tokens trained from the dataset in that phase."),
  (
    "passes (run)",
    "processed / U_d over the whole run: how many times each token is trained on average. "
    "Beyond a few passes repeated tokens help less and a small dataset can be memorised: "
    "lower its weight or cap it (stop_after_passes, max_repeats).",
  ),
  (
    "pass completes at step",
    "the steps at which a full pass over the dataset ends (the first six). A loss "
    "that drops right after them points at memorisation (jaxdata doctor checks it).",
  ),
)
SAMPLING_WINDOWS_LEGEND = (
  (
    "unique seen",
    "window datasets drawn with replacement: the expected share of the dataset's tokens that "
    "fall inside at least one window drawn; the rest is never trained on.",
  ),
)
MESH_LEGEND = (
  (
    "rows",
    "rows of each global batch this host assembles and hands to its chips (the global batch divided "
    "over the data-parallel hosts).",
  ),
  ("tokens / step", "rows x seq_len: the tokens this host reads and assembles each step."),
  (
    "documents read / step",
    "distinct documents this host reads per step (mean over --steps planned "
    "steps): its reading work. Every step waits for the busiest host, so max / mean "
    "should stay near 1 (a warning above 1.25); below 1 a host reads less than one "
    "document a step and the data may be too small for the slice.",
  ),
)


def print_legend(console: Any, entries: Sequence[tuple[str, str]]) -> None:
  """`column: meaning` lines, wrapped to the console's width with a hanging indent."""
  width = max(40, min(console.width, 100))
  console.print("what the columns mean:", markup=False)
  for column, meaning in entries:
    text = textwrap.fill(f"{column}: {meaning}", width=width, initial_indent="  ", subsequent_indent="    ")
    console.print(text, markup=False, soft_wrap=True)
