"""The one YAML loader for Warden's configuration files (bundles, budgets, webhooks).

``yaml.SafeLoader`` keeps the last of two equal mapping keys silently: a second
``effect:`` in a rule or a second ``url:`` in a webhook would quietly win.
:class:`UniqueKeyLoader` refuses the repeat instead (``ConstructorError`` naming the
key and its line). :func:`load` is how Warden reads such a file.
"""

from __future__ import annotations

from typing import Any

import yaml


class UniqueKeyLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses a repeated mapping key."""


def _construct_unique_mapping(loader: UniqueKeyLoader, node: yaml.MappingNode) -> Any:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        try:
            duplicate = key in seen
        except TypeError:  # unhashable key: construct_mapping reports it
            continue
        if duplicate:
            raise yaml.constructor.ConstructorError(
                "while constructing a mapping",
                node.start_mark,
                f"found duplicate key {key!r}",
                key_node.start_mark,
            )
        seen.add(key)
    return loader.construct_mapping(node, deep=True)


UniqueKeyLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_unique_mapping
)

#: The same loader over libyaml's C parser, where PyYAML was built with it (its wheels
#: are): about ten times faster. The shipped bundle's pure-Python parse was three
#: quarters of a server's start (decision 308).
_FastUniqueKeyLoader: Any = None
if hasattr(yaml, "CSafeLoader"):
    _FastUniqueKeyLoader = type("_FastUniqueKeyLoader", (yaml.CSafeLoader,), {})
    _FastUniqueKeyLoader.add_constructor(
        yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_unique_mapping
    )


def load(text: str) -> Any:
    """The YAML document in ``text`` (one document; safe tags only), refusing a repeated
    mapping key. Raises ``yaml.YAMLError`` worded by the pure-Python parser, which quotes
    the offending line with a caret: a document libyaml refuses is parsed again by it, so
    what a user reads does not depend on how PyYAML was built."""
    if _FastUniqueKeyLoader is not None:
        try:
            return yaml.load(text, Loader=_FastUniqueKeyLoader)
        except yaml.YAMLError:
            pass
    return yaml.load(text, Loader=UniqueKeyLoader)
