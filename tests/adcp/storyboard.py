"""A small driver for the AdCP compliance storyboards (YAML, compliance 3.2.0-beta.0)
against Warden's REST binding.

Steps whose ``agent`` is ``governance`` (or whose task Warden serves) are sent to Warden
as written: ``$context.<name>`` and ``$generate:uuid_v4#<name>`` are resolved, and every
validation the step lists (``response_schema``, ``field_present``, ``field_absent``,
``field_value``, ``field_equals_context``, ``error_code``) is asserted, as are its
``context_outputs``. Steps of the ``sales`` agent go to :class:`Seller`, a test seller
that verifies the governance token Warden issued with Warden's seller-side verifier
(:mod:`warden.adcp.token_verifier`, fed the JWKS fetched from the live server) and, where
the storyboard says the seller consults governance, calls Warden itself.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from adcp_helpers import COMPLIANCE, Rest

from warden.adcp.token_verifier import (
    GovernanceTokenRejected,
    GovernanceTokenVerifier,
    InMemoryJtiReplayStore,
    StaticJwks,
)

SELLER_URL = "https://seller.example.com"
WARDEN_TASKS = {
    "get_adcp_capabilities",
    "sync_plans",
    "check_governance",
    "report_plan_outcome",
    "report_plan_adjustment",
    "get_plan_audit_logs",
    "get_task_status",
}
_PATH = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


def load(rel: str) -> dict[str, Any]:
    doc = yaml.safe_load((COMPLIANCE / rel).read_text())
    assert isinstance(doc, dict)
    return doc


def lookup(obj: Any, path: str) -> Any:
    """``plans[0].plan_id`` in ``obj``; KeyError when absent."""
    for name, index in _PATH.findall(path):
        if index:
            if not isinstance(obj, list) or int(index) >= len(obj):
                raise KeyError(path)
            obj = obj[int(index)]
        else:
            if not isinstance(obj, dict) or name not in obj:
                raise KeyError(path)
            obj = obj[name]
    return obj


@dataclass
class Run:
    """One storyboard run: its context, generated ids and the step results."""

    context: dict[str, Any] = field(default_factory=dict)
    generated: dict[str, str] = field(default_factory=dict)
    replies: dict[str, dict[str, Any]] = field(default_factory=dict)

    def resolve(self, value: Any) -> Any:
        if isinstance(value, dict):
            return {k: self.resolve(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.resolve(v) for v in value]
        if isinstance(value, str) and value.startswith("$context."):
            return self.context[value[len("$context.") :]]
        if isinstance(value, str) and value.startswith("$generate:uuid_v4"):
            return self.generated.setdefault(value, str(uuid.uuid4()))
        return value


class Seller:
    """A governance-aware test seller (the storyboards' ``sales`` agent)."""

    def __init__(self, warden: Rest, jwks: dict[str, Any], issuer: str) -> None:
        self.warden = warden  # the credential the buyer registered via sync_governance
        self.issuer = issuer
        self.verifier = GovernanceTokenVerifier(
            audience=SELLER_URL,
            jwks=StaticJwks({issuer: jwks}),
            replay_store=InMemoryJtiReplayStore(),
        )
        self.buys: dict[str, dict[str, Any]] = {}
        self.execution_checks: list[dict[str, Any]] = []

    def handle(
        self, task: str, req: dict[str, Any], run: Run, story: dict[str, Any]
    ) -> dict[str, Any]:
        if task == "sync_accounts":
            return {"accounts": [{"account_id": "acc_acme", "status": "active"}]}
        if task == "sync_governance":
            return {"accounts": [{"status": "synced"}]}
        if task == "get_products":
            ids = [p["product_id"] for p in (story.get("fixtures") or {}).get("products", [])]
            ids = ids or ["display_q2", "video_q2"]
            return {
                "products": [
                    {
                        "product_id": pid,
                        "pricing_options": [
                            {"pricing_option_id": "cpm_standard", "fixed_price": 8.0}
                        ],
                    }
                    for pid in ids
                ]
            }
        if task == "create_media_buy":
            return self.create_media_buy(req, run)
        if task == "get_media_buys":
            return {"media_buys": [self.buys[i] for i in req["media_buy_ids"]]}
        raise AssertionError(f"test seller has no task {task}")

    @staticmethod
    def amount(req: dict[str, Any]) -> float:
        total = req.get("total_budget")
        if isinstance(total, dict):
            return float(total["amount"])
        return float(sum(p["budget"] for p in req["packages"]))

    def create_media_buy(self, req: dict[str, Any], run: Run) -> dict[str, Any]:
        amount = self.amount(req)
        token = req.get("governance_context")
        caller = "https://pinnacle-agency.example"
        if token is None:
            # No buyer authorization: this seller consults governance itself (intent check
            # on the buyer's plan, with the credential the buyer registered).
            check = self.warden.call(
                "check_governance",
                {
                    "plan_id": run.context["plan_id"],
                    "caller": SELLER_URL,
                    "target_agent": SELLER_URL,
                    "tool": "create_media_buy",
                    "purchase_type": "media_buy",
                    "proposed_commitment": {"amount": amount, "currency": "USD"},
                    "payload": req,
                },
            )
            assert not check.failed, check.body
            if check.body["verdict"] != "approved":
                return _error(
                    "GOVERNANCE_DENIED",
                    check.body.get("explanation", ""),
                    findings=check.body.get("findings"),
                )
            token, caller = check.body["governance_context"], SELLER_URL
        try:
            verified = self.verifier.verify(
                token,
                caller=caller,
                task="create_media_buy",
                payload=req,
                commitment={"amount": amount, "currency": "USD"},
                buyer_issuers=[self.issuer],
                idempotency_key=req.get("idempotency_key"),
            )
        except GovernanceTokenRejected:
            return _error("PERMISSION_DENIED", "governance authorization rejected")
        media_buy_id = f"mb_{uuid.uuid4().hex[:12]}"
        if req.get("governance_context") is not None:  # online execution check, then commit
            check = self.warden.call(
                "check_governance",
                {
                    "caller": SELLER_URL,
                    "governance_context": token,
                    "phase": "purchase",
                    "planned_delivery": {
                        "media_buy_id": media_buy_id,
                        "total_budget": amount,
                        "currency": "USD",
                    },
                },
            )
            assert not check.failed, check.body
            self.execution_checks.append(check.body)
            if check.body["verdict"] != "approved":
                return _error("GOVERNANCE_DENIED", check.body["explanation"])
        assert verified.claims["check_id"]
        self.buys[media_buy_id] = {
            "media_buy_id": media_buy_id,
            "total_budget": amount,
            "currency": "USD",
        }
        return {"media_buy_id": media_buy_id, "status": "completed"}


def _error(code: str, message: str, **extra: Any) -> dict[str, Any]:
    err = {"code": code, "message": message}
    return {
        "status": "failed",
        "errors": [err],
        "adcp_error": err,
        **{k: v for k, v in extra.items() if v},
    }


def run_storyboard(
    rel: str,
    warden: Rest,
    seller: Seller | None,
    *,
    on_reply: Callable[[str, dict[str, Any]], None] | None = None,
    skip: frozenset[str] = frozenset(),
    context: dict[str, Any] | None = None,
    reviewer: Rest | None = None,
) -> Run:
    """Execute every step of the storyboard at ``rel`` (see the module docstring).
    Tasks in ``skip`` are left out, as the official runner leaves out tools an agent
    does not list; ``context`` presets context values (a seeded media buy id);
    ``reviewer`` (the buyer's own key) reviews adjustments the ``warden`` key reported."""
    story = load(rel)
    run = Run(context={**(story.get("context") or {}), **(context or {})})
    run.context["seller_agent_url"] = SELLER_URL
    for phase in story["phases"]:
        for step in phase["steps"]:
            task = step["task"]
            if task in skip:
                continue
            req = run.resolve(step.get("sample_request") or {})
            agent = step.get("agent", story.get("default_agent"))
            ours = agent == "governance" or (agent is None and task in WARDEN_TASKS)
            if ours:
                review = task == "report_plan_adjustment" and req.get("action") == "review"
                reply = (reviewer if review and reviewer is not None else warden).call(task, req)
                body = reply.body
                failed = reply.failed
            else:
                assert seller is not None, f"no seller for {task}"
                body = seller.handle(task, req, run, story)
                failed = body.get("status") == "failed"
            where = f"{Path(rel).name} {step['id']}"
            assert failed == bool(step.get("expect_error")), (where, body)
            run.replies[step["id"]] = body
            for check in step.get("validations") or ():
                _validate(where, check, body, run, ours)
            for out in step.get("context_outputs") or ():
                name = out.get("name") or out.get("key")
                if "path" in out:
                    run.context[name] = lookup(body, out["path"])
            if ours and task == "sync_plans":
                run.context.setdefault("plan_id", body["plans"][0]["plan_id"])
            if on_reply is not None:
                on_reply(step["id"], body)
    return run


def _validate(
    where: str, check: dict[str, Any], body: dict[str, Any], run: Run, ours: bool
) -> None:
    kind = check["check"]
    if kind == "response_schema":
        return  # Rest.call validated every Warden reply; the seller's shapes are not tested
    if kind == "error_code":
        code = (body.get("adcp_error") or {}).get("code") or body["errors"][0]["code"]
        allowed = check.get("allowed_values") or [check["value"]]
        assert code in allowed, (where, body)
        return
    if not ours and kind != "field_present":
        return  # the test seller's own readback fields are not what is under test
    path = check["path"]
    if kind == "field_present":
        assert lookup(body, path) is not None, (where, path, body)
    elif kind == "field_absent":
        try:
            lookup(body, path)
        except KeyError:
            return
        raise AssertionError((where, f"{path} must be absent", body))
    elif kind == "field_value":
        assert lookup(body, path) == run.resolve(check["value"]), (where, path, body)
    elif kind == "field_contains":
        assert check["value"] in lookup(body, path.removesuffix("[*]")), (where, path, body)
    elif kind == "field_equals_context":
        assert lookup(body, path) == run.context[check["context_key"]], (where, path, body)
    else:
        raise AssertionError(f"{where}: unhandled validation {kind}")
