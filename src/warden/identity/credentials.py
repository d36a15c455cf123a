"""One credential per request (decision 840).

A request that carries two credentials — two ``Authorization`` header lines, or on the
AdCP wire ``Authorization`` beside ``x-adcp-auth`` (or two of those) — is refused as an
authentication failure before any key is read: which one would count depends on order
(Starlette's ``headers.get`` reads the first line, a mapping of the lines the last), and
a proxy in front of Warden that reads another one than Warden sees a different caller.
Each wire counts the carriers it accepts and answers in its own format
(``AUTH_INVALID`` on AdCP, ``401 auth:required`` on ``/v1``, the metrics endpoint's and
the desk login's own 401). An empty line carries nothing and is not counted; on AdCP one
key sent in both ``Authorization`` and ``x-adcp-auth`` is one credential (the AdCP SDK's
client sends every key so: :func:`warden.adcp.callers.one_key`).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Any


def header_lines(headers: Any) -> list[tuple[str, str]]:
    """``(lower-cased name, value)`` of every header line of ``headers``: a sequence of
    pairs, a Starlette ``Headers`` (its raw lines, repeats kept) or a plain mapping."""
    raw = getattr(headers, "raw", None)
    if isinstance(raw, list):
        return [(k.decode("latin-1").lower(), v.decode("latin-1")) for k, v in raw]
    pairs = headers.items() if isinstance(headers, Mapping) else headers
    return [(str(k).lower(), str(v)) for k, v in pairs]


def carried(lines: Iterable[tuple[str, str]], names: Collection[str]) -> list[str]:
    """The names of the non-empty lines among ``names`` (one entry per line)."""
    return [name for name, value in lines if name in names and value.strip()]


def more_than_one(found: list[str]) -> str | None:
    """The refusal's message when ``found`` (from :func:`carried`) names more than one
    credential, else None."""
    if len(found) < 2:
        return None
    counts = {name: found.count(name) for name in dict.fromkeys(found)}
    what = " and ".join(
        f"{n} {_spelled(name)} header{'s' if n > 1 else ''}" for name, n in counts.items()
    )
    return f"more than one credential was sent ({what}); send exactly one"


def cookies_named(lines: Iterable[tuple[str, str]], name: str) -> int:
    """How many cookies called ``name`` the ``cookie`` header lines carry (RFC 6265
    ``name=value`` pairs separated by ``;``, over every line): a session cookie sent
    twice is two credentials (decision 976)."""
    return sum(
        1
        for header, value in lines
        if header == "cookie"
        for pair in value.split(";")
        if pair.split("=", 1)[0].strip() == name
    )


def _spelled(name: str) -> str:
    return "Authorization" if name == "authorization" else name
