"""The Warden-chain wires' recorded decisions, rebuilt for replay (docs/decisions.md 600).

A spend quote, a KLA action request and an AdCP intent ``check_governance`` are decided
by the Guardian on a request their wire builds, and recorded on a Warden-authored chain
with an additive ``decided`` object (:mod:`warden.ledger.decided`): the caller, the
verdict, and the inputs the wire's own builder reads. :class:`WireSteps` turns those
entries back into the request with that same builder:

* ``warden/spend.policy`` (a quote policy did not allow), ``warden/spend.reserve`` and
  ``warden/spend.refused`` carrying ``decided`` (a quote policy allowed; ``refused``: the
  budget then had no room, marked ``budget``) → :func:`warden.spend.asks.quote_request`
  on the recorded quote body;
* ``warden/kla.policy_decision`` → :func:`warden.kla.asks.action_request` on the record of
  the ``warden/kla.action_request`` entry written just before it (same transaction);
* ``warden/adcp.check`` → :func:`warden.adcp.checks.check_request` on the recorded
  request and plan (``decided`` null: an execution check or a plan's own denial, which
  policy was not asked about).

As the pipeline does, the request's CEL ``agent`` is the caller's facts. An entry written
before ``decided`` existed cannot be rebuilt faithfully (no caller facts, and for KLA no
Guardian effect) and is skipped with the reason ``<method>:not_recorded``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from warden.core.types import ActionRequest
from warden.ledger.decided import identity_of

#: Wire name → the policy method its decisions are made under.
METHODS = {"spend": "spend/quote", "kla": "kla/action", "adcp": "adcp/check_governance"}


@dataclass(frozen=True, slots=True)
class WireStep:
    """One recorded decision of a Warden-chain wire: the request rebuilt, the recorded
    verdict (an ACS entry's ``verdict`` shape) and the caller's principal."""

    wire: str
    request: ActionRequest
    verdict: dict[str, Any]
    agent: str


class WireSteps:
    """Reads Warden-chain entries in log order. :meth:`step` gives a :class:`WireStep`,
    a skip reason (a decision entry that cannot be rebuilt), or None (not a decision)."""

    def __init__(self) -> None:
        # KLA: the action request record of each execution's last request entry, by id.
        self._kla: dict[tuple[str, str], dict[str, Any]] = {}

    def step(self, step_type: str, entry: dict[str, Any]) -> WireStep | str | None:
        kind, _, event = step_type.removeprefix("warden/").partition(".")
        detail = entry.get(kind)
        if not isinstance(detail, dict):
            return None
        try:
            if kind == "spend":
                return self._spend(event, detail)
            if kind == "kla":
                return self._kla_step(event, detail)
            if kind == "adcp" and event == "check":
                return self._adcp(detail)
        except (KeyError, TypeError, ValueError, ArithmeticError):
            return f"{METHODS[kind]}:unreadable"
        return None

    @staticmethod
    def _spend(event: str, detail: dict[str, Any]) -> WireStep | str | None:
        from warden.spend.asks import quote_request
        from warden.spend.money import parse_amount

        if event not in ("policy", "reserve", "refused"):
            return None
        decided = detail.get("decided")
        if not isinstance(decided, dict):
            # A hold or refusal without it is no quote's decision (an AdCP plan hold, a
            # quote without policy, or one recorded before decision 600).
            return "spend/quote:not_recorded" if event == "policy" else None
        who = identity_of(decided["caller"])
        payload = decided["payload"]
        amount = parse_amount(payload["amount"], allow_zero=False)
        request = quote_request(
            who,
            payload,
            str(payload["budgetId"]),
            amount,
            str(payload["currency"]),
            str(payload["action"]),
        )
        verdict = dict(decided["verdict"])
        if event == "refused":
            # Policy allowed; the budget refused the hold (the ACS path's spend gate).
            gate = str(detail.get("gate") or "budget_exceeded")
            verdict["decision"] = "deny"
            verdict["reason_codes"] = [*verdict.get("reason_codes", ()), gate]
            verdict["spend"] = {"refused": gate}
        return WireStep("spend", replace(request, agent=who.facts()), verdict, who.principal)

    def _kla_step(self, event: str, detail: dict[str, Any]) -> WireStep | str | None:
        from warden.kla.asks import action_request

        record = detail.get("record")
        if not isinstance(record, dict):
            return None
        # An action request is the pair (principal, id) (decision 970).
        key = (str(detail.get("principal")), str(record.get("action_request_id")))
        if event == "action_request":
            self._kla[key] = record
            return None
        if event != "policy_decision":
            return None
        request_record = self._kla.pop(key, None)
        decided = detail.get("decided")
        if not isinstance(decided, dict):
            return "kla/action:not_recorded"
        if request_record is None:
            return "kla/action:no_request"
        who = identity_of(decided["caller"])
        request = action_request(request_record, who)
        return WireStep("kla", request, dict(decided["verdict"]), who.principal)

    @staticmethod
    def _adcp(detail: dict[str, Any]) -> WireStep | str | None:
        from warden.adcp.checks import check_request

        if "decided" not in detail:
            return "adcp/check_governance:not_recorded"
        decided = detail["decided"]
        if decided is None:
            return "adcp/check_governance:no_policy_decision"
        who = identity_of(decided["caller"])
        plan = decided["plan"]
        request = check_request(
            who, decided["request"], str(plan["plan_id"]), str(plan["currency"])
        )
        return WireStep(
            "adcp", replace(request, agent=who.facts()), dict(decided["verdict"]), who.principal
        )


__all__ = ["METHODS", "WireStep", "WireSteps"]
