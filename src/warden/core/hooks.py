"""The method names a Guardian evaluates (ACS v0.1 §3, §16), shared by policy and wire.

Policy uses them to refuse a rule whose ``hooks`` can never match; the wire's method
table (``warden.wire.acs.methods.HOOKS``) must list exactly :data:`STEP_METHODS`.
This module imports nothing from Warden, so either side may import it.
"""

from __future__ import annotations

import re

#: The 19 ACS v0.1 step hooks, in specs/acs.md §3 order.
STEP_METHODS: tuple[str, ...] = (
    "steps/sessionStart",
    "steps/agentTrigger",
    "steps/turnStart",
    "steps/userMessage",
    "steps/agentResponse",
    "steps/knowledgeRetrieval",
    "steps/memoryContextRetrieval",
    "steps/memoryStore",
    "steps/toolCallRequest",
    "steps/toolCallResult",
    "steps/preCompact",
    "steps/postCompact",
    "steps/subagentStart",
    "steps/subagentStop",
    "steps/skillRegister",
    "steps/skillLoad",
    "steps/skillUnload",
    "steps/turnEnd",
    "steps/sessionEnd",
)

#: Warden's own evaluation points outside ACS: a Governed Spend quote is decided by the
#: same Guardian (rules target it with ``hooks: [spend/quote]``; ``tool.name`` is the
#: action, ``args`` are ``{budgetId, amount, currency, action}``), and so is an AI agent
#: action request (``hooks: [kla/action]``; ``tool.name`` is the request's ``action``,
#: ``args`` are ``{purpose, resource_type, resource_id, data_boundary_ref, environment,
#: amount?, currency?}`` with ``amount`` a decimal string), and so is an AdCP
#: ``check_governance`` (``hooks: [adcp/check_governance]``; ``tool.name`` is the governed
#: task, ``args`` are ``{plan_id, check_type, tool, amount, currency, target_agent,
#: purchase_type, caller}`` with ``amount`` a number or null).
WARDEN_METHODS: tuple[str, ...] = ("spend/quote", "kla/action", "adcp/check_governance")

#: Canonical prefix of a wrapped MCP method as policy sees it (``protocols/MCP/tools/call``).
MCP_METHOD_PREFIX = "protocols/MCP/"

#: An MCP method name as it may follow :data:`MCP_METHOD_PREFIX`.
MCP_METHOD = re.compile(r"^[A-Za-z0-9_]+(/[A-Za-z0-9_]+)*$")


def is_evaluated_method(name: str) -> bool:
    """Whether ``name`` is a method policy can see: a step hook, ``protocols/MCP/<method>``
    or one of :data:`WARDEN_METHODS`."""
    if name in STEP_METHODS or name in WARDEN_METHODS:
        return True
    return name.startswith(MCP_METHOD_PREFIX) and bool(
        MCP_METHOD.match(name[len(MCP_METHOD_PREFIX) :])
    )
