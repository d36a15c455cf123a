"""What the AdCP wire reads of a request to say who sent it: the URL a signer addressed
and the body read leniently (for the verifier's task and arguments), and the
``WWW-Authenticate`` of a 401. Who the caller is — an RFC 9421 signature or a Warden API
key — is decided below the wire (:mod:`warden.adcp.callers`)."""

from __future__ import annotations

import json
from typing import Any

from warden.adcp.callers import authenticate, identify, identify_caller

__all__ = [
    "authenticate",
    "identify",
    "identify_caller",
    "lenient_json",
    "request_url",
    "www_authenticate",
]


def request_url(public_url: str, raw_path: bytes, query: bytes) -> str:
    """The absolute URL a signer addressed: Warden's public base, then the request's
    path and query exactly as received."""
    path = raw_path.decode("latin-1")
    q = query.decode("latin-1")
    return public_url.rstrip("/") + path + ("?" + q if q else "")


def lenient_json(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        return None


def www_authenticate(code: str) -> str:
    """The ``WWW-Authenticate`` value of a 401 with ``code``."""
    if code.startswith("request_signature_"):
        return f'Signature error="{code}"'
    return 'Bearer realm="warden"'
