"""The ACS v0.1 method table: hooks, their payload schemas and permitted dispositions.

Source: specs/acs.md §3 and §7 (hooks.md; REF-PY ``methods.PERMITTED``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from warden.core.hooks import MCP_METHOD
from warden.core.types import ALL_EFFECTS, Effect
from warden.errors import CapabilityNotNegotiated, InvalidParams, MethodNotFound

A, D, M = Effect.ALLOW, Effect.DENY, Effect.MODIFY

#: method → (hook schema path under schemas/acs, permitted dispositions)
HOOKS: dict[str, tuple[str, frozenset[Effect]]] = {
    "steps/sessionStart": ("hooks/session-start.json", frozenset({A, D})),
    "steps/agentTrigger": ("hooks/agent-trigger.json", frozenset({A, D, M})),
    "steps/turnStart": ("hooks/turn-start.json", frozenset({A, D})),
    "steps/userMessage": ("hooks/user-message.json", frozenset({A, D, M})),
    "steps/agentResponse": ("hooks/agent-response.json", frozenset({A, D, M})),
    "steps/knowledgeRetrieval": ("hooks/knowledge-retrieval.json", frozenset({A, D, M})),
    "steps/memoryContextRetrieval": ("hooks/memory-context-retrieval.json", frozenset({A, D, M})),
    "steps/memoryStore": ("hooks/memory-store.json", frozenset({A, D, M})),
    "steps/toolCallRequest": ("hooks/tool-call-request.json", ALL_EFFECTS),
    "steps/toolCallResult": ("hooks/tool-call-result.json", frozenset({A, D, M})),
    "steps/preCompact": ("hooks/pre-compact.json", frozenset({A, D})),
    "steps/postCompact": ("hooks/post-compact.json", frozenset({A, M})),
    "steps/subagentStart": ("hooks/subagent-start.json", frozenset({A, D})),
    "steps/subagentStop": ("hooks/subagent-stop.json", frozenset({A})),
    "steps/skillRegister": ("hooks/skill-register.json", frozenset({A, D})),
    "steps/skillLoad": ("hooks/skill-load.json", frozenset({A, D})),
    "steps/skillUnload": ("hooks/skill-unload.json", frozenset({A})),
    "steps/turnEnd": ("hooks/turn-end.json", frozenset({A})),
    "steps/sessionEnd": ("hooks/session-end.json", frozenset({A})),
}

HANDSHAKE = "handshake/hello"
PING = "system/ping"
MCP_PREFIX = "protocols/"
_WRAPPED = re.compile(r"^wrapped:(?P<proto>[A-Za-z0-9]+)-(?P<version>[^/]+)/(?P<method>.+)$")


@dataclass(frozen=True)
class MethodInfo:
    """A routed method: its kind, canonical name and permitted dispositions.

    For wrapped MCP, ``mcp_method`` is the MCP method (``tools/call``) and
    ``mcp_version`` the explicit version of the ``wrapped:`` form, if any.
    """

    method: str
    kind: str  # "hook" | "mcp"
    permitted: frozenset[Effect]
    schema: str | None = None
    mcp_method: str | None = None
    mcp_version: str | None = None


#: Methods routed so far (a few hundred at most: a client's own names cannot grow it).
_ROUTED: dict[str, MethodInfo] = {}


def route(method: str) -> MethodInfo:
    """Route a request method, or raise.

    Raises :class:`MethodNotFound` for undefined methods,
    :class:`CapabilityNotNegotiated` for defined ones Warden does not serve
    (``agbom/*`` without ACS-Inspect, A2A, ``trace/*``), and
    :class:`InvalidParams` for a malformed wrapped method name. A method routed once
    is answered from a table: every step routes, and the wrapped-MCP match is a regex.
    """
    info = _ROUTED.get(method)
    if info is None:
        info = _route(method)
        if len(_ROUTED) < 512:
            _ROUTED[method] = info
    return info


def _route(method: str) -> MethodInfo:
    hook = HOOKS.get(method)
    if hook is not None:
        return MethodInfo(method, "hook", hook[1], schema=hook[0])
    if method.startswith("agbom/"):
        if method in ("agbom/snapshot", "agbom/changed"):
            raise CapabilityNotNegotiated(
                "ACS-Inspect (agbom/*) is not implemented by this Guardian", method=method
            )
        raise MethodNotFound(f"method {method!r} is not defined by ACS v0.1", method=method)
    if method.startswith(MCP_PREFIX):
        proto, _, inner = method[len(MCP_PREFIX) :].partition("/")
        if proto.upper() == "A2A":
            raise CapabilityNotNegotiated("A2A wrapping is reserved for ACS v0.2", method=method)
        if proto.upper() != "MCP" or not inner:
            raise MethodNotFound(f"method {method!r} is not defined by ACS v0.1", method=method)
        if not MCP_METHOD.match(inner):
            raise InvalidParams(f"wrapped MCP method {inner!r} is malformed", method=method)
        return MethodInfo(f"protocols/MCP/{inner}", "mcp", ALL_EFFECTS, mcp_method=inner)
    m = _WRAPPED.match(method)
    if m is not None:
        if m["proto"].lower() != "mcp":
            raise CapabilityNotNegotiated("only MCP wrapping is defined in ACS v0.1", method=method)
        inner = m["method"]
        if not MCP_METHOD.match(inner):
            raise InvalidParams(f"wrapped MCP method {inner!r} is malformed", method=method)
        return MethodInfo(
            f"protocols/MCP/{inner}", "mcp", ALL_EFFECTS, mcp_method=inner, mcp_version=m["version"]
        )
    raise MethodNotFound(f"method {method!r} is not defined by ACS v0.1", method=method)


def is_dispatchable(method: str, mcp_versions: frozenset[str]) -> bool:
    """Whether a method a client lists in ClientHello is one Warden evaluates.

    Wrapped MCP counts only when MCP is in the client's ``wrapped_protocols``
    (``mcp_versions`` non-empty); the ``wrapped:`` form only at a declared version.
    """
    if method in HOOKS or method == PING:
        return True
    if method.startswith(MCP_PREFIX):
        proto, _, inner = method[len(MCP_PREFIX) :].partition("/")
        return (
            bool(mcp_versions)
            and proto.upper() == "MCP"
            and (inner == "*" or bool(MCP_METHOD.match(inner)))
        )
    m = _WRAPPED.match(method)
    if m is not None:
        return (
            m["proto"].lower() == "mcp"
            and m["version"] in mcp_versions
            and (m["method"] == "*" or bool(MCP_METHOD.match(m["method"])))
        )
    return False


def is_negotiated(request_method: str, info: MethodInfo, evaluated: list[str]) -> bool:
    """Whether ``request_method`` was granted in the session's ``methods_evaluated``."""
    if request_method in evaluated:
        return True
    if info.kind == "mcp":
        if info.mcp_version is None:
            return (
                info.method in evaluated
                or "protocols/MCP/*" in evaluated
                or any(e.lower() == request_method.lower() for e in evaluated)
            )
        return f"wrapped:mcp-{info.mcp_version}/*" in evaluated
    return False
