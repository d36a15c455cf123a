"""Claude Code command hooks → Warden (``warden hook claude-code``).

Claude Code runs the hook command once per event with the event's JSON on stdin
(https://code.claude.com/docs/en/hooks): common members ``session_id``,
``transcript_path``, ``cwd``, ``permission_mode``, ``hook_event_name``, then per event
``tool_name``/``tool_input``/``tool_use_id`` (PreToolUse), plus ``tool_response``
(PostToolUse), ``prompt`` (UserPromptSubmit), ``source`` (SessionStart), ``reason``
(SessionEnd). The hook answers with JSON on stdout and exit code 0, or exit code 2 with
a message on stderr (a blocking error).

Mapping (decisions 302–304):

============== ======================= ============================================
Claude event   ACS step                Warden decision → hook output
============== ======================= ============================================
PreToolUse     steps/toolCallRequest   deny → ``permissionDecision: deny``;
                                       modify → ``updatedInput`` with ``ask`` (or
                                       ``allow`` under auto-approve); ask/defer →
                                       wait for the desk up to ``wait`` s, then deny
                                       naming the task (or ``ask`` under
                                       ``on_ask="prompt"``); allow → no decision
                                       (Claude Code's own permissions apply) or
                                       ``allow`` under auto-approve
PostToolUse    steps/toolCallResult    deny/modify → ``decision: block`` with reason
UserPromptSub. steps/userMessage       anything but allow → ``decision: block``
SessionStart   steps/sessionStart      deny → ``continue: false``
SessionEnd     steps/sessionEnd        recorded; Claude Code cannot block it
============== ======================= ============================================

Claude Code's ``session_id`` (a UUID) is the ACS session id; ``tool_use_id`` fixes the
PreToolUse request id (UUIDv5) so the PostToolUse process can name it in
``request_id_ref``. A failure to reach Warden refuses whatever can be refused.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from warden.client.decision import Decision
from warden.client.session import SESSION_NAMESPACE
from warden.client.sync import Client
from warden.errors import WardenError

PRE_TOOL_USE = "PreToolUse"
POST_TOOL_USE = "PostToolUse"
USER_PROMPT_SUBMIT = "UserPromptSubmit"
SESSION_START = "SessionStart"
SESSION_END = "SessionEnd"
HANDLED = (PRE_TOOL_USE, POST_TOOL_USE, USER_PROMPT_SUBMIT, SESSION_START, SESSION_END)

#: ``params.metadata.platform`` of every step this adapter sends.
PLATFORM = "claude-code"

#: Exit codes of Claude Code's hook contract.
EXIT_OK = 0
EXIT_BLOCK = 2


class HookInputError(ValueError):
    """The hook's stdin is not a Claude Code hook event."""


@dataclass(frozen=True)
class HookOptions:
    """How Warden's answers are mapped.

    - ``wait``: seconds to wait for the desk on an ask before refusing (0: refuse at
      once, naming the task; the model may retry the same call once it is approved);
    - ``poll``: seconds between resubmissions while waiting;
    - ``on_ask``: ``"desk"`` (wait, then deny) or ``"prompt"`` (Claude Code's own
      ``ask``: the local user decides; the desk task stays open and is not granted);
    - ``auto_approve``: on allow/modify say ``allow`` (skips Claude Code's permission
      prompt) instead of leaving the call to Claude Code's own permission rules.
    """

    wait: float = 0.0
    poll: float = 2.0
    on_ask: str = "desk"
    auto_approve: bool = False


@dataclass(frozen=True)
class HookAnswer:
    """What the command prints (``output``, a JSON object, or None for nothing) and
    its exit code; ``stderr`` is a message for exit code 2."""

    output: dict[str, Any] | None
    exit_code: int = EXIT_OK
    stderr: str = ""


def parse_event(doc: Any) -> dict[str, Any]:
    """Check the minimum every handled event needs; raise :class:`HookInputError`."""
    if not isinstance(doc, dict):
        raise HookInputError("the hook input is not a JSON object")
    event = doc.get("hook_event_name")
    if not isinstance(event, str) or not event:
        raise HookInputError("the hook input has no hook_event_name")
    if event in HANDLED and not (isinstance(doc.get("session_id"), str) and doc["session_id"]):
        raise HookInputError(f"the {event} input has no session_id")
    if event in (PRE_TOOL_USE, POST_TOOL_USE):
        if not isinstance(doc.get("tool_name"), str) or not doc["tool_name"]:
            raise HookInputError(f"the {event} input has no tool_name")
        if not isinstance(doc.get("tool_input"), dict):
            # Missing is refused too: a call Warden cannot see is never decided as `{}`.
            raise HookInputError(f"the {event} input's tool_input is missing or not an object")
    if event == USER_PROMPT_SUBMIT and not isinstance(doc.get("prompt"), str):
        raise HookInputError("the UserPromptSubmit input has no prompt")
    return doc


def tool_request_id(session_id: str, tool_use_id: Any) -> str | None:
    """The ACS request id of a tool use's first PreToolUse step (UUIDv5 of the Claude
    session and ``tool_use_id``), or None without a ``tool_use_id``."""
    if not isinstance(tool_use_id, str) or not tool_use_id:
        return None
    return str(uuid.uuid5(SESSION_NAMESPACE, f"claude-code:{session_id}:{tool_use_id}"))


def reason_text(d: Decision) -> str:
    """One line for Claude and the user: Warden's reasoning, the rules, the task."""
    parts = [f"Warden: {d.reasoning or d.decision}"]
    if d.rule_ids:
        parts.append(f"(rules: {', '.join(d.rule_ids)})")
    if d.task_url or d.task_id:
        parts.append(f"[approval task {d.task_url or d.task_id}]")
    return " ".join(parts)


def _pre(decision: str | None, reason: str, updated: dict[str, Any] | None = None) -> HookAnswer:
    out: dict[str, Any] = {"hookEventName": PRE_TOOL_USE}
    if decision is not None:
        out["permissionDecision"] = decision
    out["permissionDecisionReason"] = reason
    if updated is not None:
        out["updatedInput"] = updated
    return HookAnswer({"hookSpecificOutput": out})


def _block(reason: str) -> HookAnswer:
    return HookAnswer({"decision": "block", "reason": reason})


def refusal(event: str, message: str) -> HookAnswer:
    """The fail-closed answer for ``event`` when Warden gave no decision."""
    text = f"Warden could not decide, so this is refused: {message}"
    if event == PRE_TOOL_USE:
        return _pre("deny", text)
    if event in (POST_TOOL_USE, USER_PROMPT_SUBMIT):
        return _block(text)
    if event == SESSION_START:
        return HookAnswer({"continue": False, "stopReason": text})
    return HookAnswer({}, stderr=text)  # SessionEnd: nothing left to refuse


def handle(event: dict[str, Any], client: Client, options: HookOptions) -> HookAnswer:
    """Send ``event`` (already :func:`parse_event`-checked) to Warden and map the
    answer. Raises :class:`~warden.errors.WardenError` when Warden gives no decision
    (the caller answers :func:`refusal`)."""
    name = event["hook_event_name"]
    handler = _HANDLERS.get(name)
    if handler is None:
        return HookAnswer({})  # an event Warden does not govern
    return handler(event, client, options)


def _pre_tool_use(event: dict[str, Any], client: Client, options: HookOptions) -> HookAnswer:
    args = dict(event.get("tool_input") or {})
    d = client.tool_call_request(
        event["tool_name"],
        args,
        provider=PLATFORM,
        raw_command=args["command"] if isinstance(args.get("command"), str) else None,
        request_id=tool_request_id(event["session_id"], event.get("tool_use_id")),
    )
    if d.needs_approval and options.on_ask == "prompt":
        return _pre("ask", reason_text(d) + " The desk task stays open.")
    if d.needs_approval and options.wait > 0:
        d = client.wait_for_approval(d, timeout=options.wait, poll=options.poll)
    if d.needs_approval:
        return _pre(
            "deny",
            reason_text(d) + " A human must approve this on Warden's desk; once approved, "
            "retry the identical call.",
        )
    if d.denied:
        return _pre("deny", reason_text(d))
    if d.decision == "modify":
        # Claude Code applies updatedInput with allow or ask; without auto-approve the
        # user sees the changed input (decision 302).
        return _pre("allow" if options.auto_approve else "ask", reason_text(d), d.args_for(args))
    return _pre("allow" if options.auto_approve else None, reason_text(d))


def _post_tool_use(event: dict[str, Any], client: Client, options: HookOptions) -> HookAnswer:
    response = event.get("tool_response")
    failed = isinstance(response, dict) and (
        response.get("is_error") is True or response.get("success") is False
    )
    rid = tool_request_id(event["session_id"], event.get("tool_use_id"))
    d = client.tool_call_result(rid or "", response, is_error=failed, tool_name=event["tool_name"])
    if d.decision == "allow":
        return HookAnswer({})
    return _block(reason_text(d) + " The tool's output is withheld by policy; do not use it.")


def _user_prompt(event: dict[str, Any], client: Client, options: HookOptions) -> HookAnswer:
    d = client.user_prompt(event["prompt"])
    if d.decision == "allow":
        return HookAnswer({})
    # Claude Code cannot rewrite a prompt: a modify is refused like a deny.
    return _block(reason_text(d))


def _session_start(event: dict[str, Any], client: Client, options: HookOptions) -> HookAnswer:
    context = {k: event[k] for k in ("source", "cwd", "permission_mode") if event.get(k)}
    d = client.session_start({"platform_context": context} if context else None)
    if d.allowed:
        return HookAnswer({})
    return HookAnswer({"continue": False, "stopReason": reason_text(d)})


def _session_end(event: dict[str, Any], client: Client, options: HookOptions) -> HookAnswer:
    client.session_end("completed")
    return HookAnswer({})


_HANDLERS: dict[str, Callable[[dict[str, Any], Client, HookOptions], HookAnswer]] = {
    PRE_TOOL_USE: _pre_tool_use,
    POST_TOOL_USE: _post_tool_use,
    USER_PROMPT_SUBMIT: _user_prompt,
    SESSION_START: _session_start,
    SESSION_END: _session_end,
}


def run(doc: Any, connect: Callable[[str], Client], options: HookOptions) -> HookAnswer:
    """The whole hook: check the input, connect (``connect(session_id)``), decide,
    map. Never raises for Warden's failures: they become :func:`refusal`. Input that
    is not a hook event is exit code 2 (Claude Code blocks the step it came from)."""
    try:
        event = parse_event(doc)
    except HookInputError as exc:
        return HookAnswer(None, EXIT_BLOCK, f"warden hook: {exc}")
    if event["hook_event_name"] not in HANDLED:
        return HookAnswer({})
    try:
        with connect(event["session_id"]) as client:
            return handle(event, client, options)
    except WardenError as exc:
        return refusal(event["hook_event_name"], exc.message)
    except Exception as exc:  # noqa: BLE001 - a crash would exit 1, which Claude Code ignores
        return refusal(event["hook_event_name"], f"internal error ({type(exc).__name__})")
