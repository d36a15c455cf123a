"""``comply_test_controller``: the AdCP compliance runner's seeding hook, for sandbox
accounts only (specs/adcp-runner.md; /work/notes/adcp-runner-findings.md §2).

Scenarios: ``list_scenarios``; ``seed_plan`` (exactly a ``sync_plans`` of one plan for
the caller — it grants nothing ``sync_plans`` does not); ``seed_product``,
``seed_pricing_option`` and ``seed_media_buy`` are acknowledged and change nothing
(a governance agent has no catalog or media buys). A request whose ``account.sandbox``
is not ``true`` is ``FORBIDDEN``. Answers are the controller's own shape
(``{success: true}`` or ``{success: false, error, error_detail}``) inside the envelope.
"""

from __future__ import annotations

from typing import Any

from warden.adcp.errors import AdcpError
from warden.adcp.plan_sync import sync_plans
from warden.adcp.state import AdcpState, Answer, Call
from warden.wire.adcp.schemas import adcp_schemas

SCENARIOS = ["seed_plan", "seed_product", "seed_pricing_option", "seed_media_buy"]
ACKNOWLEDGED = frozenset({"seed_product", "seed_pricing_option", "seed_media_buy"})


class ControllerError(AdcpError):
    """A controller refusal: ``error`` is the controller's code (FORBIDDEN …)."""

    def __init__(self, error: str, detail: str, code: str = "INVALID_REQUEST") -> None:
        super().__init__(code, detail)
        self.error = error


def comply_test_controller(st: AdcpState, call: Call, tx: Any) -> Answer:
    req = call.request
    account = req.get("account")
    if not isinstance(account, dict) or account.get("sandbox") is not True:
        raise ControllerError(
            "FORBIDDEN",
            "comply_test_controller serves sandbox accounts only (account.sandbox: true)",
            code="PERMISSION_DENIED",
        )
    scenario = req.get("scenario")
    if scenario == "list_scenarios":
        return Answer({"success": True, "scenarios": SCENARIOS})
    params = req.get("params") if isinstance(req.get("params"), dict) else {}
    if scenario in ACKNOWLEDGED:
        return Answer({"success": True, "message": f"{scenario} acknowledged (nothing to seed)"})
    if scenario != "seed_plan":
        raise ControllerError("UNKNOWN_SCENARIO", f"unknown scenario {scenario!r}")
    fixture = params.get("fixture") if isinstance(params, dict) else None
    plan_id = params.get("plan_id") if isinstance(params, dict) else None
    if not isinstance(plan_id, str) or not isinstance(fixture, dict):
        raise ControllerError("INVALID_PARAMS", "seed_plan needs params.plan_id and params.fixture")
    plan = {"plan_id": plan_id, **fixture}
    request = {"idempotency_key": "seed_plan_" + "0" * 16, "plans": [plan]}
    validator = adcp_schemas().validator("governance/sync-plans-request.json")
    if not validator.is_valid(request):
        first = next(iter(validator.iter_errors(request)))
        raise ControllerError("INVALID_PARAMS", f"the seeded plan is invalid: {first.message}")
    sync_plans(st, Call(call.who, {"plans": [plan]}, call.now), tx)
    return Answer({"success": True, "message": f"plan {plan_id} seeded"})
