"""Warden for LangChain and LangGraph (``pip install 'warden[langchain]'``).

:func:`governed` wraps a LangChain tool (any ``BaseTool``, e.g. from ``@tool``) so that
every run is first sent to Warden as ``steps/toolCallRequest`` and its output as
``steps/toolCallResult``. The wrapper is a ``BaseTool`` with the same name, description
and argument schema, so it goes wherever the tool went: ``create_agent(model, tools)``,
LangGraph's ``ToolNode``, ``bind_tools``::

    from langchain.agents import create_agent
    from warden import Client
    from warden.integrations.langchain import governed

    client = Client.connect(...)
    agent = create_agent(model, governed([send_payment, wipe_disk], client))

Mapping (docs/decisions.md 320, 324), in LangChain's idiom for a failed tool:

- deny → the tool does not run; a tool call (``ToolNode``, agents) gets a
  ``ToolMessage(status="error")`` carrying the refusal, so the model reads it and the
  graph goes on; a direct ``tool.invoke({...})`` returns the refusal text, as
  ``handle_tool_error=True`` would. ``on_deny="raise"`` raises :class:`WardenToolRefused`
  (a ``ToolException``) instead;
- ask/defer → wait for the desk up to ``approval_timeout`` seconds, then as decided;
  no answer in time → as deny;
- modify → the tool runs with Warden's arguments (validated again by the tool's schema);
- an output Warden denies (or cannot review) is replaced by the refusal; one it
  redacts (``modify``) by the redacted output.

Only the arguments the model sees (the tool's ``tool_call_schema``) are sent to Warden:
injected arguments (LangGraph state, store, runtime) stay in the process and reach the
tool unchanged. Requires ``langchain-core`` (tested with 1.8; ``create_agent`` is in
``langchain``). Spec: ACS §7, issue 18 item 1.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Literal

from langchain_core.messages import ToolMessage
from langchain_core.tools import BaseTool, ToolException
from pydantic import BaseModel, ConfigDict

from warden.integrations._gate import (
    DEFAULT_APPROVAL_TIMEOUT,
    Review,
    Ruling,
    areview,
    arule,
    as_text,
    review,
    rule,
)

__all__ = ["GovernedTool", "WardenToolRefused", "governed"]


class WardenToolRefused(ToolException):
    """Warden refused a tool call or withheld its output (``on_deny="raise"``);
    the message is the refusal the model would read."""


def _model_arguments(tool: BaseTool) -> set[str] | None:
    """Names of the arguments the model fills (None: every argument)."""
    schema = tool.tool_call_schema
    if isinstance(schema, type) and issubclass(schema, BaseModel):
        return set(schema.model_fields)
    if isinstance(schema, Mapping):
        props = schema.get("properties")
        return set(props) if isinstance(props, Mapping) else None
    return None


class GovernedTool(BaseTool):
    """``inner`` behind Warden (see the module doc). Fields: ``inner`` (the tool),
    ``client`` (``warden.Client`` for sync runs, ``warden.AsyncClient`` or ``Client``
    for async ones), ``approval_timeout`` (seconds; 0 refuses an ask at once),
    ``on_deny`` (``"message"`` or ``"raise"``)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    inner: BaseTool
    client: Any
    approval_timeout: float = DEFAULT_APPROVAL_TIMEOUT
    on_deny: Literal["message", "raise"] = "message"

    def _warden_input(self, tool_input: str | dict[str, Any]) -> dict[str, Any]:
        if isinstance(tool_input, str):
            names = list(self.inner.args)
            return {names[0] if len(names) == 1 else "input": tool_input}
        visible = _model_arguments(self.inner)
        return {k: v for k, v in tool_input.items() if visible is None or k in visible}

    def _run_input(
        self, tool_input: str | dict[str, Any], asked: dict[str, Any], ruling: Ruling
    ) -> str | dict[str, Any]:
        if ruling.final is None or ruling.final.modified_args is None:
            return tool_input
        base = tool_input if isinstance(tool_input, dict) else {}
        hidden = {k: v for k, v in base.items() if k not in asked}
        return {**hidden, **ruling.arguments}

    def _refused(self, message: str, tool_call_id: str | None) -> Any:
        if self.on_deny == "raise":
            raise WardenToolRefused(message)
        if tool_call_id is not None:
            return ToolMessage(
                content=message, name=self.name, tool_call_id=tool_call_id, status="error"
            )
        return message

    def _finish(self, out: Any, reviewed: Review, tool_call_id: str | None) -> Any:
        if reviewed.withheld:
            return self._refused(reviewed.message, tool_call_id)
        if reviewed.redacted:
            if isinstance(out, ToolMessage):
                return out.model_copy(update={"content": as_text(reviewed.output)})
            return reviewed.output
        return out

    @staticmethod
    def _content(out: Any) -> tuple[Any, bool]:
        if isinstance(out, ToolMessage):
            return out.content, out.status == "error"
        return out, False

    def run(self, tool_input: str | dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        """BaseTool.run behind Warden (``tool_call_id`` in ``kwargs`` when the call came
        from a model's tool call)."""
        tool_call_id = kwargs.get("tool_call_id")
        asked = self._warden_input(tool_input)
        ruling = rule(self.client, self.name, asked, approval_timeout=self.approval_timeout)
        if not ruling.runs:
            return self._refused(ruling.message, tool_call_id)
        out = self.inner.run(self._run_input(tool_input, asked, ruling), *args, **kwargs)
        content, is_error = self._content(out)
        reviewed = review(self.client, ruling, self.name, content, is_error=is_error)
        return self._finish(out, reviewed, tool_call_id)

    async def arun(self, tool_input: str | dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        """BaseTool.arun behind Warden."""
        tool_call_id = kwargs.get("tool_call_id")
        asked = self._warden_input(tool_input)
        ruling = await arule(self.client, self.name, asked, approval_timeout=self.approval_timeout)
        if not ruling.runs:
            return self._refused(ruling.message, tool_call_id)
        out = await self.inner.arun(self._run_input(tool_input, asked, ruling), *args, **kwargs)
        content, is_error = self._content(out)
        reviewed = await areview(self.client, ruling, self.name, content, is_error=is_error)
        return self._finish(out, reviewed, tool_call_id)

    def _run(self, *args: Any, **kwargs: Any) -> Any:  # pragma: no cover - run() is overridden
        raise NotImplementedError("GovernedTool runs through run()/arun()")


def governed(
    tools: BaseTool | Iterable[BaseTool],
    client: Any,
    *,
    approval_timeout: float = DEFAULT_APPROVAL_TIMEOUT,
    on_deny: Literal["message", "raise"] = "message",
) -> Any:
    """``tools`` behind Warden: one ``BaseTool`` → one :class:`GovernedTool`, an iterable
    → a list. Raises TypeError for something that is not a ``BaseTool`` (wrap a plain
    function with ``@tool`` first)."""

    def one(tool: BaseTool) -> GovernedTool:
        if not isinstance(tool, BaseTool):
            raise TypeError(f"governed() takes LangChain tools, not {type(tool).__name__}")
        return GovernedTool(
            name=tool.name,
            description=tool.description,
            args_schema=tool.args_schema,
            return_direct=tool.return_direct,
            inner=tool,
            client=client,
            approval_timeout=approval_timeout,
            on_deny=on_deny,
        )

    if isinstance(tools, BaseTool):
        return one(tools)
    return [one(t) for t in tools]
