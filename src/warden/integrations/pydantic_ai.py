"""Warden for Pydantic AI (``pip install 'warden[pydantic-ai]'``).

:class:`WardenToolset` is a Pydantic AI ``WrapperToolset``: it wraps any toolset (a
``FunctionToolset``, an MCP server, the agent's own tools) and sends every call to Warden
as ``steps/toolCallRequest`` before it runs and its return value as
``steps/toolCallResult`` after::

    from pydantic_ai import Agent, FunctionToolset
    from warden import Client
    from warden.integrations.pydantic_ai import WardenToolset

    client = Client.connect(...)
    tools = FunctionToolset([send_payment, wipe_disk])
    agent = Agent(model, toolsets=[WardenToolset(tools, client)])

Mapping (docs/decisions.md 320, 325):

- deny → raises ``ToolFailed`` with the refusal: the model sees a failed tool result and
  adapts, without the retry instructions or retry budget of ``ModelRetry``;
- ask/defer → wait for the desk up to ``approval_timeout`` seconds, then as decided;
  no answer in time → as deny (``ToolFailed``). Pydantic AI's own deferred approvals
  (``ApprovalRequired``) end the run and need the application to resume it; Warden's
  desk is the approver here, so the adapter waits instead;
- modify → the tool runs with Warden's arguments, validated again by the tool's own
  argument validator (a modification that no longer fits the schema is refused);
- an output Warden denies (or cannot review) becomes ``ToolFailed``; one it redacts
  (``modify``) is returned redacted.

Requires ``pydantic-ai-slim`` (tested with 2.68). Spec: ACS §7, issue 18 item 1.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError
from pydantic_ai import RunContext, ToolFailed, WrapperToolset
from pydantic_ai.toolsets import ToolsetTool

from warden.integrations._gate import DEFAULT_APPROVAL_TIMEOUT, areview, arule

__all__ = ["WardenToolset"]


@dataclass
class WardenToolset(WrapperToolset[Any]):
    """``wrapped`` behind Warden. ``client``: a ``warden.Client`` or ``warden.AsyncClient``
    (one ACS session); ``approval_timeout``: seconds to wait for the desk (0 refuses an
    ask at once)."""

    client: Any = field(kw_only=True, default=None)
    approval_timeout: float = field(kw_only=True, default=DEFAULT_APPROVAL_TIMEOUT)

    def __init__(
        self,
        wrapped: Any,
        client: Any,
        *,
        approval_timeout: float = DEFAULT_APPROVAL_TIMEOUT,
    ) -> None:
        super().__init__(wrapped)
        if client is None:
            raise TypeError("WardenToolset needs a warden.Client or warden.AsyncClient")
        self.client = client
        self.approval_timeout = approval_timeout

    async def call_tool(
        self,
        name: str,
        tool_args: dict[str, Any],
        ctx: RunContext[Any],
        tool: ToolsetTool[Any],
    ) -> Any:
        """Run ``name`` with ``tool_args`` (already validated) only as Warden allows."""
        ruling = await arule(self.client, name, tool_args, approval_timeout=self.approval_timeout)
        if not ruling.runs:
            raise ToolFailed(ruling.message)
        args = tool_args
        if ruling.final is not None and ruling.final.modified_args is not None:
            try:
                args = tool.args_validator.validate_python(ruling.arguments)
            except ValidationError as exc:
                raise ToolFailed(
                    f"Warden changed the arguments of {name} and they no longer fit the "
                    f"tool's schema, so it was not run ({exc.error_count()} errors)."
                ) from exc
        result = await super().call_tool(name, args, ctx, tool)
        reviewed = await areview(self.client, ruling, name, result)
        if reviewed.withheld:
            raise ToolFailed(reviewed.message)
        return reviewed.output
