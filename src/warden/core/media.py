"""The one media type Warden's JSON bodies are read as (decisions 831, 993)."""

from __future__ import annotations


def json_media_problem(content_type: str | None) -> str | None:
    """Why a body sent with ``content_type`` (the ``Content-Type`` header, or None) is not
    read as JSON, or None when it is ``application/json`` (parameters such as ``charset``
    allowed, case ignored): the words ``/v1`` refuses it with (400)."""
    media = (content_type or "").split(";", 1)[0].strip().lower()
    if media == "application/json":
        return None
    shown = f"Content-Type {media}" if media else "no Content-Type"
    return f"the body must be sent as Content-Type: application/json, not {shown}"
