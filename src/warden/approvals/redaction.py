"""What an approver is shown of an action a modify rule redacts.

A step can both ask and redact (the default bundle's ``send_money`` with a ``token``
argument: ``ask-before-payment`` and ``redact-token`` fire together). The grant stays
bound to the exact action as received (:func:`warden.approvals.binding.action_hash`
covers the secret), but the task stores and every surface shows the action with each
redaction applied: the desk page, ``/v1/approvals``, ``warden approvals``, webhooks
and the desk's audit chain never carry the value the tool itself will not receive.

A redaction ``path`` is a JSON pointer into the step's payload (ACS §6,
``modifications.json``); the bound action holds the argument *values*, so the
pointer is mapped onto it:

- native hooks: ``/arguments/<name>/value[/…]`` → ``arguments.<name>[…]``;
  ``/arguments/<name>`` → the whole value; ``/arguments`` → every value;
- wrapped MCP: ``/params/arguments/<name>[/…]`` → ``arguments.<name>[…]``;
  ``/params/arguments`` → every value;
- ``/raw_command`` → ``raw_command``.

Other pointers name nothing the action holds (e.g. an argument's ``provenance``) and
change nothing shown.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

#: ACS §6: a redaction without ``replacement`` writes this.
REDACTED = "[REDACTED]"


def _segments(pointer: str) -> list[str]:
    if not pointer.startswith("/"):
        return []
    return [s.replace("~1", "/").replace("~0", "~") for s in pointer[1:].split("/")]


def _target(segments: list[str], *, wrapped_mcp: bool) -> list[str] | None:
    """The pointer's place in the bound action, or None when the action does not hold it."""
    if segments == ["raw_command"]:
        return ["raw_command"]
    if wrapped_mcp:
        if segments[:2] != ["params", "arguments"]:
            return None
        return ["arguments", *segments[2:]]
    if not segments or segments[0] != "arguments":
        return None
    if len(segments) <= 2:
        return segments
    if segments[2] != "value":
        return None  # the argument's provenance or another sibling of its value
    return ["arguments", segments[1], *segments[3:]]


def _replace(node: Any, path: list[str], value: str) -> None:
    for i, part in enumerate(path):
        last = i == len(path) - 1
        if isinstance(node, list):
            if not part.isdigit() or int(part) >= len(node):
                return
            if last:
                node[int(part)] = value
                return
            node = node[int(part)]
        elif isinstance(node, dict):
            if part not in node:
                return
            if last:
                node[part] = value
                return
            node = node[part]
        else:
            return


def shown_action(
    action: dict[str, Any], redactions: Sequence[dict[str, Any]], *, wrapped_mcp: bool
) -> dict[str, Any]:
    """A copy of the bound ``action`` (``{method, name, arguments[, raw_command]}``) with
    every redaction applied (``replacement`` or ``[REDACTED]``); ``action`` itself is not
    changed. ``wrapped_mcp`` for ``protocols/MCP/*`` steps (pointers into the MCP
    message)."""
    out = copy.deepcopy(action)
    for red in redactions:
        replacement = red.get("replacement")
        value = REDACTED if replacement is None else str(replacement)
        target = _target(_segments(str(red.get("path", ""))), wrapped_mcp=wrapped_mcp)
        if target is None:
            continue
        if target == ["arguments"]:
            args = out.get("arguments")
            if isinstance(args, dict):
                out["arguments"] = {name: value for name in args}
            continue
        _replace(out, target, value)
    return out
