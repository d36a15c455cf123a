"""The AdCP RFC 9421 signer: adds ``Content-Digest`` (RFC 9530), ``Signature-Input``
and ``Signature`` to a request so that :func:`~warden.adcp.rfc9421.verify.verify_request`
(and any conformant verifier) accepts it.

Covered components default to the webhook set, which is also a complete request set:
``@method @target-uri @authority content-type content-digest``. The label is ``sig1``;
sig-params are written in the vectors' order (``created``, ``expires``, ``nonce``,
``keyid``, ``alg``, ``tag``). ``legacy_binary`` writes the signature as unpadded
Base64URL (AdCP 3.1 requests, webhook-v1) instead of RFC 8941 ``sf-binary``.
"""

from __future__ import annotations

import base64
import secrets
from collections.abc import Sequence
from typing import Any

import http_sf

from warden.adcp.rfc9421.fields import serialize_member
from warden.adcp.rfc9421.keys import PrivateKey, sign
from warden.adcp.rfc9421.target import canonicalize
from warden.adcp.rfc9421.verify import LABEL, HttpRequest, content_digest, signature_base

DEFAULT_COVERED = ("@method", "@target-uri", "@authority", "content-type", "content-digest")
DEFAULT_TTL_S = 300


def new_nonce() -> str:
    """128 random bits, unpadded Base64URL (22 characters)."""
    return base64.urlsafe_b64encode(secrets.token_bytes(16)).rstrip(b"=").decode("ascii")


def sign_request(
    req: HttpRequest,
    key: PrivateKey,
    keyid: str,
    *,
    alg: str,
    tag: str,
    created: int,
    expires: int | None = None,
    nonce: str | None = None,
    covered: Sequence[str] = DEFAULT_COVERED,
    legacy_binary: bool = False,
) -> HttpRequest:
    """``req`` with ``Content-Digest`` (when covered and absent), ``Signature-Input``
    and ``Signature`` appended. ``expires`` defaults to ``created + 300``; ``nonce``
    to :func:`new_nonce`. The URL is canonicalized as a signer does (a Unicode host
    becomes its A-label). Raises ``ValueError`` for an unsigned-able request (a
    :class:`~warden.adcp.rfc9421.target.TargetUriMalformed` URL, a key/alg mismatch)."""
    headers = list(req.headers)
    if "content-digest" in covered and not req.field_lines("content-digest"):
        headers.append(("Content-Digest", content_digest(req.body)))
    with_digest = HttpRequest(req.method, req.url, tuple(headers), req.body)
    target = canonicalize(req.url, allow_unicode_host=True)
    params = {
        "created": int(created),
        "expires": int(expires if expires is not None else created + DEFAULT_TTL_S),
        "nonce": nonce if nonce is not None else new_nonce(),
        "keyid": keyid,
        "alg": alg,
        "tag": tag,
    }
    member: tuple[list[tuple[str, dict[str, Any]]], dict[str, Any]] = (
        [(c, {}) for c in covered],
        params,
    )
    params_text = serialize_member(member)
    base = signature_base(with_digest, target, covered, params_text)
    raw = sign(key, alg, base.encode("utf-8"))
    if legacy_binary:
        value = ":" + base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii") + ":"
        sig_field = f"{LABEL}={value}"
    else:
        sig_field = http_sf.ser({LABEL: (raw, {})})
    headers += [("Signature-Input", f"{LABEL}={params_text}"), ("Signature", sig_field)]
    return HttpRequest(req.method, req.url, tuple(headers), req.body)
