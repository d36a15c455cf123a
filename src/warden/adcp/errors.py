"""The error every AdCP task fails with (specs/adcp-spend-kla.md §1.3): a standard AdCP
error code from the shipped ``enums/error-code.json``, its ``recovery`` and the HTTP
status of the REST binding.

The domain modules of :mod:`warden.adcp` raise :class:`AdcpError`; the wire
(:mod:`warden.wire.adcp.envelope`) renders it as ``status: failed`` with ``errors[]``
and ``adcp_error``. It lives here, below the wire, so the task logic can raise it
without importing the wire (docs/decisions.md 390).
"""

from __future__ import annotations

from functools import cache
from typing import Any

from warden.errors import UNAVAILABLE_RETRY_AFTER_S, WardenError
from warden.schemas import load_folder

#: HTTP status of each error code on the REST binding (anything else: 400).
HTTP_STATUS = {
    "AUTH_REQUIRED": 401,
    "AUTH_MISSING": 401,
    "AUTH_INVALID": 401,
    "PERMISSION_DENIED": 403,
    "PLAN_NOT_FOUND": 404,
    "REFERENCE_NOT_FOUND": 404,
    "UNSUPPORTED_FEATURE": 404,
    "IDEMPOTENCY_CONFLICT": 409,
    "IDEMPOTENCY_EXPIRED": 409,
    "IDEMPOTENCY_IN_FLIGHT": 409,
    "INVALID_STATE": 409,
    "CONFLICT": 409,
    "BUDGET_EXCEEDED": 422,
    "RATE_LIMITED": 429,
    "SERVICE_UNAVAILABLE": 503,
    "GOVERNANCE_UNAVAILABLE": 503,
}


#: The RFC 9421 transport codes (security.mdx "Transport error taxonomy"): not in
#: ``enums/error-code.json`` (``error.code`` is an open string), answered with HTTP 401
#: and ``WWW-Authenticate: Signature error="<code>"``. Suffix → recovery.
SIGNATURE_CODES = {
    "request_signature_" + suffix: recovery
    for suffix, recovery in {
        "required": "correctable",
        "header_malformed": "correctable",
        "params_incomplete": "correctable",
        "tag_invalid": "correctable",
        "alg_not_allowed": "correctable",
        "window_invalid": "correctable",
        "components_incomplete": "correctable",
        "components_unexpected": "correctable",
        "key_unknown": "terminal",
        "key_purpose_invalid": "terminal",
        "key_revoked": "terminal",
        "revocation_stale": "transient",
        "rate_abuse": "transient",
        "invalid": "terminal",
        "digest_mismatch": "correctable",
        "replayed": "terminal",
    }.items()
}


@cache
def recovery_of() -> dict[str, str]:
    """``code → recovery`` from the shipped ``enums/error-code.json``, plus the RFC 9421
    transport codes (:data:`SIGNATURE_CODES`)."""
    doc = load_folder("adcp")["enums/error-code.json"]
    meta = doc.get("enumMetadata") or {}
    out = {code: str((meta.get(code) or {}).get("recovery", "terminal")) for code in doc["enum"]}
    return {**out, **SIGNATURE_CODES}


class AdcpError(WardenError):
    """A fatal task failure with a standard AdCP error code.

    ``code`` must be in ``enums/error-code.json`` (:func:`recovery_of`); ``field`` is a
    JSONPath-lite location, ``issues`` RFC 6901 pointers with messages, ``retry_after``
    whole seconds, ``status`` an HTTP status other than the code's own (a refusal of the
    HTTP request itself). The wire message is :attr:`message`; nothing else is
    disclosed.
    """

    reason = "adcp_error"

    def __init__(
        self,
        code: str,
        message: str,
        *,
        field: str | None = None,
        issues: list[dict[str, Any]] | None = None,
        details: dict[str, Any] | None = None,
        retry_after: int | None = None,
        status: int | None = None,
    ) -> None:
        if code not in recovery_of():
            raise ValueError(f"{code} is not an AdCP error code")
        super().__init__(message, reason=code.lower())
        self.code = code
        self.field = field
        self.issues = issues
        self.details = details
        self.retry_after = retry_after
        self.status = status

    @property
    def http_status(self) -> int:
        """``status`` when given (an HTTP-level refusal: 413, 415), else the code's."""
        if self.status is not None:
            return self.status
        if self.code in SIGNATURE_CODES:
            return 401
        return HTTP_STATUS.get(self.code, 400)

    def to_wire(self) -> dict[str, Any]:
        """The ``core/error.json`` object."""
        out: dict[str, Any] = {
            "code": self.code,
            "message": self.message,
            "recovery": recovery_of()[self.code],
        }
        if self.field is not None:
            out["field"] = self.field
        if self.issues:
            out["issues"] = self.issues
        if self.details:
            out["details"] = self.details
        if self.retry_after is not None:
            out["retry_after"] = self.retry_after
        return out


def unavailable() -> AdcpError:
    """The answer to a call Warden could not complete because its store failed (the
    database is unreachable, locked or refuses writes): ``GOVERNANCE_UNAVAILABLE``,
    HTTP 503, ``retry_after`` 5 s, for every task (docs/decisions.md 189). Nothing of
    the call was applied: its transaction rolled back."""
    return AdcpError(
        "GOVERNANCE_UNAVAILABLE",
        "the governance agent could not complete the request (its store is unavailable); "
        "nothing was changed, retry later",
        retry_after=UNAVAILABLE_RETRY_AFTER_S,
    )
