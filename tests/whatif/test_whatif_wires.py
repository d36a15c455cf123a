"""`warden whatif` over the Warden-chain wires (issue 19 item 2; decisions 600–609): spend
quotes, KLA action requests and AdCP intent checks, driven through the real REST wires in
process, are rebuilt from what their entries recorded and replayed. The recorded bundle
reproduces every one (a human's grant and a full budget marked), and a candidate that
changes one rule per wire changes exactly those decisions, under the right wire."""

from __future__ import annotations

import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import DEFAULT_POLICY, ROOT, ensure_agent
from dojo import valid
from fastapi.testclient import TestClient

from warden.identity.api_keys import Role
from warden.policy.bundle import load_bundle
from warden.runtime import Runtime
from warden.server.app import create_app
from warden.whatif import what_if
from warden.whatif.html import render_html
from warden.whatif.reader import StoreLogReader
from warden.whatif.wires import WireStep, WireSteps

for _helpers in ("wire/spend", "wire/kla", "adcp"):
    sys.path.insert(0, str(ROOT / "tests" / _helpers))
from adcp_helpers import Rest, intent, plan  # noqa: E402
from kla_wire_helpers import BASIC, CREDIT, Caller, load  # noqa: E402
from spend_wire_helpers import Api, assert_error, tree  # noqa: E402

#: One rule per wire, each threshold raised above what the history asked.
EDITS = (
    ("when: double(args.amount) > 1000.0", "when: double(args.amount) > 2000.0"),
    (
        "when: has(args.amount) && double(args.amount) > 10000.0",
        "when: has(args.amount) && double(args.amount) > 20000.0",
    ),
    (
        "when: args.amount != null && double(args.amount) > 250000.0",
        "when: args.amount != null && double(args.amount) > 500000.0",
    ),
)


def record_history(rt: Runtime) -> dict[str, Any]:
    """Drive the three wires with one agent key; return what each answered."""
    ensure_agent(rt, "bot-1")
    _, token = rt.api_keys.create("bot-1", Role.AGENT, ())
    alice, _ = rt.api_keys.create("alice", Role.APPROVER, ["finance"])
    out: dict[str, Any] = {}
    with TestClient(create_app(rt)) as client:
        # Spend: the default bundle allows quotes and asks above 1000.
        api = Api(client, token)
        bot = tree(rt, org="5000", team="5000", agent="3000")
        assert api.quote(bot, "40").status == 200  # allow → reserve
        asked = api.quote(bot, "1500", action="buy_ads")  # ask, pending
        task = assert_error(asked, "approval:required", 403, resolution="human_approval")
        rt.desk.approve(task["resolution"]["taskId"], alice, "budgeted")
        assert api.quote(bot, "1500.00", action="buy_ads").status == 200  # ask, granted
        assert api.quote(bot, "900").status == 200  # allow → reserve (2440 of 3000 held)
        full = api.quote(bot, "800")  # allow, but the budget has no room
        assert full.status == 402 and "budget" in full.body["blockedBy"], full.body
        # KLA: the basic read is allowed, the 12500 EUR disposition needs finance.
        kla = Caller(client, token, "bot-1")
        out["kla"] = [kla.submit(load(p)).data["decision"]["decision"] for p in (BASIC, CREDIT)]
        # AdCP: an approved intent, one the bundle asks a human about, one the plan denies.
        adcp = Rest(client, token)
        synced = adcp.call(
            "sync_plans",
            {"idempotency_key": str(uuid.uuid4()), "plans": [plan("p1", total=1_000_000)]},
        )
        assert synced.status == 200, synced.body
        out["adcp"] = [
            adcp.call("check_governance", intent("p1", amount)).body.get("verdict", "submitted")
            for amount in (1000, 300_000)
        ]
        late = intent("p1", 10)
        late["payload"]["end_time"] = "2100-01-01T00:00:00Z"  # outside the plan's flight
        out["adcp"].append(adcp.call("check_governance", late).body["verdict"])
    return out


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runtime]:
    from conftest import write_key

    from warden.settings import Settings

    data = tmp_path_factory.mktemp("wires") / "data"
    rt = Runtime.start(
        Settings(data_dir=data, policy=DEFAULT_POLICY, key_file=write_key(data / "ikm.key"))
    )
    answers = record_history(rt)
    assert answers == {
        "kla": ["allow", "require_approval"],
        "adcp": ["approved", "submitted", "denied"],
    }
    yield rt
    rt.close()


def candidate(folder: Path) -> Path:
    text = DEFAULT_POLICY.read_text(encoding="utf-8")
    for old, new in EDITS:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    out = folder / "candidate.yaml"
    out.write_text(text, encoding="utf-8")
    return out


def test_the_recorded_bundle_reproduces_every_wire_decision(history: Runtime) -> None:
    doc = valid(what_if(StoreLogReader(history.store.engine, "test"), load_bundle(DEFAULT_POLICY)))
    f = doc["faithfulness"]
    # spend: 40, 1500 (ask), 1500 (ask, granted), 900, 800 (budget); KLA 2; AdCP 2.
    assert doc["decisions"] == 9
    assert f["faithful"] and f["reproduced"] == 9 and f["unreproduced"] == 0
    assert f["marked"] == {"budget": 1, "human": 1}
    assert doc["changes"]["total"] == 0
    assert doc["matrix"] == {"allow": {"allow": 5}, "ask": {"ask": 4}}
    # The plan's own denial asked no rule: not a policy decision, and said so.
    assert doc["skipped"]["adcp/check_governance:no_policy_decision"] == 1
    assert not [k for k in doc["skipped"] if k.endswith((":not_recorded", ":unreadable"))]
    marked = {m["mark"]: m for m in doc["marked"]}
    assert marked["budget"]["wire"] == "spend" and marked["budget"]["old"]["decision"] == "allow"
    assert marked["budget"]["recorded"]["decision"] == "deny"
    assert marked["human"]["tool"] == "buy_ads" and marked["human"]["old"]["decision"] == "ask"


def test_a_rule_changed_per_wire_changes_exactly_its_decisions(
    history: Runtime, tmp_path: Path
) -> None:
    doc = valid(
        what_if(
            StoreLogReader(history.store.engine, "test"),
            load_bundle(candidate(tmp_path)),
            fail_on="loosen",
        )
    )
    assert doc["faithfulness"]["faithful"] and not doc["ok"]
    assert doc["changes"]["loosened"] == 4 and doc["changes"]["tightened"] == 0
    assert doc["matrix"] == {"allow": {"allow": 5}, "ask": {"allow": 4}}
    by_wire = {w: (g["changes"], g["loosened"]) for w, g in doc["by_wire"].items()}
    assert by_wire == {"spend": (2, 2), "kla": (1, 1), "adcp": (1, 1)}
    tools = {(ex["wire"], ex["tool"]) for ex in doc["loosened"]}
    assert tools == {
        ("spend", "buy_ads"),
        ("kla", load(CREDIT)["action"]),
        ("adcp", "create_media_buy"),
    }
    assert set(doc["by_rule"]) == {
        "large-spend-needs-approval",
        "kla-large-amount-needs-approval",
        "adcp-large-commitment-needs-approval",
    }
    # The agent of each wire decision is the caller the wire decided for.
    assert set(doc["by_agent"]) == {"bot-1"}
    # The HTML page lists each wire's loosened decision as wire:tool.
    page = render_html(doc)
    wires = page.partition("<h2>Changes by wire</h2>")[2]
    assert all(f">{w}<" in wires for w in ("spend", "kla", "adcp")), wires[:2000]
    loosened = page.partition("<h2>Loosened")[2].partition("<h2>")[0]
    assert "spend:buy_ads" in loosened and "adcp:create_media_buy" in loosened


def test_entries_recorded_before_decided_are_skipped_with_a_reason() -> None:
    steps = WireSteps()
    policy = {"step_type": "warden/spend.policy", "spend": {"decision": "deny"}}
    assert steps.step("warden/spend.policy", policy) == "spend/quote:not_recorded"
    hold = {"step_type": "warden/spend.reserve", "spend": {"reservation_id": "r"}}
    assert steps.step("warden/spend.reserve", hold) is None  # a hold, no quote's decision
    kla = {"kla": {"record": {"action_request_id": "a"}}}
    assert steps.step("warden/kla.policy_decision", kla) == "kla/action:not_recorded"
    check = {"adcp": {"check_id": "c"}}
    assert steps.step("warden/adcp.check", check) == "adcp/check_governance:not_recorded"
    assert steps.step("warden/adcp.check", {"adcp": {"decided": None}}) == (
        "adcp/check_governance:no_policy_decision"
    )
    bad = {"spend": {"decided": {"caller": {"role": "nobody"}, "payload": {}}}}
    assert steps.step("warden/spend.policy", bad) == "spend/quote:unreadable"


def test_a_rebuilt_request_is_the_one_the_wire_decided(history: Runtime) -> None:
    """Each rebuilt request carries the caller's verified facts as CEL ``agent``."""
    steps = WireSteps()
    seen: dict[str, WireStep] = {}
    for rec in history.store.iter_records():
        if rec["kind"] == "entry" and str(rec["entry"]["step_type"]).startswith("warden/"):
            got = steps.step(rec["entry"]["step_type"], rec["entry"])
            if isinstance(got, WireStep):
                seen.setdefault(got.wire, got)
    assert set(seen) == {"spend", "kla", "adcp"}
    for step in seen.values():
        assert step.request.agent["id"] == "bot-1" and step.request.agent["verified"] is True
        assert step.request.metadata["principal"] == "bot-1"
    assert seen["spend"].request.args == {
        "budgetId": "acme.ops.bot",
        "amount": "40",
        "currency": "USD",
        "action": "buy",
    }
    assert seen["kla"].request.session["id"] == load(BASIC)["correlation"]["execution_id"]
    assert seen["adcp"].request.args["plan_id"] == "p1"


def test_an_export_replays_the_wires_like_the_database(history: Runtime, tmp_path: Path) -> None:
    """The same decisions from a ``warden export`` file (with the recorded bundle given,
    since an export carries no bundle sources)."""
    import json

    from warden.crypto.keystore import load_ikm
    from warden.ledger.export import export_records
    from warden.whatif.reader import ExportLogReader

    out = tmp_path / "history.jsonl"
    ikm = load_ikm(history.settings.data_dir / "ikm.key")
    with out.open("w", encoding="utf-8") as fh:
        for rec in export_records(history.store, ikm):
            fh.write(json.dumps(rec) + "\n")
    cand = load_bundle(candidate(tmp_path))
    current = load_bundle(DEFAULT_POLICY)
    from_export = what_if(ExportLogReader(out), cand, current=current)
    from_db = what_if(StoreLogReader(history.store.engine, "test"), cand)
    assert from_export["faithfulness"]["faithful"]
    for key in ("decisions", "matrix", "changes", "skipped"):
        assert from_export[key] == from_db[key], key

    def counts(doc: dict[str, Any], group: str) -> dict[str, tuple[int, int]]:
        # Examples differ in log_index only: this export carries no log record.
        return {k: (g["changes"], g["loosened"]) for k, g in doc[group].items()}

    for group in ("by_wire", "by_rule", "by_tool"):
        assert counts(from_export, group) == counts(from_db, group), group


CALLER_POLICY = """\
warden_bundle: 1
id: caller-policy
version: "1"
rules:
  - id: quotes
    hooks: [spend/quote]
    effect: allow
  - id: no-interns
    hooks: [spend/quote]
    when: '"interns" in agent.groups'
    effect: deny
    reasoning: Interns do not spend.
    reason_codes: [intern_spend]
  - id: long-holds-ask
    hooks: [spend/quote]
    when: has(payload.holdSeconds) && payload.holdSeconds != null && payload.holdSeconds > 3600
    effect: ask
    reasoning: A hold this long needs a human.
    ask:
      question: Hold this long?
      approver: {type: human, id: finance}
      timeout_seconds: 600
"""


def test_the_callers_facts_and_the_quote_body_are_what_policy_saw(
    make_runtime: Callable[..., Runtime], tmp_path: Path
) -> None:
    """Rules on the caller's groups and on the quote body as received are reproduced:
    replay gives them the recorded caller and body, not the registry's or the parsed
    args."""
    policy = tmp_path / "caller.yaml"
    policy.write_text(CALLER_POLICY, encoding="utf-8")
    rt = make_runtime(policy)
    tokens = {}
    for name, groups in (("bot-1", ()), ("bot-2", ("interns",))):
        ensure_agent(rt, name)
        tokens[name] = rt.api_keys.create(name, Role.AGENT, groups)[1]
    with TestClient(create_app(rt)) as client:
        bot = tree(rt, principals=("admin", "bot-1", "bot-2"))
        one, two = Api(client, tokens["bot-1"]), Api(client, tokens["bot-2"])
        assert one.quote(bot, "5").status == 200
        assert two.quote(bot, "5").status == 403  # policy:no_interns
        asked = one.quote(bot, "5", extra={"holdSeconds": 7200})
        assert asked.body["blockedBy"] == "approval:required", asked.body
    doc = what_if(StoreLogReader(rt.store.engine, "test"), load_bundle(policy))
    assert doc["faithfulness"]["faithful"] and doc["faithfulness"]["reproduced"] == 3
    assert doc["matrix"] == {"allow": {"allow": 1}, "ask": {"ask": 1}, "deny": {"deny": 1}}
    # Without the interns rule only bot-2's quote changes, under its own name.
    loose = tmp_path / "loose.yaml"
    loose.write_text(CALLER_POLICY.replace('"interns" in agent.groups', "false"), "utf-8")
    changed = what_if(StoreLogReader(rt.store.engine, "test"), load_bundle(loose))
    assert changed["changes"]["loosened"] == 1 and set(changed["by_agent"]) == {"bot-2"}
