"""RFC 8785 (JCS) bytes of an object assembled from its members' canonical bytes.

A JCS object is ``{`` + its members, sorted by the UTF-16 code units of their names,
each written ``name:value`` with the name and value in canonical form, joined by ``,``
+ ``}`` (RFC 8785 §3.2.3). So an object's canonical bytes with or without one member
can be assembled from the members' bytes computed once: the ACS request's signing
input (the envelope without ``params.signature``), its ``request_hash`` input (the
params with the signature) and its JCS domain check share one canonicalization of the
params' members (issue 16).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from warden.crypto.canonical import canonical_bytes


def members(obj: Mapping[str, Any], *, known_fast: bool = False) -> dict[str, bytes]:
    """``{name: canonical bytes of the value}`` for every member of ``obj``
    (``known_fast`` as in :func:`~warden.crypto.canonical.canonical_bytes`).

    Raises :class:`~warden.errors.InvalidRequest` (``jcs_domain``) for a value outside
    the JCS domain, as :func:`~warden.crypto.canonical.canonical_bytes` does.
    """
    return {name: canonical_bytes(v, known_fast=known_fast) for name, v in obj.items()}


def joined(parts: Mapping[str, bytes], *, without: str | None = None) -> bytes:
    """The canonical bytes of the object whose members' canonical bytes are ``parts``
    (less the member named ``without``). Names sort by UTF-16 code units (RFC 8785
    §3.2.3); each name is written as a canonical JSON string."""
    names = sorted((n for n in parts if n != without), key=_utf16)
    return b"{" + b",".join(canonical_bytes(n) + b":" + parts[n] for n in names) + b"}"


def _utf16(name: str) -> bytes:
    return name.encode("utf-16-be", "surrogatepass")
