"""The one mapping every framework adapter shares: Warden's answer → run or refuse.

An adapter asks :func:`rule` / :func:`arule` before a tool runs and :func:`review` /
:func:`areview` after it ran, then renders the outcome in its framework's idiom. The
mapping (issue 18 item 1; docs/decisions.md 320–322):

- ``allow`` → run the tool with the model's arguments;
- ``modify`` → run it with :attr:`Decision.modified_args` (never the original);
- ``deny`` → do not run it; the framework's refusal carries :func:`refusal_text`;
- ``ask`` / ``defer`` → wait for the approval desk up to ``approval_timeout`` seconds
  (:meth:`Client.wait_for_approval`), then apply the final decision; with
  ``approval_timeout=0`` the call is refused at once as "needs approval";
- Warden unreachable or answering garbage (:class:`~warden.errors.WardenError`) → refuse:
  governance fails closed, the tool never runs ungoverned.

The adapters accept a :class:`warden.client.Client` or :class:`warden.client.AsyncClient`:
the async helpers await an async client's coroutines and run a sync client's blocking
calls in a worker thread so a framework's event loop never blocks on Warden.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import math
import threading
import weakref
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import jsonpointer

from warden.client import Decision
from warden.client.decision import APPROVAL_WAIT_TIMEOUT, REDACTED
from warden.errors import WardenError

log = logging.getLogger("warden.integrations")

#: Default seconds an adapter waits for the desk to answer an ``ask`` before refusing.
DEFAULT_APPROVAL_TIMEOUT = 60.0

#: Reason code of a refusal the adapter made because Warden could not be asked.
UNREACHABLE = "warden_unreachable"

T = TypeVar("T")


@dataclass(frozen=True)
class Ruling:
    """What an adapter does with one tool call.

    ``first`` is Warden's first answer (``ask`` for a call that went to the desk),
    ``final`` the one that decides (the desk's outcome, or ``first``); ``arguments`` are
    the ones to run the tool with when :attr:`runs`; ``message`` is the refusal text for
    the model when it does not run. ``final`` is None when Warden could not be asked."""

    first: Decision | None
    final: Decision | None
    arguments: dict[str, Any]
    message: str

    @property
    def runs(self) -> bool:
        return self.final is not None and self.final.allowed

    @property
    def asked(self) -> bool:
        """A human was asked (Warden's first answer was ``ask`` or ``defer``)."""
        return self.first is not None and self.first.needs_approval


@dataclass(frozen=True)
class Review:
    """Warden's answer to a tool's result: ``output`` is what the model may see (the
    result itself, the result after Warden's redactions on ``modify``, or nothing when
    Warden withheld it and the model reads :attr:`message`); ``withheld`` says which."""

    decision: Decision | None
    output: Any
    withheld: bool
    message: str

    @property
    def redacted(self) -> bool:
        """Warden changed the output (``modify``): show :attr:`output`, not the original."""
        return (
            not self.withheld and self.decision is not None and self.decision.decision == "modify"
        )


def refusal_text(decision: Decision | None, tool_name: str, error: Exception | None = None) -> str:
    """The sentence the model reads instead of a tool's output.

    ``Warden denied the call to send_payment: <reasoning> [codes]``; for an unanswered
    ask ``Warden did not run ...: a human must approve it and no approval came``; when
    Warden could not be asked, the error's message and ``warden_unreachable``."""
    if decision is None:
        return (
            f"Warden could not decide the call to {tool_name}, so it was not run "
            f"({error}) [{UNREACHABLE}]"
        )
    if decision.needs_approval or APPROVAL_WAIT_TIMEOUT in decision.reason_codes:
        head = f"Warden did not run {tool_name}: a human must approve it and no approval came"
    else:
        head = f"Warden denied the call to {tool_name}"
    reasoning = decision.reasoning.strip()
    codes = f" [{', '.join(decision.reason_codes)}]" if decision.reason_codes else ""
    return f"{head}: {reasoning}{codes}" if reasoning else f"{head}.{codes}"


def plain(result: Any) -> Any:
    """``result`` as a JSON value for ``steps/toolCallResult``: JSON values pass through,
    pydantic models dump, anything else becomes ``str(result)`` (a tool may return any
    object; Warden's result rules read text and JSON)."""
    if isinstance(result, float) and not math.isfinite(result):
        return str(result)  # NaN and infinities are outside JSON (and RFC 8785)
    if result is None or isinstance(result, str | int | float | bool):
        return result
    dump = getattr(result, "model_dump", None)
    if callable(dump):
        return plain(dump(mode="json"))
    try:
        return json.loads(json.dumps(result, allow_nan=False))
    except (TypeError, ValueError):
        return str(result)


def as_text(value: Any) -> str:
    """A redacted output as the text a framework hands the model (JSON unless a string)."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _is_async(client: Any) -> bool:
    return inspect.iscoroutinefunction(getattr(client, "tool_call_request", None))


_LOCKS: weakref.WeakKeyDictionary[Any, threading.Lock] = weakref.WeakKeyDictionary()
_LOCKS_GUARD = threading.Lock()


def _locked(client: Any, method: str, *args: Any, **kw: Any) -> Any:
    """Call a sync client's ``method`` under that client's lock.

    A ``warden.Client`` is one ACS session whose chain head moves one step at a time and
    is not thread-safe, while frameworks run a turn's tool calls in parallel (LangGraph's
    ``ToolNode`` in a thread pool, the async frameworks through worker threads). Steps of
    one client are therefore serialised here; an approval wait holds the lock, so with a
    sync client other calls of the same session wait for it (an ``AsyncClient`` locks per
    step instead: prefer it in async frameworks)."""
    with _LOCKS_GUARD:
        lock = _LOCKS.get(client)
        if lock is None:
            lock = _LOCKS[client] = threading.Lock()
    with lock:
        return getattr(client, method)(*args, **kw)


def _refused(first: Decision | None, final: Decision, tool: str, args: dict[str, Any]) -> Ruling:
    return Ruling(first, final, args, "" if final.allowed else refusal_text(final, tool))


def _unreachable(tool: str, args: dict[str, Any], exc: WardenError) -> Ruling:
    log.warning("Warden could not decide %s; refusing it: %s", tool, exc)
    return Ruling(None, None, args, refusal_text(None, tool, exc))


def rule(
    client: Any,
    tool_name: str,
    arguments: Mapping[str, Any],
    *,
    approval_timeout: float = DEFAULT_APPROVAL_TIMEOUT,
) -> Ruling:
    """Ask a sync ``client`` about one tool call (``steps/toolCallRequest``) and wait for
    the desk on ``ask``/``defer``; never raises for Warden's failures (refuses).

    Raises TypeError for an AsyncClient: a sync framework path cannot await it."""
    if _is_async(client):
        raise TypeError("this framework path is synchronous: give it a warden.Client")
    args = dict(arguments)
    try:
        first = cast(Decision, _locked(client, "tool_call_request", tool_name, args))
        final = first
        if first.needs_approval and approval_timeout > 0:
            final = cast(
                Decision, _locked(client, "wait_for_approval", first, timeout=approval_timeout)
            )
    except WardenError as exc:
        return _unreachable(tool_name, args, exc)
    return _refused(first, final, tool_name, final.args_for(args))


async def _call(client: Any, method: str, *args: Any, **kw: Any) -> Any:
    if _is_async(client):
        return await cast(Awaitable[Any], getattr(client, method)(*args, **kw))
    return await asyncio.to_thread(_locked, client, method, *args, **kw)


async def arule(
    client: Any,
    tool_name: str,
    arguments: Mapping[str, Any],
    *,
    approval_timeout: float = DEFAULT_APPROVAL_TIMEOUT,
) -> Ruling:
    """:func:`rule` for async frameworks; ``client`` may be a Client or an AsyncClient."""
    args = dict(arguments)
    try:
        first = cast(Decision, await _call(client, "tool_call_request", tool_name, args))
        final = first
        if first.needs_approval and approval_timeout > 0:
            final = cast(
                Decision, await _call(client, "wait_for_approval", first, timeout=approval_timeout)
            )
    except WardenError as exc:
        return _unreachable(tool_name, args, exc)
    return _refused(first, final, tool_name, final.args_for(args))


def redacted_result(result: Any, modifications: Mapping[str, Any]) -> Any:
    """``result`` after a ``modify`` of its ``steps/toolCallResult``: each redaction's JSON
    pointer points into the payload Warden saw (``/outputs/0/value/...``) and is replaced by
    its ``replacement`` or ``[REDACTED]``. Raises ValueError for what cannot be applied to
    one output (``modified_content``, ``parameter_overrides``, a pointer elsewhere)."""
    if "modified_content" in modifications or modifications.get("parameter_overrides"):
        raise ValueError("the modification replaces more than the output")
    doc: dict[str, Any] = {"outputs": [{"value": plain(result)}]}
    for red in modifications.get("redactions") or ():
        path = str(red.get("path", "")) if isinstance(red, Mapping) else ""
        if not path.startswith("/outputs/0/value"):
            raise ValueError(f"redaction path {path!r} is not inside the output")
        replacement = red.get("replacement")
        try:
            pointer = jsonpointer.JsonPointer(path)
            if path == "/outputs/0/value":
                doc["outputs"][0]["value"] = REDACTED if replacement is None else replacement
            elif pointer.resolve(doc, None) is not None:
                pointer.set(doc, REDACTED if replacement is None else replacement)
        except jsonpointer.JsonPointerException as exc:
            raise ValueError(f"redaction path {path!r}: {exc}") from exc
    return doc["outputs"][0]["value"]


def _reviewed(decision: Decision, result: Any, tool_name: str) -> Review:
    if decision.decision == "allow":
        return Review(decision, result, False, "")
    if decision.decision == "modify":
        try:
            return Review(
                decision,
                redacted_result(result, decision.raw.get("modifications") or {}),
                False,
                "",
            )
        except ValueError as exc:
            # Never show an output Warden wanted changed in a way we cannot apply.
            return Review(
                decision,
                None,
                True,
                f"Warden withheld the output of {tool_name}: its redaction cannot be "
                f"applied here ({exc}).",
            )
    return Review(decision, None, True, refusal_text(decision, tool_name))


def _review_unreachable(tool_name: str, exc: WardenError) -> Review:
    log.warning("Warden could not review the result of %s; withholding it: %s", tool_name, exc)
    return Review(None, None, True, refusal_text(None, tool_name, exc))


def review(
    client: Any, ruling: Ruling, tool_name: str, result: Any, *, is_error: bool = False
) -> Review:
    """Report a tool's result (``steps/toolCallResult``) for the call ``ruling`` let run.

    A ``deny`` (or anything but allow/modify) withholds the result from the model; a
    Warden failure withholds it too (fail closed). The result goes as :func:`plain`."""
    assert ruling.final is not None, "review only a call that ran"
    try:
        decision = cast(
            Decision,
            _locked(client, "tool_call_result", ruling.final, plain(result), is_error=is_error),
        )
    except WardenError as exc:
        return _review_unreachable(tool_name, exc)
    return _reviewed(decision, result, tool_name)


async def areview(
    client: Any, ruling: Ruling, tool_name: str, result: Any, *, is_error: bool = False
) -> Review:
    """:func:`review` for async frameworks (Client or AsyncClient)."""
    assert ruling.final is not None, "review only a call that ran"
    try:
        decision = cast(
            Decision,
            await _call(client, "tool_call_result", ruling.final, plain(result), is_error=is_error),
        )
    except WardenError as exc:
        return _review_unreachable(tool_name, exc)
    return _reviewed(decision, result, tool_name)
