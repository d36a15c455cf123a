"""The one media type Warden's JSON bodies are read as (decisions 831, 993), and the
one rule for a query string: a parameter the route does not take (decision 1180) or a
single-valued one given twice (decision 1035) is refused."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from urllib.parse import parse_qsl


def json_media_problem(content_type: str | None) -> str | None:
    """Why a body sent with ``content_type`` (the ``Content-Type`` header, or None) is not
    read as JSON, or None when it is ``application/json`` (parameters such as ``charset``
    allowed, case ignored; a ``charset`` must be UTF-8): the words ``/v1`` refuses it with
    (400)."""
    media, _, params = (content_type or "").partition(";")
    media = media.strip().lower()
    if media == "application/json":
        # The body is read as UTF-8 (RFC 8259 §8.1): a charset naming anything else is
        # refused rather than ignored.
        for param in params.split(";"):
            name, _, value = param.partition("=")
            charset = value.strip().strip('"').lower()
            if name.strip().lower() == "charset" and charset not in ("utf-8", "utf8"):
                return f"the body must be UTF-8 JSON, not charset {charset or '(empty)'}"
        return None
    shown = f"Content-Type {media}" if media else "no Content-Type"
    return f"the body must be sent as Content-Type: application/json, not {shown}"


def query_pairs(query_string: bytes) -> list[tuple[str, str]]:
    """A raw query string's ``(name, value)`` pairs, in order, as Starlette's
    ``QueryParams`` reads them (blank values kept)."""
    return parse_qsl(query_string.decode("latin-1"), keep_blank_values=True)


def repeated_params(pairs: Iterable[tuple[str, str]], single: Iterable[str]) -> list[str]:
    """The names in ``single`` (parameters that take one value) given more than once in
    ``pairs`` (a query string's ``(name, value)`` pairs, in order), sorted: Warden refuses
    them rather than silently keeping one (``?principal=a&principal=b``, decision 1035)."""
    wanted = set(single)
    seen: set[str] = set()
    twice: set[str] = set()
    for name, _ in pairs:
        if name in wanted:
            (twice if name in seen else seen).add(name)
    return sorted(twice)


def repeated_params_problem(pairs: Iterable[tuple[str, str]], single: Iterable[str]) -> str | None:
    """Why a query string with a single-valued parameter given twice is refused (the
    words every wire uses), or None."""
    twice = repeated_params(pairs, single)
    if not twice:
        return None
    if len(twice) == 1:
        return f"the query parameter {twice[0]} is given more than once; give it once"
    names = ", ".join(twice)
    return f"the query parameters {names} are each given more than once; give each once"


def unknown_params(pairs: Iterable[tuple[str, str]], declared: Collection[str]) -> list[str]:
    """The names in ``pairs`` (a query string's ``(name, value)`` pairs) that are not in
    ``declared`` (the parameters the route takes), each once, sorted: Warden refuses them
    rather than silently ignoring a filter it does not know (``?State=approved``,
    decision 1180)."""
    return sorted({name for name, _ in pairs if name not in declared})


def _shown(name: str) -> str:
    """A parameter name as a one-line message shows it (it is the caller's text)."""
    if not name:
        return "'' (an empty name)"
    if name.isprintable() and len(name) <= 64 and not any(c in name for c in " ,;"):
        return name
    return repr(name[:64]) + ("…" if len(name) > 64 else "")


def query_params_problem(
    pairs: Iterable[tuple[str, str]], declared: Collection[str], single: Iterable[str]
) -> str | None:
    """Why a query string is refused, or None: a parameter not in ``declared`` (naming it
    and the ones the route takes), else a parameter of ``single`` given more than once
    (:func:`repeated_params_problem`). The words every wire uses."""
    pairs = list(pairs)
    if unknown := unknown_params(pairs, declared):
        takes = (
            "this route takes: " + ", ".join(sorted(declared))
            if declared
            else "this route takes no query parameters"
        )
        if len(unknown) == 1:
            return f"unknown query parameter {_shown(unknown[0])}; {takes}"
        shown = ", ".join(_shown(name) for name in unknown[:5])
        more = f" (and {len(unknown) - 5} more)" if len(unknown) > 5 else ""
        return f"unknown query parameters {shown}{more}; {takes}"
    return repeated_params_problem(pairs, single)
