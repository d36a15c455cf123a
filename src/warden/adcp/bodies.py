"""What the AdCP wire refuses an HTTP request body for before reading it as a task,
the same on ``POST /adcp/<task>`` and ``/mcp`` (docs/wires.md, "Envelope"; decisions
830–832): a body over the limit (HTTP 413) and a body not sent as
``application/json`` (HTTP 415), both ``INVALID_REQUEST`` (AdCP has no code of its own
for either) with one message on both transports.
"""

from __future__ import annotations

from warden.adcp.errors import AdcpError

#: The message of a body not labelled JSON: the spend wire's (``/v1``) words.
NOT_JSON = "the body must be one JSON object sent with content-type: application/json"


def too_large(limit: int) -> AdcpError:
    """The refusal of a body over ``limit`` bytes (declared or read): 413."""
    return AdcpError("INVALID_REQUEST", f"the body is larger than {limit} bytes", status=413)


def media_type_problem(content_type: str | None) -> AdcpError | None:
    """The refusal of a body whose ``Content-Type`` is not ``application/json``
    (parameters such as ``charset`` allowed, case ignored), or None: 415."""
    media = (content_type or "").split(";", 1)[0].strip().lower()
    if media == "application/json":
        return None
    return AdcpError("INVALID_REQUEST", NOT_JSON, status=415)
