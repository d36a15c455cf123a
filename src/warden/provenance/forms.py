"""The forms a value takes for inference matching (issue 20 item 4; docs/provenance.md,
"Inference mode").

An argument copied from a tool output may reach the call re-encoded. :func:`arg_forms`
gives every form Warden compares against the session's recorded outputs and user
messages, each normalised the same way as the texts it is matched in
(:func:`~.graph.normalise`: NFKC, case-folded, whitespace and format characters such as
zero-width spaces removed):

- the value itself;
- percent-decoded (``%2F``, ``+``), up to :data:`MAX_LAYERS` layers deep;
- base64 (standard or URL-safe, padding optional) and hex decoded, when the value
  decodes to at least :data:`MIN_DECODED_BYTES` bytes of UTF-8 text; decoded forms are
  themselves decoded again, up to :data:`MAX_LAYERS` layers;
- the canonical form (:func:`canonical`) of each of those.

:func:`canonical` rewrites URLs and e-mail addresses inside a normalised text to one
spelling: no scheme (``https://``), no ``www.``, no default port (``:80``, ``:443``),
no trailing ``/`` before the end or a delimiter, no ``mailto:``, and no ``+tag`` in an
e-mail's local part; percent-encoding is decoded first. Recorded outputs keep their
canonical text too (:class:`~.graph.OutputText`), so both sides meet in the same form.
"""

from __future__ import annotations

import base64
import binascii
import re
from urllib.parse import unquote, unquote_plus

#: Decoded base64/hex shorter than this is not considered (short strings decode by chance).
MIN_DECODED_BYTES = 8
#: How many encodings deep a value is unwrapped (e.g. base64 of a percent-encoded URL).
MAX_LAYERS = 3
#: Forms kept per argument leaf (bounds the work a hostile argument can cause).
MAX_FORMS = 16

_SCHEME = re.compile(r"\b[a-z][a-z0-9+.\-]{1,15}://")
_WWW = re.compile(r"(?:(?<=^)|(?<=[^a-z0-9\-.]))www\.")
_PORT = re.compile(r"([a-z0-9\-]\.[a-z]{2,63}):(?:80|443)\b")
_TRAILING = re.compile(r"/+(?=$|[\"'<>\s,;)\]}])")
_MAILTO = re.compile(r"mailto:")
_TAG = re.compile(r"\+[^@\s/\"'<>,;]*@")
_B64 = re.compile(r"^[A-Za-z0-9+/_\-]+={0,2}$")
_HEX = re.compile(r"^(?:[0-9a-fA-F]{2})+$")


def canonical(text: str) -> str:
    """``text`` (already normalised) with URLs and e-mail addresses in one spelling
    (module docstring). Idempotent."""
    if "%" in text or "+" in text:
        text = _percent(text)
    text = _SCHEME.sub("", text)
    text = _MAILTO.sub("", text)
    text = _WWW.sub("", text)
    text = _PORT.sub(r"\1", text)
    text = _TAG.sub("@", text)
    return _TRAILING.sub("", text)


def _percent(text: str) -> str:
    # Not unquote_plus: "+" stays (an e-mail tag, a phone number); a decoded space goes,
    # as normalise() removed every other one.
    return unquote(text).replace(" ", "") if "%" in text else text


def _decoded(raw: str) -> list[str]:
    """The texts ``raw`` decodes to as percent-encoding, base64 or hex (possibly none)."""
    out: list[str] = []
    stripped = raw.strip()
    if "%" in stripped:
        dec = unquote_plus(stripped)
        if dec != stripped:
            out.append(dec)
    compact = "".join(stripped.split())
    if len(compact) >= 2 * MIN_DECODED_BYTES and _HEX.match(compact):
        _add_text(out, binascii.unhexlify(compact))
    if len(compact) >= 12 and _B64.match(compact):
        body = compact.rstrip("=")
        padded = body + "=" * (-len(body) % 4)
        for alt in (b"+/", b"-_"):
            try:
                _add_text(out, base64.b64decode(padded, altchars=alt, validate=True))
            except (binascii.Error, ValueError):
                continue
    return out


def _add_text(out: list[str], data: bytes) -> None:
    if len(data) < MIN_DECODED_BYTES:
        return
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return
    # Decoded bytes that are mostly control characters are not text anyone copied.
    printable = all(ch.isprintable() or ch.isspace() for ch in text)
    if printable and text not in out:
        out.append(text)


def raw_forms(value: str) -> list[str]:
    """``value`` and what it decodes to, layer by layer (at most :data:`MAX_FORMS`)."""
    forms = [value]
    frontier = [value]
    for _ in range(MAX_LAYERS):
        nxt: list[str] = []
        for f in frontier:
            for d in _decoded(f):
                if d not in forms and len(forms) < MAX_FORMS:
                    forms.append(d)
                    nxt.append(d)
        if not nxt:
            break
        frontier = nxt
    return forms
