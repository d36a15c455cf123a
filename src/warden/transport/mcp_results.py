"""The SDK's checks and JSON of a ``tools/call`` on the proxy's fast paths, done once.

``mcp_types.methods.validate_server_result`` validates a result against the negotiated
version's surface model and then dumps it to a dict it throws away;
``serialize_server_result`` followed by ``JSONRPCResponse(...).model_dump_json()``
validates, dumps to a dict, builds a model around that dict and dumps it again. Here
the same surface model (the SDK's own ``SERVER_RESULTS`` row, through a
``TypeAdapter`` of it) validates once, and the JSON line is the model's own
``dump_json`` inside the JSON-RPC frame: the same checks, the same refusals
(``ValidationError``; ``ValueError`` for an unknown version, ``KeyError`` for a version
without a ``tools/call`` surface, raised before validating, as the SDK raises them),
the same bytes (``tests/wire/mcp/test_mcp_results.py``; docs/decisions.md 882).
"""

from __future__ import annotations

from typing import Any

import pydantic_core
from mcp_types import methods
from mcp_types.version import KNOWN_PROTOCOL_VERSIONS
from pydantic import TypeAdapter

from warden.crypto.canonical import number_outside_jcs_at

#: version → the adapter of its ``tools/call`` surface result.
_ADAPTERS: dict[str, TypeAdapter[Any]] = {}


def result_adapter(version: str) -> TypeAdapter[Any]:
    """The adapter ``methods.serialize_server_result("tools/call", version, …)``
    validates with; raises as that function raises before validating."""
    adapter = _ADAPTERS.get(version)
    if adapter is None:
        if version not in KNOWN_PROTOCOL_VERSIONS:
            raise ValueError(f"version must be a known protocol version, got {version!r}")
        target: Any = methods.SERVER_RESULTS[("tools/call", version)]
        adapter = TypeAdapter(target)
        _ADAPTERS[version] = adapter
    return adapter


def check_result(version: str, result: Any) -> None:
    """``methods.validate_server_result("tools/call", version, result)`` without the
    dump it discards."""
    result_adapter(version).validate_python(result, by_name=False)


def answer_line(version: str, rid: str | int, result: Any) -> bytes:
    """The JSON line of ``JSONRPCResponse(id=rid, result=serialize_server_result(
    "tools/call", version, result))``, as ``model_dump_json(by_alias=True,
    exclude_unset=True)`` writes it; raises as ``serialize_server_result`` does."""
    adapter = result_adapter(version)
    shaped = adapter.dump_json(
        adapter.validate_python(result, by_name=False), by_alias=True, exclude_none=True
    )
    return b'{"jsonrpc":"2.0","id":' + pydantic_core.to_json(rid) + b',"result":' + shaped + b"}"


def request_line(rid: str, params: dict[str, Any]) -> bytes:
    """The JSON line of ``JSONRPCRequest(id=rid, method="tools/call", params=params)``
    as ``model_dump_json(by_alias=True, exclude_unset=True)`` writes it (``params`` is
    a plain ``dict[str, Any]`` there: written as it is, a non-finite float as
    ``null``)."""
    return pydantic_core.to_json(
        {"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": params},
        inf_nan_mode="null",  # as a model's default ``ser_json_inf_nan``
    )


def refused_answer(response: dict[str, Any], why: str) -> dict[str, Any]:
    """The error answer (-32603, as for an answer that is not strict JSON) that takes the
    place of an MCP server's ``response`` outside RFC 8785 (decision 1037): it names the
    first integer beyond ±(2^53−1) that no double spells, which JSON does not carry
    exactly (I-JSON, RFC 7493 §2.2; the audit chain's RFC 8785 cannot sign it), else
    says ``why``."""
    at = number_outside_jcs_at(response.get("result", response.get("error")), "/result")
    if at is not None:
        why = f"the integer at {at} is beyond ±(2^53−1), which JSON does not carry exactly"
    text = f"the MCP server's answer was refused: {why}"
    return {"jsonrpc": "2.0", "id": response.get("id"), "error": {"code": -32603, "message": text}}
