"""An ACS request checked as the server checks it, without a session (offline tools).

``warden policy explain`` and ``warden policy test`` evaluate requests that never
reach a server; :func:`checked_message` applies the checks ``warden serve`` applies to
every request before policy sees it (wire/acs/service.py), in the same order: the
envelope schema, the JCS domain, method routing, then the hook's payload schema or
the wrapped MCP message. Signature, session, replay and clock checks need a live
session and are not applied.
"""

from __future__ import annotations

from typing import Any

from warden.crypto.canonical import canonical_bytes
from warden.errors import InvalidParams, InvalidRequest
from warden.schemas import schema_set
from warden.wire.acs.mcp import check_wrapped
from warden.wire.acs.methods import HANDSHAKE, PING, MethodInfo, route


class NotEvaluated(Exception):
    """The method is answered by the protocol layer (``handshake/hello``,
    ``system/ping``): policy never sees it."""

    def __init__(self, method: str) -> None:
        super().__init__(method)
        self.method = method


def checked_message(msg: Any) -> tuple[MethodInfo, dict[str, Any]]:
    """The routed method and params of a parsed request envelope ``msg``.

    Raises :class:`~warden.errors.ProtocolError` (``InvalidRequest``, ``MethodNotFound``,
    ``InvalidParams``, ``CapabilityNotNegotiated``) exactly as the server would answer,
    and :class:`NotEvaluated` for handshake and ping.
    """
    schemas = schema_set("acs")
    if isinstance(msg, list):
        raise InvalidRequest(
            "batch requests are not supported by this Guardian", reason="batch_unsupported"
        )
    problem = schemas.first_error("request-envelope.json", msg)
    if problem is not None:
        raise InvalidRequest(
            f"request envelope invalid at {problem[0] or '/'}: {problem[1]}",
            pointer=problem[0],
        )
    canonical_bytes(msg)  # raises InvalidRequest outside the JCS domain
    method, params = msg["method"], msg["params"]
    if method in (HANDSHAKE, PING):
        raise NotEvaluated(method)
    info = route(method)
    if info.kind == "hook":
        assert info.schema is not None
        problem = schemas.first_error(info.schema, params["payload"])
        if problem is not None:
            raise InvalidParams(
                f"{method} payload invalid at {problem[0] or '/'}: {problem[1]}",
                pointer="/params/payload" + problem[0],
                method=method,
            )
    else:
        assert info.mcp_method is not None
        check_wrapped(params["payload"], info.mcp_method, method)
    return info, params
