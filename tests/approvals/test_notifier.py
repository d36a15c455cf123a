"""Approval-task webhook payloads (AdCP core/mcp-webhook-payload.json) and outbox rows."""

from __future__ import annotations

import hashlib
import json
import re
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT
from jsonschema import Draft7Validator, FormatChecker
from referencing import Registry, Resource

from warden.approvals.notifier import (
    DEFAULT_TASK_TYPE,
    TASK_STATUS,
    Delivery,
    DeliveryStatus,
    Notifier,
    backoff,
    build_payload,
    rfc3339,
    task_types,
)
from warden.approvals.webhooks import EVENTS, WebhookConfig, WebhooksFile
from warden.schemas import SchemaSet

ADCP = ROOT / "src" / "warden" / "schemas" / "adcp"
PAYLOAD_ID = "https://adcontextprotocol.org/schemas/3.2.0-beta.0/core/mcp-webhook-payload.json"
SECRET = "cc237f7fe354609bb41360c6530a2deb7926f3cc55e91df3ff90e37202950b6c"
NOW = datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC)


def _validator() -> Draft7Validator:
    """An independent validator (python-jsonschema + referencing) over the shipped files."""
    docs = [json.loads(p.read_text(encoding="utf-8")) for p in ADCP.rglob("*.json")]
    registry: Registry[Any] = Registry().with_resources(
        (d["$id"], Resource.from_contents(d)) for d in docs
    )
    schema = registry.contents(PAYLOAD_ID)
    return Draft7Validator(schema, registry=registry, format_checker=FormatChecker())


VALIDATOR = _validator()
RUNTIME_SCHEMAS = SchemaSet("adcp")


def task_view(state: str = "approved", **extra: Any) -> dict[str, Any]:
    """A task as the approval desk renders it (Task.to_dict shape)."""
    view: dict[str, Any] = {
        "id": "task_7f3a",
        "kind": "spend_approval",
        "state": state,
        "status": "completed" if state in ("approved", "consumed") else "input_required",
        "wire": "spend",
        "created_at": "2026-11-29T11:59:00+00:00",
        "updated_at": "2026-11-29T12:00:00+00:00",
        "expires_at": "2026-11-29T13:00:00+00:00",
        "action": {"name": "send_money", "method": "tools/call", "arguments": {"amount": "25.00"}},
        "action_hash": "a" * 64,
        "scope": "spend:agent-1",
        "requester": {"agent_id": "agent-1", "principal": None},
        "approver_group": "finance",
        "approvals_required": 1,
        "question": "Send 25.00 USD?",
        "timeout_disposition": "deny",
        "correlation": {"request_id": "r1"},
        "policy": {"rules": ["spend.large"]},
        "votes": [],
        "history": [
            {"event": "requested", "at": "2026-11-29T11:59:00+00:00", "by": None},
            {
                "event": "approved",
                "at": "2026-11-29T12:00:00+00:00",
                "by": {"principal": "alice", "key_id": "k1"},
                "reason": "ok",
            },
        ],
        "consumed_by": None,
        "detail": {},
    }
    view.update(extra)
    return view


def test_shipped_schemas_are_the_shared_originals() -> None:
    shared = ROOT.parent / "shared" / "specs" / "files" / "adcp" / "schemas-3.2.0-beta.0"
    if not shared.exists():
        pytest.skip("../shared is not present")
    # Not in the shared tree (see src/warden/schemas/adcp/README.md): a transcription
    # from upstream and a marked stand-in. When the shared tree gains them, they must
    # be replaced by the originals (this assertion then fails).
    not_shared = {
        Path("enums/specialism.json"),
        Path("protocol/get-adcp-capabilities-response.json"),
    }
    for path in ADCP.rglob("*.json"):
        rel = path.relative_to(ADCP)
        if rel in not_shared:
            assert not (shared / rel).exists(), f"{rel} is now shared: ship the original"
            continue
        assert path.read_bytes() == (shared / rel).read_bytes(), rel


@pytest.mark.parametrize("state", [*TASK_STATUS, "something-new"])
@pytest.mark.parametrize("event", EVENTS)
def test_every_payload_validates_against_the_adcp_schema(state: str, event: str) -> None:
    payload = build_payload(
        task_view(state), event, delivery_id="0" * 32, operation_id="op_1", now=NOW
    )
    errors = sorted(VALIDATOR.iter_errors(payload), key=str)
    assert not errors, errors[0].message
    # and the runtime's own schema loader (jsonschema-rs) agrees
    assert RUNTIME_SCHEMAS.first_error("core/mcp-webhook-payload.json", payload) is None


def test_payload_fields() -> None:
    payload = build_payload(
        task_view("approved"), "approved", delivery_id="ab" * 16, operation_id="op_9", now=NOW
    )
    assert payload == {
        "idempotency_key": "whk_" + "ab" * 16,
        "operation_id": "op_9",
        "task_id": "task_7f3a",
        "task_type": DEFAULT_TASK_TYPE,
        "status": "completed",
        "timestamp": "2026-11-29T12:00:00.000Z",
        "message": "approval task task_7f3a approved by alice",
        "result": task_view("approved"),
    }
    assert re.fullmatch(r"[A-Za-z0-9_.:-]{16,255}", payload["idempotency_key"])


def test_status_mapping_uses_only_adcp_task_statuses() -> None:
    enum = json.loads((ADCP / "enums" / "task-status.json").read_text())["enum"]
    assert TASK_STATUS == {
        "pending": "input-required",
        "approved": "completed",
        "consumed": "completed",
        "denied": "rejected",
        "expired": "failed",
        "canceled": "canceled",
    }
    assert set(TASK_STATUS.values()) <= set(enum) and "unknown" in enum
    assert DEFAULT_TASK_TYPE in task_types()


def test_task_type_follows_an_adcp_action_name() -> None:
    view = task_view(action={"name": "create_media_buy", "method": "tools/call"})
    payload = build_payload(view, "requested", delivery_id="1" * 32, operation_id="o", now=NOW)
    assert payload["task_type"] == "create_media_buy"
    view = task_view(action={"name": "buy_products"})
    payload = build_payload(view, "requested", delivery_id="1" * 32, operation_id="o", now=NOW)
    assert payload["task_type"] == "buy_products"


def test_messages() -> None:
    def message(event: str, **kw: Any) -> str:
        view = task_view(**kw)
        out = build_payload(view, event, delivery_id="1" * 32, operation_id="o", now=NOW)
        return str(out["message"])

    assert message("requested", state="pending") == "approval task task_7f3a requested"
    voted = {"event": "voted", "by": {"principal": "bob"}}
    assert message("voted", state="pending", history=[voted]) == (
        "approval task task_7f3a received a vote from bob"
    )
    assert message("expired", state="expired") == "approval task task_7f3a expired"


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"event": "exploded"}, "unknown approval event"),
        ({"delivery_id": "short"}, "idempotency_key"),
        ({"delivery_id": "has space" * 4}, "idempotency_key"),
        ({"now": datetime(2026, 1, 1)}, "timezone"),
        ({"view": {"state": "pending"}}, "task_id"),
    ],
)
def test_build_payload_refuses_bad_input(kwargs: dict[str, Any], match: str) -> None:
    args: dict[str, Any] = {
        "view": task_view(),
        "event": "approved",
        "delivery_id": "0" * 32,
        "now": NOW,
    }
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        build_payload(
            args["view"],
            args["event"],
            delivery_id=args["delivery_id"],
            operation_id="o",
            now=args["now"],
        )


class ListOutbox:
    def __init__(self) -> None:
        self.rows: list[Delivery] = []

    def add(self, delivery: Delivery) -> None:
        self.rows.append(delivery)


def _config() -> WebhooksFile:
    return WebhooksFile(
        webhooks=(
            WebhookConfig(id="all", url="https://a.example.com/h", secret=SECRET),
            WebhookConfig(
                id="decisions",
                url="https://b.example.com/h",
                secret=SECRET,
                events=("approved", "denied"),
                operation_id="op_fixed",
            ),
        )
    )


def test_enqueue_writes_one_row_per_subscribed_webhook() -> None:
    notifier = Notifier(_config())
    outbox = ListOutbox()
    assert notifier.enqueue(outbox, task_view("approved"), "approved", NOW) == 2
    assert notifier.enqueue(outbox, task_view("pending"), "voted", NOW) == 1
    assert [r.webhook_id for r in outbox.rows] == ["all", "decisions", "all"]
    for row in outbox.rows:
        assert row.status is DeliveryStatus.PENDING and row.attempts == 0
        assert row.next_attempt_at == NOW == row.created_at
        assert row.task_id == "task_7f3a"
        body = json.loads(row.body)
        assert body["idempotency_key"] == "whk_" + row.delivery_id
        assert re.fullmatch(r"[0-9a-f]{32}", row.delivery_id)
        assert not list(VALIDATOR.iter_errors(body))
        # compact separators: the stored text is exactly the compact encoding
        assert row.body == json.dumps(body, ensure_ascii=False, separators=(",", ":"))
    first, second, third = (json.loads(r.body) for r in outbox.rows)
    assert first["operation_id"] == "task_7f3a" and second["operation_id"] == "op_fixed"
    assert third["status"] == "input-required"
    assert len({r.delivery_id for r in outbox.rows}) == 3


def test_enqueue_refuses_an_unknown_event_before_writing() -> None:
    outbox = ListOutbox()
    with pytest.raises(ValueError):
        Notifier(_config()).enqueue(outbox, task_view(), "exploded", NOW)
    assert outbox.rows == []


def test_backoff_doubles_and_caps() -> None:
    assert [backoff(n, 1.0, 10.0) for n in range(1, 7)] == [1, 2, 4, 8, 10, 10]
    assert backoff(3, 0.5, 100.0) == 2.0


def test_rfc3339_is_fixed_width_utc() -> None:
    assert rfc3339(NOW) == "2026-11-29T12:00:00.000000+00:00"
    plus_two = NOW.astimezone(timezone(timedelta(hours=2)))
    assert rfc3339(plus_two) == rfc3339(NOW)
    with pytest.raises(ValueError):
        rfc3339(datetime(2026, 1, 1))


def test_readme_names_the_payload_digest() -> None:
    digest = hashlib.sha256((ADCP / "core" / "mcp-webhook-payload.json").read_bytes()).hexdigest()
    assert digest in (ADCP / "README.md").read_text(encoding="utf-8")
