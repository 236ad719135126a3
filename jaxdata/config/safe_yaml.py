"""PyYAML's safe loader with the limits `load_config` documents.

Its own module so that `import jaxdata.config` (and every `Pipeline`) does
not import PyYAML: `load_config` imports this on its first call.

>>> parse_config_text("a: [1, 2]")
{'a': [1, 2]}
>>> parse_config_text("a: 1\\na: 2")
Traceback (most recent call last):
...
jaxdata.errors.ConfigError: line 2: key 'a' is given twice in one mapping
"""

from __future__ import annotations

from typing import Any

import yaml

from jaxdata.config.validate import short
from jaxdata.errors import ConfigError

__all__ = ["parse_config_text"]

MAX_ALIASES = 64


class _ConfigLoader(yaml.SafeLoader):
  """The safe loader, with the limits above."""

  def __init__(self, stream: str) -> None:
    super().__init__(stream)
    self.aliases = 0

  def compose_node(self, parent: Any, index: Any) -> Any:
    if self.check_event(yaml.AliasEvent):
      self.aliases += 1
      if self.aliases > MAX_ALIASES:
        mark = self.peek_event().start_mark
        raise ConfigError(
          f"line {mark.line + 1}: more than {MAX_ALIASES} YAML aliases (*name); "
          "a config needs few, and many can expand without bound"
        )
    return super().compose_node(parent, index)

  def construct_mapping(self, node: Any, deep: bool = False) -> dict[Any, Any]:
    seen = set()
    for key_node, _ in node.value:
      key = self.construct_object(key_node, deep=True)
      if isinstance(key, (str, int, float, bool)) or key is None:
        if key in seen:
          raise ConfigError(f"line {key_node.start_mark.line + 1}: key {short(key)} is given twice in one mapping")
        seen.add(key)
    return super().construct_mapping(node, deep=deep)


_ConfigLoader.add_constructor("tag:yaml.org,2002:timestamp", yaml.SafeLoader.construct_yaml_str)


def _not_a_config_value(loader: _ConfigLoader, node: Any) -> None:
  raise ConfigError(
    f"line {node.start_mark.line + 1}: {node.tag.rsplit(':', 1)[-1]} values (!!{node.tag.rsplit(':', 1)[-1]}) "
    "are not config values; write a list or a mapping"
  )


for _tag in ("set", "binary", "omap", "pairs"):  # YAML types a JSON-shaped config has no use for
  _ConfigLoader.add_constructor(f"tag:yaml.org,2002:{_tag}", _not_a_config_value)


def parse_config_text(text: str) -> Any:
  """The YAML document in `text`, parsed with the limits above.

  Raises:
    ConfigError: not YAML (with PyYAML's message), an alias or key limit, a
      non-JSON type; the caller adds the file's name.
    RecursionError: nested too deeply.
  """
  try:
    return yaml.load(text, Loader=_ConfigLoader)  # noqa: S506 -- a SafeLoader subclass
  except yaml.YAMLError as e:
    raise ConfigError(f"not valid YAML ({str(e)[:500]})") from e
