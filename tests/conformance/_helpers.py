"""Wire helpers shared by the conformance tests: envelopes, raw bytes, signature checks."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from conftest import registered_agent_keys

from warden.wire.acs.client import AcsClient, verify_response
from warden.wire.acs.signing import sign_request

#: The keys of the registered test agent the probes sign as (tests/conftest.py).
KEYS = registered_agent_keys()

#: A ClientHello method list that a probe can compare ``methods_evaluated`` against.
PROBE_METHODS = [
    "steps/sessionStart",
    "steps/toolCallRequest",
    "steps/toolCallResult",
    "steps/agentResponse",
    "steps/sessionEnd",
    "system/ping",
]


def body(envelope: Any) -> bytes:
    """The exact bytes sent on the wire for ``envelope``."""
    return json.dumps(envelope, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def rfc3339(offset_s: float = 0.0) -> str:
    ts = datetime.now(UTC) + timedelta(seconds=offset_s)
    return ts.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def inner(response: dict[str, Any]) -> dict[str, Any]:
    """``result`` or ``error`` of a response (exactly one must be present)."""
    assert ("result" in response) != ("error" in response), response
    part: dict[str, Any] = response["result"] if "result" in response else response["error"]
    return part


def assert_signed(response: dict[str, Any], session_id: str, key: bytes | None = None) -> None:
    """The response carries a signature that verifies under the session's HKDF key (of the
    registered test agent unless ``key`` is given)."""
    sig = inner(response).get("signature")
    assert isinstance(sig, dict), f"expected a signed response: {response}"
    assert sig["algorithm"] == "HMAC-SHA256"
    assert verify_response(response, key or KEYS.key_for(session_id)), response


def assert_unsigned(response: dict[str, Any]) -> None:
    assert "signature" not in inner(response), f"expected an unsigned response: {response}"


def assert_error(response: dict[str, Any], code: int) -> dict[str, Any]:
    assert "error" in response, response
    err: dict[str, Any] = response["error"]
    assert err["code"] == code, response
    assert isinstance(err["message"], str) and err["message"]
    return err


def hello_payload(
    methods: list[str] | None = None,
    *,
    transports: tuple[str, ...] = ("http",),
    versions: tuple[str, ...] = ("0.1.0",),
    provenance_producer: str = "none",
    profiles: tuple[str, ...] = ("acs-core",),
) -> dict[str, Any]:
    return {
        "acs_versions_supported": list(versions),
        "methods_implemented": list(methods if methods is not None else PROBE_METHODS),
        "transports_supported": list(transports),
        "provenance_producer": provenance_producer,
        "profiles_supported": list(profiles),
    }


def tool_payload(name: str, **arguments: Any) -> dict[str, Any]:
    return {"tool": {"name": name}, "arguments": {k: {"value": v} for k, v in arguments.items()}}


def signed_envelope(
    client: AcsClient,
    method: str,
    payload: dict[str, Any],
    *,
    nonce: str | None = None,
    request_id: str | None = None,
    timestamp: str | None = None,
) -> dict[str, Any]:
    """A request envelope signed with the client's session key (optionally with a nonce)."""
    env = client.envelope(method, payload, request_id=request_id, timestamp=timestamp, sign=False)
    if nonce is not None:
        env["params"]["nonce"] = nonce
    return sign_request(env, client.key, client.key_id)


def new_id() -> str:
    return str(uuid.uuid4())
