"""What an approval is bound to: the canonical hash of the exact action.

``action_hash(action) = lowercase hex SHA-256 of the RFC 8785 (JCS) bytes of
{"method", "name", "arguments"[, "raw_command"]}``: the wire method, the tool or
action name, and every argument value as received (nested objects included). A
resubmission matches a grant only if this hash is equal, so one changed argument,
a renamed tool or an added flag is a different action (docs/decisions.md).
"""

from __future__ import annotations

from typing import Any

from warden.core.types import ActionRequest
from warden.crypto.canonical import canonical_bytes, sha256_hex


def action_of(request: ActionRequest) -> dict[str, Any]:
    """The bound action of a step: ``{method, name, arguments[, raw_command]}``."""
    action: dict[str, Any] = {
        "method": request.method,
        "name": request.tool_name,
        "arguments": request.args,
    }
    if request.raw_command:
        action["raw_command"] = request.raw_command
    return action


def action_hash(action: dict[str, Any]) -> str:
    """64 lowercase hex characters; raises InvalidRequest for values outside JCS."""
    return sha256_hex(canonical_bytes(action))
