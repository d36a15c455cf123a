"""Errors the public client raises (all :class:`~warden.errors.WardenError`).

Fail-closed contract (decision 300): the client never invents a decision. When Warden
cannot be reached or answers with something that is not a signed decision, a method
raises one of these; an adapter catches :class:`WardenError` and refuses the tool call.
A signature that does not verify raises :class:`~warden.errors.IntegrityError`.
"""

from __future__ import annotations

from typing import Any

from warden.errors import WardenError


class WardenClientError(WardenError):
    """Root of the client's own errors: a misuse of the client or a failed exchange."""

    reason = "client_error"


class WardenUnavailable(WardenClientError):
    """Warden could not be reached (connection refused, timeout, a non-JSON or non-200
    HTTP answer). Nothing is known about the step: treat it as denied."""

    reason = "warden_unavailable"


class WardenProtocolError(WardenClientError):
    """Warden answered with a JSON-RPC error instead of a decision (ACS spec §17):
    ``code`` (e.g. -32004 signature invalid, -32005 replay), ``data`` its ``data`` member
    (``reason``, ``message``, ``pointer`` …). Treat the step as denied."""

    reason = "protocol_error"

    def __init__(self, message: str, *, code: int, data: dict[str, Any] | None = None) -> None:
        super().__init__(message, code=code, error_data=data or {})
        self.code = code
        self.error_data: dict[str, Any] = data or {}

    @property
    def error_reason(self) -> str:
        """``error.data.reason`` (``renegotiation_not_supported`` …), or ``""``."""
        return str(self.error_data.get("reason") or "")
