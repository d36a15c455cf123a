"""What a Warden-chain wire records about one policy decision, so that ``warden whatif``
can rebuild its request and compare (issue 19; docs/decisions.md 600–609).

The spend wire's quotes, KLA's action requests and AdCP's intent checks are decided by
the Guardian on a request the wire builds (:func:`warden.spend.asks.quote_request`,
:func:`warden.kla.asks.action_request`, :func:`warden.adcp.checks.check_request`). Their
audit entries carry, beside what they always recorded, one additive object
``decided``: ``caller`` (the API key's identity, :func:`caller_record`; the request's CEL
``agent`` and ``metadata.principal`` come from it), ``verdict`` (:func:`verdict_record`,
the ACS entry's verdict shape: decision, reason codes, policy references, bundle) and the
wire's own inputs (a quote's ``payload``; a check's ``request`` and ``plan``). It is
written in the entry's own transaction, with the entry.
"""

from __future__ import annotations

from typing import Any

from warden.core.types import Verdict
from warden.identity.api_keys import Identity, Role

#: The reason code the desk's answer, noted in ``policy_data.approval``, adds to a
#: recorded verdict (the REST wires' desk ask does not rewrite the verdict).
_APPROVAL_CODES = {
    "granted": "approval_granted",
    "pending": "approval_pending",
    "denied": "approval_denied",
    "expired": "approval_expired",
    "invalid": "grant_invalid",
}


def caller_record(who: Identity) -> dict[str, Any]:
    """The identity a wire decided for: ``{key_id, principal, role, groups, budgets,
    owner}`` (JSON)."""
    return {
        "key_id": who.key_id,
        "principal": who.principal,
        "role": who.role.value,
        "groups": list(who.groups),
        "budgets": list(who.budgets),
        "owner": who.owner,
    }


def identity_of(caller: dict[str, Any]) -> Identity:
    """The :class:`Identity` :func:`caller_record` recorded. Raises ValueError (or
    KeyError/TypeError) for a record that is not one."""
    return Identity(
        key_id=str(caller["key_id"]),
        principal=str(caller["principal"]),
        role=Role(caller["role"]),
        groups=tuple(str(g) for g in caller.get("groups") or ()),
        budgets=tuple(str(b) for b in caller.get("budgets") or ()),
        owner=caller.get("owner"),
    )


def verdict_record(verdict: Verdict, *, refused: str | None = None) -> dict[str, Any]:
    """A verdict as an ACS entry records one: ``decision``, ``reason_codes`` (with the
    desk's answer when the desk ask noted one), ``policy_references``, ``bundle``, and
    ``spend.refused`` when a budget refused what policy allowed."""
    codes = list(verdict.reason_codes)
    approval = verdict.policy_data.get("approval")
    if isinstance(approval, dict):
        code = _APPROVAL_CODES.get(str(approval.get("outcome")))
        if code is not None and code not in codes:
            codes.append(code)
    out: dict[str, Any] = {
        "decision": verdict.decision.value,
        "reason_codes": codes,
        "policy_references": [r.to_wire() for r in verdict.policy_references],
        "bundle": verdict.bundle.to_wire() if verdict.bundle is not None else None,
    }
    if refused is not None:
        out["spend"] = {"refused": refused}
    return out


__all__ = ["caller_record", "identity_of", "verdict_record"]
