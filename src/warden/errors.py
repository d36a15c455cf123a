"""Warden's one exception hierarchy.

::

    WardenError
    ├── InputRejected          the caller sent something Warden will not process
    │   ├── ParseError             bytes are not strict JSON           (ACS -32700)
    │   ├── InvalidRequest         not a valid envelope / JCS domain   (ACS -32600)
    │   ├── MethodNotFound         method not defined                  (ACS -32601)
    │   └── InvalidParams          payload fails its hook schema       (ACS -32602)
    ├── ProtocolRefused        a well-formed request Warden refuses by protocol rule
    │   ├── SessionRefused          (ACS -32000)
    │   ├── UnsupportedVersion      (ACS -32001)
    │   ├── ProvenanceRequired      (ACS -32002)
    │   ├── CapabilityNotNegotiated (ACS -32003)
    │   ├── SignatureInvalid        (ACS -32004; KeyRevoked: a revoked agent key)
    │   ├── ReplayDetected          (ACS -32005)
    │   └── TimestampOutOfWindow    (ACS -32006)
    ├── CouldNotDecide         Warden cannot reach a decision (engine/store failure);
    │                          on an authenticated session this becomes a signed deny
    ├── IntegrityError         an audit chain or signature does not verify
    └── ConfigError            a bundle, key file or setting is invalid (refused at load)

Each protocol error knows its ACS JSON-RPC code (specs/acs.md §14, spec §17.1).
``diagnostics()`` is for operators; the wire carries ``message`` only.
"""

from __future__ import annotations

import logging
from enum import IntEnum, StrEnum
from typing import Any

#: The longest repr of a caller's value an error message quotes.
QUOTED_MAX = 80


def quoted(value: object) -> str:
    """``repr(value)`` for an error message, cut after :data:`QUOTED_MAX` characters with
    the value's length said: a refusal names what it refused without echoing a
    5,000-character input back to the caller, the terminal or the log."""
    text = repr(value)
    if len(text) <= QUOTED_MAX:
        return text
    size = f" ({len(value)} characters)" if isinstance(value, str) else ""
    return text[:QUOTED_MAX] + "…" + size


class AcsErrorCode(IntEnum):
    """JSON-RPC error codes used on the ACS wire (spec §17.1)."""

    PARSE_ERROR = -32700
    INVALID_REQUEST = -32600
    METHOD_NOT_FOUND = -32601
    INVALID_PARAMS = -32602
    INTERNAL_ERROR = -32603
    SESSION_REFUSED = -32000
    UNSUPPORTED_VERSION = -32001
    PROVENANCE_REQUIRED = -32002
    CAPABILITY_NOT_NEGOTIATED = -32003
    SIGNATURE_INVALID = -32004
    REPLAY_DETECTED = -32005
    TIMESTAMP_OUT_OF_WINDOW = -32006
    CHAIN_MISMATCH = -32007


class IntegrityReason(StrEnum):
    """Why a chain, record or signature failed verification."""

    CHAIN_MISMATCH = "chain_mismatch"
    RECORD_HASH_MISMATCH = "record_hash_mismatch"
    SIGNATURE_INVALID = "signature_invalid"


class WardenError(Exception):
    """Root of every error Warden raises on purpose."""

    reason: str = "warden_error"

    def __init__(self, message: str, *, reason: str | None = None, **data: Any) -> None:
        super().__init__(message)
        self.message = message
        if reason is not None:
            self.reason = reason
        self.data = data

    def diagnostics(self) -> str:
        """Human-readable detail for operators (never sent on the wire as is)."""
        extra = ", ".join(f"{k}={v!r}" for k, v in self.data.items())
        return f"{type(self).__name__}[{self.reason}]: {self.message}" + (
            f" ({extra})" if extra else ""
        )


class ProtocolError(WardenError):
    """An error with a fixed ACS JSON-RPC code."""

    code: AcsErrorCode = AcsErrorCode.INTERNAL_ERROR


class InputRejected(ProtocolError):
    """The caller's input is malformed; nothing was changed."""


class ParseError(InputRejected):
    code = AcsErrorCode.PARSE_ERROR
    reason = "parse_error"


class InvalidRequest(InputRejected):
    code = AcsErrorCode.INVALID_REQUEST
    reason = "invalid_request"


class MethodNotFound(InputRejected):
    code = AcsErrorCode.METHOD_NOT_FOUND
    reason = "method_not_found"


class InvalidParams(InputRejected):
    code = AcsErrorCode.INVALID_PARAMS
    reason = "invalid_params"


class ProtocolRefused(ProtocolError):
    """A well-formed request refused by a protocol rule."""


class SessionRefused(ProtocolRefused):
    code = AcsErrorCode.SESSION_REFUSED
    reason = "session_refused"


class UnsupportedVersion(ProtocolRefused):
    code = AcsErrorCode.UNSUPPORTED_VERSION
    reason = "unsupported_version"


class ProvenanceRequired(ProtocolRefused):
    code = AcsErrorCode.PROVENANCE_REQUIRED
    reason = "provenance_required"


class CapabilityNotNegotiated(ProtocolRefused):
    code = AcsErrorCode.CAPABILITY_NOT_NEGOTIATED
    reason = "capability_not_negotiated"


class SignatureInvalid(ProtocolRefused):
    code = AcsErrorCode.SIGNATURE_INVALID
    reason = "signature_invalid"


class DowngradeRefused(SignatureInvalid):
    """An HMAC-signed request in a session negotiated as ACS-Crypto (issue 21): -32004,
    signed with Warden's ML-DSA key as the session's every answer is."""

    reason = "downgrade_refused"


class KeyRevoked(SignatureInvalid):
    """The agent key that signed the request was revoked (seen inside the write
    transaction): answered as unauthenticated, -32004 unsigned."""

    reason = "key_revoked"


class ReplayDetected(ProtocolRefused):
    code = AcsErrorCode.REPLAY_DETECTED
    reason = "replay_detected"


class TimestampOutOfWindow(ProtocolRefused):
    code = AcsErrorCode.TIMESTAMP_OUT_OF_WINDOW
    reason = "timestamp_out_of_window"


class CouldNotDecide(WardenError):
    """Warden could not reach a decision; the caller gets a signed deny."""

    reason = "evaluation_failed"


class StoreUnavailable(CouldNotDecide):
    """The store failed; the decision cannot be made durable."""

    reason = "store_unavailable"


#: Seconds every wire's ``503`` for a :class:`StoreUnavailable` tells the caller to wait
#: before retrying (``Retry-After``; AdCP's ``retry_after``): one value for all (1130).
UNAVAILABLE_RETRY_AFTER_S = 5


def failure_log_level(exc: BaseException) -> int:
    """The :mod:`logging` level a request's failure is logged at: ``WARNING`` for a
    store that is unavailable (a locked SQLite file, an unreachable server: an outage
    the caller is told to retry and ``/readyz`` reports, logged once per request with
    no traceback), ``ERROR`` for everything else, including a COMMIT whose outcome is
    unknown."""
    if isinstance(exc, StoreUnavailable) and not exc.data.get("outcome_unknown"):
        return logging.WARNING
    return logging.ERROR


class HeadMoved(StoreUnavailable):
    """A chain append lost a race: the session head is no longer the expected one."""

    reason = "head_moved"


class UnlockedHeadMoved(HeadMoved):
    """A Warden-chain entry chained on a head read without a lock (decision 800) was not
    appended: another writer moved the head first. The transaction rolled back, nothing
    was written; the operation runs again from its start with the head locked
    (:func:`warden.ledger.warden_chain.chained_attempts`)."""


class StaleRead(HeadMoved):
    """A chain append's read guard failed: a row the decision was based on (a pending
    approval task answered from the desk's cache) changed before the append's
    transaction; nothing was written, and the step is decided again on a fresh read.

    ``found``: when the append read it in the same round trip as the failed guard, the
    newest task bound to the guarded action as the desk reads it
    (``SqlTasks.latest_state_or_grant``'s answer, ``None`` for no task); ``MISSING``
    when it was not read (decision 820)."""

    reason = "stale_read"
    #: Not read by the append (the desk reads it itself).
    MISSING: Any = object()
    found: Any = MISSING


class IntegrityError(WardenError):
    """An audit chain, record digest or signature does not verify."""

    def __init__(
        self,
        message: str,
        *,
        reason: IntegrityReason,
        session_id: str | None = None,
        seq: int | None = None,
        **data: Any,
    ) -> None:
        super().__init__(message, reason=reason.value, session_id=session_id, seq=seq, **data)
        self.integrity_reason = reason
        self.session_id = session_id
        self.seq = seq


class ConfigError(WardenError):
    """A bundle, key file or setting is invalid; refused at load, never half-applied."""

    reason = "config_error"
