"""``@target-uri`` and ``@authority`` canonicalization of the AdCP RFC 9421 profile
(security.mdx "AdCP RFC 9421 profile"; every case of
``test-vectors/request-signing/canonicalization.json``).

Steps, in order: (1) lowercase the scheme; (2) lowercase the host — a bracketed IPv6
literal keeps its brackets (hex lowercased, no zone id), a name goes through UTS-46
non-transitional ToASCII when the signer allows Unicode; (3) drop userinfo, refuse an
empty host; (4) drop the scheme's default port (443, 80); (5) RFC 3986 §5.2.4
``remove_dot_segments`` on the still-encoded path (``%2F`` is no separator; ``//`` is
kept), an empty path becoming ``/``; (6) percent-escapes get uppercase hex and escaped
unreserved characters are decoded; (7) the query is kept byte for byte (``?`` with an
empty query included); (8) the fragment is dropped.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

import idna

DEFAULT_PORTS = {"https": "443", "http": "80"}
_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*)://([^/?#]*)([^?#]*)(\?[^#]*)?(#.*)?$", re.S)
_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
_PATH_KEEP = _UNRESERVED | frozenset("!$&'()*+,;=:@/%")
_HEX = frozenset("0123456789abcdefABCDEF")
_HOST_CHARS = re.compile(r"^[A-Za-z0-9\-._~!$&'()*+,;=%]+$")


class TargetUriMalformed(ValueError):
    """The URL cannot be canonicalized (``request_target_uri_malformed``); a verifier
    answers ``*_signature_header_malformed``. ``reason`` names the rule broken."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class Target:
    """A canonical request target: ``target_uri`` and ``authority`` as signed."""

    target_uri: str
    authority: str


def canonicalize(url: str, *, allow_unicode_host: bool = False) -> Target:
    """The canonical ``@target-uri`` and ``@authority`` of ``url``.

    ``allow_unicode_host``: a signer may be handed an IDN U-label and converts it
    (UTS-46); a verifier must not (a U-label on the wire is refused, negative vector
    026). Raises :class:`TargetUriMalformed`.
    """
    m = _URL.match(url)
    if m is None:
        raise TargetUriMalformed("not an absolute URL with an authority")
    scheme, authority, path, query, _fragment = m.groups()
    scheme = scheme.lower()
    host, port = _host_port(authority, allow_unicode_host)
    if port is not None and port == DEFAULT_PORTS.get(scheme):
        port = None
    canonical_authority = host if port is None else f"{host}:{port}"
    canonical_path = _normalize_escapes(_remove_dot_segments(path) or "/")
    return Target(
        f"{scheme}://{canonical_authority}{canonical_path}{query or ''}", canonical_authority
    )


def _host_port(authority: str, allow_unicode: bool) -> tuple[str, str | None]:
    if "@" in authority:
        authority = authority.rsplit("@", 1)[1]
    if not authority:
        raise TargetUriMalformed("empty authority")
    port: str | None
    if authority.startswith("["):
        end = authority.find("]")
        if end < 0:
            raise TargetUriMalformed("IPv6 literal missing closing bracket")
        literal, rest = authority[1:end], authority[end + 1 :]
        if "%" in literal:
            raise TargetUriMalformed("IPv6 zone identifier in signed URL")
        try:
            ipaddress.IPv6Address(literal)
        except ValueError:
            raise TargetUriMalformed("invalid IPv6 literal") from None
        host = f"[{literal.lower()}]"
        if rest and not rest.startswith(":"):
            raise TargetUriMalformed("junk after the IPv6 literal")
        port = rest[1:] if rest else None
    else:
        if authority.count(":") > 1:
            raise TargetUriMalformed("IPv6 literal not bracketed")
        name, sep, port_text = authority.partition(":")
        port = port_text if sep else None
        if not name:
            raise TargetUriMalformed("authority missing host")
        host = _name(name, allow_unicode)
    if port is not None:
        if port == "":
            port = None
        elif not port.isascii() or not port.isdigit():
            raise TargetUriMalformed("port is not a number")
        else:
            port = str(int(port))
    return host, port


def _name(name: str, allow_unicode: bool) -> str:
    if not name.isascii():
        if not allow_unicode:
            raise TargetUriMalformed("host is a Unicode U-label; send its A-label")
        try:
            return idna.encode(name, uts46=True, transitional=False).decode("ascii")
        except idna.IDNAError as exc:
            raise TargetUriMalformed(f"host is not a valid IDN: {exc}") from None
    if not _HOST_CHARS.match(name):
        raise TargetUriMalformed("host has characters a host cannot have")
    return name.lower()


def _remove_dot_segments(path: str) -> str:
    """RFC 3986 §5.2.4, on the encoded path (``%2E`` is not a dot here)."""
    inp = path
    out: list[str] = []
    while inp:
        if inp.startswith("../"):
            inp = inp[3:]
        elif inp.startswith("./"):
            inp = inp[2:]
        elif inp.startswith("/./"):
            inp = "/" + inp[3:]
        elif inp == "/.":
            inp = "/"
        elif inp.startswith("/../"):
            inp = "/" + inp[4:]
            if out:
                out.pop()
        elif inp == "/..":
            inp = "/"
            if out:
                out.pop()
        elif inp in (".", ".."):
            inp = ""
        else:
            start = 1 if inp.startswith("/") else 0
            cut = inp.find("/", start)
            cut = len(inp) if cut < 0 else cut
            out.append(inp[:cut])
            inp = inp[cut:]
    return "".join(out)


def _normalize_escapes(path: str) -> str:
    """Uppercase ``%xx`` hex, decode escaped unreserved bytes, escape anything a path
    cannot hold raw (UTF-8, uppercase hex). A ``%`` not followed by two hex digits is
    refused."""
    out: list[str] = []
    i = 0
    while i < len(path):
        ch = path[i]
        if ch == "%":
            pair = path[i + 1 : i + 3]
            if len(pair) != 2 or not set(pair) <= _HEX:
                raise TargetUriMalformed("a '%' in the path is not a percent-escape")
            decoded = chr(int(pair, 16))
            out.append(decoded if decoded in _UNRESERVED else "%" + pair.upper())
            i += 3
            continue
        if ch in _PATH_KEEP:
            out.append(ch)
        else:
            out.append("".join(f"%{b:02X}" for b in ch.encode("utf-8")))
        i += 1
    return "".join(out)
