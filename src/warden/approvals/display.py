"""Showing agent-controlled text to a human approver without letting it lie.

Tool names, arguments, agent ids and reasons come from the agent. Printed raw, a
control character can rewrite an approver's terminal (ANSI escapes, carriage
returns) and a bidirectional override can reverse what a page shows
(``/tmp/safe\\u202eetc/passwd`` reads as ``/tmp/safedwssap/cte``). :func:`visible`
replaces every such character with its ``\\uXXXX`` escape, so what the approver reads
is what the agent sent.
"""

from __future__ import annotations

import re

# C0 and C1 controls, DEL; bidi embeddings, overrides, isolates and marks; zero-width
# characters and the BOM; line and paragraph separators.
_HIDDEN = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]")


def visible(text: str) -> str:
    """``text`` with control, bidi and zero-width characters written as ``\\uXXXX``."""
    return _HIDDEN.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


class Layout(str):
    """Text whose line breaks are Warden's own layout (pretty-printed JSON, where every
    line break inside a value is already escaped by the JSON encoder): :func:`shown`
    keeps its ``\n`` and escapes every other hidden character."""


_HIDDEN_BUT_NEWLINE = re.compile(
    "[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]"
)


def shown(text: str) -> str:
    """:func:`visible` for any text; a :class:`Layout` keeps its line breaks."""
    if isinstance(text, Layout):
        return _HIDDEN_BUT_NEWLINE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
    return visible(text)
