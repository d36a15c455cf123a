"""Warden for the OpenAI Agents SDK (``pip install 'warden[openai-agents]'``).

The SDK's per-tool guardrails are the hook: :class:`WardenGuardrails` supplies a
``tool_input_guardrail`` that sends each call as ``steps/toolCallRequest`` and a
``tool_output_guardrail`` that sends its output as ``steps/toolCallResult``.
:func:`governed` attaches both to a ``FunctionTool`` (a copy; the original is untouched)::

    from agents import Agent, function_tool
    from warden import Client
    from warden.integrations.openai_agents import governed

    client = Client.connect(...)
    agent = Agent(name="ops", tools=governed([send_payment, wipe_disk], client))

Mapping (docs/decisions.md 320, 323):

- deny → ``reject_content`` (the model reads the refusal and the run goes on), or
  ``raise_exception`` (``ToolInputGuardrailTripwireTriggered`` halts the run) with
  ``on_deny="raise"``;
- ask/defer → wait for the desk up to ``approval_timeout`` seconds, then as the desk
  decided; no answer in time → as deny;
- modify → the tool runs with Warden's arguments. A guardrail cannot change arguments
  (the SDK invokes the tool with the model's JSON), so :func:`governed` also wraps the
  tool's ``on_invoke_tool`` to substitute them; a guardrail used alone, without
  :func:`governed`, refuses a ``modify`` rather than run the unmodified call;
- an output Warden denies (or cannot review) is replaced by the refusal; one it
  redacts (``modify``) is replaced by the redacted output (as JSON text unless a string).

Requires ``openai-agents`` (tested with 0.24). Spec: ACS §7 (toolCallRequest /
toolCallResult), issue 18 item 1.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Literal

from agents import (
    FunctionTool,
    ToolGuardrailFunctionOutput,
    ToolInputGuardrail,
    ToolInputGuardrailData,
    ToolOutputGuardrail,
    ToolOutputGuardrailData,
)
from agents.tool_context import ToolContext

from warden.integrations._gate import DEFAULT_APPROVAL_TIMEOUT, Ruling, areview, arule, as_text

__all__ = ["WardenGuardrails", "governed"]


class WardenGuardrails:
    """The input and output guardrails for one Warden ``client`` (a ``warden.Client`` or
    ``warden.AsyncClient``; one client is one ACS session).

    ``approval_timeout`` is in seconds (0: refuse an ask at once); ``on_deny`` is
    ``"reject"`` (the model reads the refusal) or ``"raise"`` (the run halts).
    ``rulings`` maps each tool call id to the :class:`~warden.integrations._gate.Ruling`
    of a call that was let run and whose output has not been reviewed yet."""

    def __init__(
        self,
        client: Any,
        *,
        approval_timeout: float = DEFAULT_APPROVAL_TIMEOUT,
        on_deny: Literal["reject", "raise"] = "reject",
    ) -> None:
        if on_deny not in ("reject", "raise"):
            raise ValueError(f"on_deny must be 'reject' or 'raise', not {on_deny!r}")
        self.client = client
        self.approval_timeout = approval_timeout
        self.on_deny = on_deny
        self.rulings: dict[str, Ruling] = {}
        # Tools whose invoker this object wrapped (govern()): only they can run a modify.
        self.substituting: set[str] = set()
        self.input_guardrail: ToolInputGuardrail[Any] = ToolInputGuardrail(
            guardrail_function=self._check_call, name="warden_tool_call"
        )
        self.output_guardrail: ToolOutputGuardrail[Any] = ToolOutputGuardrail(
            guardrail_function=self._check_output, name="warden_tool_result"
        )

    def _refuse(self, message: str, info: Any) -> ToolGuardrailFunctionOutput:
        if self.on_deny == "raise":
            return ToolGuardrailFunctionOutput.raise_exception(output_info=info)
        return ToolGuardrailFunctionOutput.reject_content(message, output_info=info)

    async def _check_call(self, data: ToolInputGuardrailData) -> ToolGuardrailFunctionOutput:
        ctx = data.context
        try:
            args = json.loads(ctx.tool_arguments or "{}")
        except ValueError:
            args = None
        if not isinstance(args, dict):
            # The SDK would refuse these too; Warden is not asked about a call that cannot run.
            return self._refuse(f"The arguments of {ctx.tool_name} are not a JSON object.", None)
        ruling = await arule(
            self.client, ctx.tool_name, args, approval_timeout=self.approval_timeout
        )
        info = {"warden": ruling.final.decision if ruling.final else None, "asked": ruling.asked}
        if not ruling.runs:
            return self._refuse(ruling.message, info)
        if ruling.arguments != args and ctx.tool_name not in self.substituting:
            return self._refuse(
                f"Warden changed the arguments of {ctx.tool_name}, and this guardrail cannot "
                "pass changed arguments to the tool: use warden.integrations.openai_agents."
                "governed() to run modified calls.",
                info,
            )
        self.rulings[ctx.tool_call_id] = ruling
        return ToolGuardrailFunctionOutput.allow(output_info=info)

    async def _check_output(self, data: ToolOutputGuardrailData) -> ToolGuardrailFunctionOutput:
        ctx = data.context
        ruling = self.rulings.pop(ctx.tool_call_id, None)
        if ruling is None:  # our input guardrail did not let this call run: nothing to report
            return ToolGuardrailFunctionOutput.allow()
        reviewed = await areview(self.client, ruling, ctx.tool_name, data.output)
        if reviewed.withheld:
            return self._refuse(reviewed.message, {"warden": "result_withheld"})
        if reviewed.redacted:
            # The SDK's only way to replace an output is reject_content's message.
            return ToolGuardrailFunctionOutput.reject_content(
                as_text(reviewed.output), output_info={"warden": "result_redacted"}
            )
        return ToolGuardrailFunctionOutput.allow(output_info={"warden": "result_allowed"})

    def _invoker(
        self, original: Callable[[ToolContext[Any], str], Awaitable[Any]]
    ) -> Callable[[ToolContext[Any], str], Awaitable[Any]]:
        async def invoke(ctx: ToolContext[Any], arguments: str) -> Any:
            ruling = self.rulings.get(ctx.tool_call_id)
            if (
                ruling is not None
                and ruling.final is not None
                and ruling.final.modified_args is not None
            ):
                arguments = json.dumps(ruling.arguments)
            return await original(ctx, arguments)

        return invoke

    def govern(self, tool: FunctionTool) -> FunctionTool:
        """A copy of ``tool`` with Warden's guardrails (its own input guardrails run first,
        Warden's last, so Warden hears only calls that would run) and an invoker that runs
        a ``modify`` with Warden's arguments."""
        self.substituting.add(tool.name)
        out = copy.copy(tool)
        out.tool_input_guardrails = [*(tool.tool_input_guardrails or []), self.input_guardrail]
        out.tool_output_guardrails = [self.output_guardrail, *(tool.tool_output_guardrails or [])]
        out.on_invoke_tool = self._invoker(tool.on_invoke_tool)
        return out


def governed(
    tools: FunctionTool | Iterable[FunctionTool],
    client: Any,
    *,
    approval_timeout: float = DEFAULT_APPROVAL_TIMEOUT,
    on_deny: Literal["reject", "raise"] = "reject",
) -> Any:
    """Governed copies of ``tools`` (one ``FunctionTool`` → one tool, an iterable → a list)
    sharing one :class:`WardenGuardrails` over ``client``. Raises TypeError for a tool
    that is not a ``FunctionTool`` (hosted tools never run in this process: Warden cannot
    gate them here)."""
    guard = WardenGuardrails(client, approval_timeout=approval_timeout, on_deny=on_deny)
    if isinstance(tools, FunctionTool):
        return guard.govern(tools)
    out = []
    for tool in tools:
        if not isinstance(tool, FunctionTool):
            raise TypeError(f"only FunctionTools can be governed, not {type(tool).__name__}")
        out.append(guard.govern(tool))
    return out
