"""The operator view's pure parts: how an entry of each chain is summarised, the burn
series, and the chart geometry the templates print as SVG."""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime
from decimal import Decimal

from warden.server import ops_view, svg_charts
from warden.server.ops_view import summarize
from warden.store.activity_sql import StoredEntry


def stored(step: str, entry: object, request: object = None, agent: str = "bot") -> StoredEntry:
    return StoredEntry(
        session_id="s",
        seq=0,
        created_at="2026-12-01T13:05:42.123456Z",
        step_type=step,
        agent_id=agent,
        entry=entry if isinstance(entry, str) else json.dumps(entry),
        request=None if request is None else json.dumps(request),
    )


def test_each_chain_is_summarised() -> None:
    acs = summarize(
        stored(
            "steps/toolCallRequest",
            {
                "verdict": {
                    "decision": "deny",
                    "reason_codes": ["x"],
                    "policy_references": [{"rule_id": "a"}, {"rule_id": "b"}],
                }
            },
            {"payload": {"tool": {"name": "shell"}}},
        )
    )
    assert (acs.wire, acs.agent, acs.tool, acs.decision, acs.rules, acs.reason_codes) == (
        "acs",
        "bot",
        "shell",
        "deny",
        ("a", "b"),
        ("x",),
    )
    mcp = summarize(
        stored(
            "protocols/MCP/tools/call",
            {"verdict": {"decision": "allow"}},
            {"payload": {"params": {"name": "git_status"}}},
        )
    )
    assert (mcp.wire, mcp.tool) == ("mcp", "git_status")
    spend = summarize(
        stored(
            "warden/spend.policy",
            {"spend": {"decision": "ask", "rules": ["big"], "action": "buy", "principal": "p"}},
            agent="warden-spend:org",
        )
    )
    assert (spend.wire, spend.decision, spend.tool, spend.rules, spend.agent) == (
        "spend",
        "ask",
        "buy",
        ("big",),
        "p",
    )
    filed = summarize(
        stored(
            "warden/approval.requested",
            {
                "approval": {
                    "action": {"name": "delete_file"},
                    "requester": {"agent_id": "ops-bot"},
                    "policy": {"rules": ["ask-before-delete"], "reason_codes": ["c"]},
                }
            },
            agent="warden-approval:desk",
        )
    )
    assert (filed.decision, filed.tool, filed.agent, filed.rules) == (
        "requested",
        "delete_file",
        "ops-bot",
        ("ask-before-delete",),
    )
    kla = summarize(
        stored(
            "warden/kla.policy_decision",
            {
                "kla": {
                    "record": {
                        "decision": "deny",
                        "rules": [{"rule_id": "kla-no-delete-in-production"}],
                        "reasons": [{"code": "production_delete"}],
                    },
                    "principal": "k",
                }
            },
        )
    )
    assert (kla.wire, kla.decision, kla.agent, kla.rules, kla.reason_codes) == (
        "kla",
        "deny",
        "k",
        ("kla-no-delete-in-production",),
        ("production_delete",),
    )
    asked = summarize(
        stored("warden/kla.action_request", {"kla": {"record": {"action": "read_case"}}})
    )
    assert (asked.decision, asked.tool) == ("action_request", "read_case")
    broken = summarize(stored("steps/toolCallRequest", "{not json"))
    assert (broken.decision, broken.readable) == ("unreadable", False)


def test_prefilter_keeps_only_verbatim_values() -> None:
    f = ops_view.Filters(agent="ops-bot", tool='say"hi', rule="r\\1", decision="déni")
    assert f.prefilter() == [] and f.agent_prefilter() == "ops-bot"
    assert ops_view.Filters(decision="unreadable", rule="r").prefilter() == ["r"]
    assert ops_view.Filters(wire="spend").step_prefix() == "warden/spend."
    assert ops_view.Filters(wire="acs").step_prefix() is None


def test_burn_adds_each_settlement_to_its_path() -> None:
    now = datetime(2026, 12, 1, 13, 30, tzinfo=UTC)
    settle = {"spend": {"actual": "2.50", "path": ["team", "org"], "budget_id": "team"}}

    def at(stamp: str, step: str = "warden/spend.settle") -> StoredEntry:
        row = stored(step, settle)
        return StoredEntry(**{**row.__dict__, "created_at": stamp})

    rows = [
        at("2026-12-01T13:10:00.000000Z"),
        at("2026-12-01T13:20:00.000000Z"),
        at("2026-12-01T11:59:59.000000Z"),
        at("2026-11-29T13:00:00.000000Z"),  # outside the 24 hours
        at("2026-12-01T13:15:00.000000Z", "warden/spend.reserve"),  # a hold, not a burn
    ]
    burn = ops_view.burn_by_hour(rows, now, 24)
    assert set(burn) == {"team", "org"}
    assert burn["team"][-1] == Decimal("5.00") and burn["team"][-3] == Decimal("2.50")
    assert sum(burn["org"]) == Decimal("7.50")


def test_stacked_columns_scale_to_the_busiest_minute() -> None:
    counts = {"13:00": Counter(allow=3, deny=1), "13:01": Counter(), "13:02": Counter(ask=2)}
    chart = svg_charts.stacked_columns(
        ["13:00", "13:01", "13:02"], counts, ("allow", "ask", "deny"), width=300, height=130
    )
    assert chart.max_total == 4
    by_class = {b.css: b for b in chart.bars}
    assert set(by_class) == {"o-allow", "o-deny", "o-ask"}
    tallest = by_class["o-allow"].h + by_class["o-deny"].h
    assert abs(tallest - (130 - 10 - 22)) < 0.05  # the busiest column fills the plot
    assert abs(by_class["o-ask"].h - tallest / 2) < 0.05
    # Stacked: deny sits on allow, and nothing leaves the plot area.
    assert abs(by_class["o-deny"].y + by_class["o-deny"].h - by_class["o-allow"].y) < 0.05
    assert all(b.y >= 10 - 0.01 and b.y + b.h <= chart.baseline + 0.01 for b in chart.bars)
    assert "13:00 UTC: 3 allow" in by_class["o-allow"].title


def test_latency_and_bars() -> None:
    bars = svg_charts.latency_histogram([1, 5, 30, 4000])
    assert [b.value for b in bars] == ["2", "1", "0", "0", "0", "1"]
    assert bars[0].percent == 100.0 and bars[1].percent == 50.0
    assert svg_charts.quantile([], 0.5) is None
    assert svg_charts.quantile([3, 1, 2], 0.5) == 2
    assert svg_charts.duration(90) == "1.5 min"
    spark = svg_charts.spark_columns([Decimal(0), Decimal(4), Decimal(2)], ["a", "b", "c"])
    assert [b.title for b in spark.bars] == ["b UTC: 4", "c UTC: 2"]
    assert spark.total == "6" and spark.peak == "4"
