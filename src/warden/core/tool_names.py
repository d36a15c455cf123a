"""Tool-name matching: caseless by default, exact case on request.

A tool's name is whatever the agent or MCP server spells (``DELETE_FILE``,
``Delete_File``); a bundle pattern names a tool, not a spelling. Names and patterns
are compared in their *folded* form, Unicode NFKC then full case folding
(``str.casefold``), the caseless-matching recipe of Unicode §3.13 without the
canonical-decomposition refinements. Folding only ever maps names together, so a
deny or ask rule can match more calls than its spelling says, never fewer: the
fail-closed direction (docs/decisions.md 165).
"""

from __future__ import annotations

import fnmatch
import functools
import unicodedata
from collections.abc import Iterable


@functools.lru_cache(maxsize=4096)
def fold(name: str) -> str:
    """``name`` as tool patterns compare it: NFKC-normalised, then case-folded
    (``DELETE_FILE`` → ``delete_file``, ``ＤＥＬＥＴＥ`` → ``delete``, ``Straße`` →
    ``strasse``). Cached: tool names repeat."""
    return unicodedata.normalize("NFKC", name).casefold()


def fold_patterns(patterns: Iterable[str]) -> tuple[str, ...]:
    """Glob patterns in folded form (``*[Dd]elete*`` → ``*[dd]elete*``): folding the
    pattern and the name alike keeps character classes and ranges meaningful."""
    return tuple(fold(p) for p in patterns)


def matches_any(name: str, patterns: tuple[str, ...], *, case_sensitive: bool) -> bool:
    """Whether ``name`` matches one of the fnmatch globs ``patterns``.

    ``patterns`` must already be folded unless ``case_sensitive`` (see
    :func:`fold_patterns`); an empty name matches nothing.
    """
    if not name:
        return False
    subject = name if case_sensitive else fold(name)
    return any(fnmatch.fnmatchcase(subject, p) for p in patterns)
