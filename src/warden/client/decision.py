"""The :class:`Decision` a client method returns, built from an ACS ``AcsResult``.

ACS answers are specs/acs.md §5 (``decision``, ``reasoning``, ``reason_codes``,
``policy_references``, ``modifications``, ``ask_details``/``defer_details``,
``chain_hash``). Warden's approval desk adds ``task_id`` and ``task_url`` to the
details of an ``ask`` (or a ``defer`` resolved by a human), see
:mod:`warden.gates.approval`.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import jsonpointer

#: What a redaction writes when the bundle names no replacement (ACS modifications.json).
REDACTED = "[REDACTED]"

#: Reason code of the Decision :meth:`Client.wait_for_approval` returns when no human
#: answered in time (decision 301): it is a deny made by the client, not by Warden.
APPROVAL_WAIT_TIMEOUT = "approval_wait_timeout"
#: Reason code of a ``modify`` the client cannot apply to the arguments (decision 300).
MODIFICATION_NOT_APPLICABLE = "modification_not_applicable"

DECISIONS = frozenset({"allow", "modify", "deny", "ask", "defer"})


@dataclass(frozen=True)
class Step:
    """A step as sent, kept so that it can be resubmitted after approval:
    the ACS ``method``, its ``payload`` and the extra ``metadata`` members."""

    method: str
    payload: dict[str, Any]
    metadata: dict[str, Any]


@dataclass(frozen=True)
class Decision:
    """Warden's answer to one step.

    - ``decision``: ``allow`` | ``modify`` | ``deny`` | ``ask`` | ``defer``;
    - ``reasoning``: why, for a human; ``reason_codes``: machine codes
      (``approval_pending``, ``redaction_applied``, ``approval_wait_timeout`` …);
    - ``modified_args``: for a ``modify`` of a tool call, the arguments to run the tool
      with (the client applied ``parameter_overrides`` and ``redactions``); else None;
    - ``task_id``/``task_url``: the approval task of an ``ask`` (or human ``defer``);
    - ``rule_ids``: the bundle rules that fired; ``chain_hash``: the session's audit
      chain head after this step; ``request_id``: the step's ACS request id;
    - ``raw``: the ACS result object as received (``{}`` for a client-made deny);
    - ``step``: what was sent, for :meth:`Client.wait_for_approval`.
    """

    decision: str
    reasoning: str = ""
    reason_codes: tuple[str, ...] = ()
    modified_args: dict[str, Any] | None = None
    task_id: str | None = None
    task_url: str | None = None
    rule_ids: tuple[str, ...] = ()
    chain_hash: str | None = None
    request_id: str | None = None
    raw: dict[str, Any] = field(default_factory=dict)
    step: Step | None = field(default=None, repr=False, compare=False)

    @property
    def allowed(self) -> bool:
        """The step may proceed: ``allow``, or ``modify`` (then run it with
        :meth:`args_for`, never with the original arguments)."""
        return self.decision in ("allow", "modify")

    @property
    def denied(self) -> bool:
        return self.decision == "deny"

    @property
    def needs_approval(self) -> bool:
        """``ask`` or ``defer``: a human (the desk) must answer first."""
        return self.decision in ("ask", "defer")

    def args_for(self, original: dict[str, Any]) -> dict[str, Any]:
        """The arguments to run the tool with: ``modified_args`` on a ``modify``,
        else ``original``."""
        return self.modified_args if self.modified_args is not None else original


def client_deny(reasoning: str, code: str, step: Step | None = None) -> Decision:
    """A deny made by the client itself (no Warden result behind it)."""
    return Decision("deny", reasoning, (code,), step=step)


def decision_of(result: dict[str, Any], step: Step) -> Decision:
    """The Decision for a verified ACS ``result`` answering ``step``.

    A ``modify`` of a tool call whose modifications cannot be applied to its arguments
    (``modified_content``, or a pointer outside ``/arguments``) becomes a client deny
    with ``modification_not_applicable``: the tool must not run unmodified.
    """
    verdict = str(result.get("decision", ""))
    if verdict not in DECISIONS:
        return client_deny(f"Warden answered an unknown decision {verdict!r}.", "bad_decision")
    details = result.get("ask_details") or result.get("defer_details") or {}
    modified: dict[str, Any] | None = None
    if verdict == "modify" and step.method == "steps/toolCallRequest":
        try:
            modified = apply_modifications(step.payload, result.get("modifications") or {})
        except ValueError as exc:
            return client_deny(
                f"Warden asked to modify the call in a way the client cannot apply ({exc}).",
                MODIFICATION_NOT_APPLICABLE,
                step,
            )
    return Decision(
        decision=verdict,
        reasoning=str(result.get("reasoning") or ""),
        reason_codes=tuple(str(c) for c in result.get("reason_codes") or ()),
        modified_args=modified,
        task_id=_str_or_none(details.get("task_id")),
        task_url=_str_or_none(details.get("task_url")),
        rule_ids=tuple(
            str(r["rule_id"])
            for r in result.get("policy_references") or ()
            if isinstance(r, dict) and r.get("rule_id")
        ),
        chain_hash=_str_or_none(result.get("chain_hash")),
        request_id=_str_or_none(result.get("request_id")),
        raw=result,
        step=step,
    )


def _str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def apply_modifications(payload: dict[str, Any], mods: dict[str, Any]) -> dict[str, Any]:
    """The plain arguments of a ``steps/toolCallRequest`` ``payload`` after ``mods``.

    ``parameter_overrides`` replace ``/arguments/<name>`` (the value given is the new
    argument value); ``redactions`` replace the member at their JSON pointer (into the
    payload, e.g. ``/arguments/password/value``) with ``replacement`` or
    ``[REDACTED]``. Raises ValueError for ``modified_content`` or a pointer outside
    ``/arguments``.
    """
    if "modified_content" in mods:
        raise ValueError("modified_content replaces the whole step, not its arguments")
    doc = copy.deepcopy(payload)
    arguments = doc.setdefault("arguments", {})
    for name, value in (mods.get("parameter_overrides") or {}).items():
        arguments[str(name)] = {"value": copy.deepcopy(value)}
    for red in mods.get("redactions") or ():
        path = str(red.get("path", ""))
        if not path.startswith("/arguments/"):
            raise ValueError(f"redaction path {path!r} is not under /arguments")
        replacement = red.get("replacement")
        try:
            pointer = jsonpointer.JsonPointer(path)
            if pointer.resolve(doc, None) is None:
                continue  # an absent member: nothing to redact
            pointer.set(doc, REDACTED if replacement is None else replacement)
        except jsonpointer.JsonPointerException as exc:
            raise ValueError(f"redaction path {path!r}: {exc}") from exc
    return {
        name: wrapped["value"] if isinstance(wrapped, dict) and "value" in wrapped else wrapped
        for name, wrapped in arguments.items()
    }
