"""ACS step payloads (specs/acs.md §7) for what agent frameworks report, shared by the
sync and async clients.

- a tool call → ``steps/toolCallRequest`` (arguments wrapped ``{"value": v}``);
- its result → ``steps/toolCallResult`` (``request_id_ref`` links the request,
  ``exit_status`` ``success``/``failure``, one output);
- a user's prompt → ``steps/userMessage``; session start/end →
  ``steps/sessionStart``/``steps/sessionEnd``.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from warden.client.decision import Decision
from warden.client.errors import WardenClientError
from warden.client.session import AcsSession, Prepared

#: How many tool requests a client remembers for linking their results.
REMEMBERED_REQUESTS = 1024


class StepBuilder:
    """Builds the prepared (signed) steps of one :class:`AcsSession` and remembers the
    tool of each recent tool call request, so that a result can name it."""

    def __init__(self, session: AcsSession) -> None:
        self.session = session
        self._tools: OrderedDict[str, dict[str, Any]] = OrderedDict()

    def tool_call_request(
        self,
        tool_name: str,
        args: dict[str, Any],
        *,
        provider: str | None = None,
        operation: str | None = None,
        capability: str | None = None,
        raw_command: str | None = None,
        metadata: dict[str, Any] | None = None,
        request_id: str | None = None,
    ) -> Prepared:
        if not isinstance(tool_name, str) or not tool_name:
            raise WardenClientError("tool_name must be a non-empty string")
        if not isinstance(args, dict):
            raise WardenClientError("args must be a dict of argument name to value")
        tool: dict[str, Any] = {"name": tool_name}
        if provider is not None:
            tool["provider"] = provider
        payload: dict[str, Any] = {
            "tool": tool,
            "arguments": {str(k): {"value": v} for k, v in args.items()},
        }
        for key, value in (
            ("operation", operation),
            ("capability", capability),
            ("raw_command", raw_command),
        ):
            if value is not None:
                payload[key] = value
        prepared = self.session.prepare(
            "steps/toolCallRequest", payload, metadata, request_id=request_id
        )
        self._tools[prepared.request_id] = {"tool": tool, "operation": operation}
        while len(self._tools) > REMEMBERED_REQUESTS:
            self._tools.popitem(last=False)
        return prepared

    def tool_call_result(
        self,
        request: Decision | str,
        result: Any,
        *,
        is_error: bool = False,
        tool_name: str | None = None,
        duration_ms: int | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> Prepared:
        """``request`` is the Decision of the tool call request (or its request id);
        ``tool_name`` is needed only for a request id this client did not send."""
        rid = request.request_id if isinstance(request, Decision) else request
        known = self._tools.get(rid or "")
        if known is None and isinstance(request, Decision) and request.step is not None:
            known = {"tool": request.step.payload.get("tool"), "operation": None}
        if tool_name is not None:
            known = {"tool": {"name": tool_name}, "operation": None}
        if known is None:
            raise WardenClientError(
                f"no tool call request {rid!r} is known to this client; pass tool_name="
            )
        payload: dict[str, Any] = {
            "tool": known["tool"],
            "exit_status": "failure" if is_error else "success",
            "outputs": [{"value": result}],
        }
        if rid:
            payload["request_id_ref"] = rid
        if known.get("operation"):
            payload["operation"] = known["operation"]
        if duration_ms is not None:
            payload["duration_ms"] = int(duration_ms)
        return self.session.prepare("steps/toolCallResult", payload, metadata)

    def user_prompt(self, text: str, metadata: dict[str, Any] | None = None) -> Prepared:
        return self.session.prepare(
            "steps/userMessage", {"content": [{"type": "text", "value": text}]}, metadata
        )

    def session_start(
        self, payload: dict[str, Any] | None = None, metadata: dict[str, Any] | None = None
    ) -> Prepared:
        return self.session.prepare("steps/sessionStart", dict(payload or {}), metadata)

    def session_end(
        self, reason: str = "completed", metadata: dict[str, Any] | None = None
    ) -> Prepared:
        return self.session.prepare("steps/sessionEnd", {"reason": reason}, metadata)

    def resubmit(self, decision: Decision) -> Prepared:
        """The same step as ``decision`` answered, with a new request id and nonce
        (Warden's rule after approval, :mod:`warden.gates.approval`)."""
        if decision.step is None:
            raise WardenClientError("this Decision carries no step to resubmit")
        step = decision.step
        prepared = self.session.prepare(step.method, step.payload, step.metadata)
        known = self._tools.get(decision.request_id or "")
        if known is not None:
            self._tools[prepared.request_id] = known
        return prepared
