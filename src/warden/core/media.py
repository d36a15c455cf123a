"""The one media type Warden's JSON bodies are read as (decisions 831, 993)."""

from __future__ import annotations


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
