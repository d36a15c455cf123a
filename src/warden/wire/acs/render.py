"""Render verdicts and errors into ACS response envelopes (seed ``000_…`` schema)."""

from __future__ import annotations

import math
from typing import Any

from warden import __version__
from warden.core.types import ActionRequest, Effect, Verdict
from warden.crypto.canonical import lone_surrogate_at
from warden.errors import ProtocolError


def jsonrpc_id(msg: Any) -> str | int | float | None:
    """The request id to echo: a string or number, else null (JSON-RPC 2.0 §5).

    A non-finite number (``1e400`` parses as infinity) or a string holding a lone
    surrogate is echoed as null: neither has a UTF-8 JSON spelling, and echoing it
    would make the response itself invalid JSON.
    """
    if isinstance(msg, dict):
        rid = msg.get("id")
        if isinstance(rid, float) and not math.isfinite(rid):
            return None
        if isinstance(rid, str) and lone_surrogate_at(rid) is not None:
            return None
        if isinstance(rid, str) or (isinstance(rid, int | float) and not isinstance(rid, bool)):
            return rid
    return None


def error_response(rid: str | int | float | None, err: ProtocolError) -> dict[str, Any]:
    """A JSON-RPC error envelope; ``data`` carries ``reason``, ``message`` and the
    error's own members (``pointer``, ``method``, ``supported_versions``, …)."""
    data: dict[str, Any] = {"reason": err.reason, "message": err.message}
    data.update({k: v for k, v in err.data.items() if v is not None})
    return {
        "jsonrpc": "2.0",
        "id": rid,
        "error": {"code": int(err.code), "message": err.message, "data": data},
    }


def verdict_result(
    verdict: Verdict,
    *,
    acs_version: str,
    request_id: str,
    chain_hash: str | None,
    duration_ms: int,
) -> dict[str, Any]:
    """The AcsResult for a verdict (§5); ``chain_hash`` when an entry was written."""
    result: dict[str, Any] = {
        "type": "final",
        "acs_version": acs_version,
        "request_id": request_id,
        "decision": verdict.decision.value,
    }
    if verdict.reasoning:
        result["reasoning"] = verdict.reasoning
    elif verdict.decision is not Effect.ALLOW:
        result["reasoning"] = f"Policy decision: {verdict.decision.value}."
    codes = list(verdict.reason_codes)
    if verdict.warn and "policy_warning" not in codes:
        codes.append("policy_warning")
    if codes:
        result["reason_codes"] = codes
    if verdict.policy_references:
        result["policy_references"] = [r.to_wire() for r in verdict.policy_references]
    if verdict.policy_data:
        result["policy_data"] = verdict.policy_data
    if verdict.cited_provenance_ids:
        result["cited_provenance_ids"] = list(verdict.cited_provenance_ids)
    if verdict.modifications is not None:
        result["modifications"] = verdict.modifications
    if verdict.ask_details is not None:
        result["ask_details"] = verdict.ask_details
    if verdict.defer_details is not None:
        result["defer_details"] = verdict.defer_details
    if chain_hash is not None:
        result["chain_hash"] = chain_hash
    result["metadata"] = {
        "evaluator": "deterministic",
        "evaluator_version": f"warden {__version__}",
        "evaluation_duration_ms": max(0, duration_ms),
    }
    return result


def entry_content(
    *,
    entry_id: str,
    session_id: str,
    request: ActionRequest,
    params: dict[str, Any],
    request_hash: str,
    verdict: Verdict,
) -> dict[str, Any]:
    """The ContextEntry content for one evaluated step (§8.2; Warden's fields in
    ``verdict`` — including ``spend``, what the spend gate reserved, refused, settled or
    released — and ``failure``). Optional members are omitted, never null."""
    v: dict[str, Any] = {"decision": verdict.decision.value}
    if verdict.reason_codes:
        v["reason_codes"] = list(verdict.reason_codes)
    if verdict.warn:
        v["warn"] = True
    if verdict.policy_references:
        v["policy_references"] = [r.to_wire() for r in verdict.policy_references]
    if verdict.bundle is not None:
        v["bundle"] = verdict.bundle.to_wire()
    if "substituted_from" in verdict.policy_data:
        v["substituted_from"] = verdict.policy_data["substituted_from"]
    if verdict.spend is not None:
        v["spend"] = verdict.spend
    if verdict.cited_provenance_ids:
        v["cited_provenance_ids"] = list(verdict.cited_provenance_ids)
    if verdict.intent_extension is not None:
        v["intent_extension"] = verdict.intent_extension
    content: dict[str, Any] = {
        "entry_id": entry_id,
        "session_id": session_id,
        "step_id": params["request_id"],
        "step_type": request.method,
        "timestamp": params["timestamp"],
        "request_hash": request_hash,
        "verdict": v,
    }
    turn_id = params["metadata"].get("turn_id")
    if isinstance(turn_id, str):
        content["turn_id"] = turn_id
    if verdict.provenance_summary is not None:
        content["provenance_summary"] = verdict.provenance_summary
    if verdict.failure:
        content["failure"] = verdict.failure
    return content
