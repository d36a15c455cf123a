"""The issue 16 measuring instruments' own logic: the scenario bundle decides the peers'
probes as the reference does, and the round-trip counter reads libpq traces right."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

from pg_round_trips import count, prepared_sql, records  # noqa: E402
from scenario_bundle import (  # noqa: E402
    BUNDLE_PATH,
    DEFAULT_PEERS_DIR,
    bundle_yaml,
    load_scenario,
    rule_condition,
)
from warden_case import ScenarioWarden  # noqa: E402


def req(tool: str, amount: float | None = None, env: str = "production") -> dict[str, object]:
    args: dict[str, object] = {"currency": "USD", "to": "acct-42"}
    if amount is not None:
        args["amount_usd"] = float(amount)
    return {"agent_id": "agent-7", "tool": tool, "args": args, "env": env}


#: The scenario's benchmarked request and probes with the reference's verdicts, copied
#: from ../shared/peers/scenario.py (PROBES, reference_decide) so this test stands alone.
REQUEST = {
    "agent_id": "agent-7",
    "tool": "payments.transfer",
    "args": {"amount_usd": 2500.0, "currency": "USD", "to": "acct-42", "memo": "invoice 1187"},
    "env": "production",
}
PROBES = [
    (REQUEST, "ask", "r19"),
    (req("shell.exec"), "deny", "r01"),
    (req("fs.read"), "allow", "r04"),
    (req("payments.transfer", 50), "allow", "r18"),
    (req("payments.transfer", 20000), "deny", "r17"),
    (req("payments.transfer", 500), "allow", "r20"),
    (req("payments.transfer", 2500, env="staging"), "allow", "r20"),
    (req("payments.refund", 800), "deny", "r14"),
    (req("unknown.tool"), "deny", None),
    (req("payments.transfer", 2500, env="development"), "deny", "r16"),
]


def test_the_committed_bundle_decides_every_probe_as_the_reference(tmp_path: Path) -> None:
    warden = ScenarioWarden(tmp_path, BUNDLE_PATH, "NORMAL")
    try:
        got = [warden.decide(probe) for probe, _effect, _rule in PROBES]
    finally:
        warden.close()
    assert [g[0] for g in got] == [effect for _probe, effect, _rule in PROBES]
    for (decision, cited), (_probe, _effect, rule) in zip(got, PROBES, strict=True):
        # The reference's first matching rule always fires here too (strongest effect wins
        # among every rule that fired); no rule fires for the unknown tool.
        assert (rule in cited) if rule else cited == [], (decision, cited, rule)


def test_the_committed_bundle_is_the_translation_of_the_shared_scenario() -> None:
    if not (DEFAULT_PEERS_DIR / "scenario.py").is_file():
        pytest.skip(f"no shared scenario at {DEFAULT_PEERS_DIR}")
    scenario = load_scenario(DEFAULT_PEERS_DIR)
    assert BUNDLE_PATH.read_text() == bundle_yaml(scenario.RULES, scenario.DEFAULT)
    assert [(p, *scenario.reference_decide(p)) for p in scenario.PROBES] == PROBES


def test_conditions_guard_every_field_a_request_may_lack() -> None:
    assert rule_condition({"id": "a", "tool": "t"}) is None
    assert rule_condition({"id": "b", "tool": "t", "env": "staging", "amount": ("<=", 100)}) == (
        'has(metadata.environment) && metadata.environment == "staging" && '
        "has(args.amount_usd) && double(args.amount_usd) <= 100.0"
    )
    with pytest.raises(ValueError, match="unknown amount operator"):
        rule_condition({"id": "c", "tool": "t", "amount": ("==", 1)})


def test_round_trips_are_runs_of_client_messages_and_statements_are_executions() -> None:
    prepared = {"_pg3_1": "INSERT INTO entries VALUES ($1)"}
    trace = [
        "B\t5\tReadyForQuery\t I",  # the previous decision's reply, flushed late
        'F\t10\tQuery\t "BEGIN"',
        'B\t10\tCommandComplete\t "BEGIN"',
        'F\t21\tParse\t "" "SELECT 1 FROM agents WHERE id = $1" 1 NNNN',
        'F\t22\tBind\t "" "" 1 1 1 2',
        'F\t9\tExecute\t "" 0',
        "F\t4\tSync",
        "B\t4\tParseComplete",
        'F\t22\tBind\t "" "_pg3_1" 1 1 1 2',
        'F\t9\tExecute\t "" 0',
        'F\t22\tBind\t "" "_pg3_1" 1 1 1 2',  # pipelined: no reply in between
        'F\t9\tExecute\t "" 0',
        "F\t4\tSync",
        'B\t13\tCommandComplete\t "INSERT 0 1"',
        'F\t11\tQuery\t "COMMIT"',
    ]
    counted = count([(trace, prepared)])
    assert counted["round_trips"] == 4
    assert counted["statements"] == 5
    assert counted["sent"] == [
        "BEGIN",
        "SELECT 1 FROM agents WHERE id = $1",
        "INSERT INTO entries VALUES ($1)",
        "INSERT INTO entries VALUES ($1)",
        "COMMIT",
    ]


def test_a_multi_line_statement_is_one_record_and_keeps_its_name() -> None:
    trace = (
        'F\t40\tParse\t "_pg3_0" "WITH head AS (\n  UPDATE sessions SET seq = $1\n)\n'
        'SELECT 1" 1 NNNN\n'
        "B\t4\tParseComplete\n"
        'F\t22\tBind\t "" "_pg3_0" 1 1 1 2\n'
        'F\t9\tExecute\t "" 0\n'
        "F\t4\tSync\n"
    )
    lines = records(trace)
    assert len(lines) == 5
    names = prepared_sql("\n".join(lines[:2]))
    counted = count([(lines[2:], names)])
    assert counted["sent"] == ["WITH head AS (\n  UPDATE sessions SET seq = $1\n)\nSELECT 1"]
    assert (counted["round_trips"], counted["statements"]) == (1, 1)


def test_the_store_append_instrument_commits_every_copy_and_reads_the_wal(
    tmp_path: Path,
) -> None:
    from store_append_cost import _child

    result = _child(30, False, tmp_path)
    # (Thread CPU is sampled by the scheduler's tick: 30 appends may read as zero.)
    assert result["user_us"] >= 0 and result["sys_us"] >= 0
    # Every copy committed (a refused one raises) and grew the WAL by some pages.
    assert result["frames"] >= 1


@pytest.mark.parametrize("keep", [False, True])
def test_the_side_by_side_warden_case_checks_every_answer_and_keeps_no_containers(
    tmp_path: Path, keep: bool
) -> None:
    """The timed Warden case keeps only each answer's decision (no object the cyclic GC
    tracks, so the harness sets off no collection in Warden's timed calls) unless told to
    keep the answers; either way ``check`` refuses an answer that is not the ask."""
    import gc
    from types import SimpleNamespace

    from side_by_side_worker import WardenCase

    scenario = SimpleNamespace(
        REQUEST=REQUEST,
        PROBES=[p for p, _e, _r in PROBES],
        reference_decide=lambda r: next((e, rule) for p, e, rule in PROBES if p == r),
    )
    case = WardenCase(scenario, tmp_path, BUNDLE_PATH, "NORMAL", keep_answers=keep)
    try:
        assert all(p["ok"] for p in case.probes)
        case.prepare(3)
        for _ in range(3):
            case.call()
        case.check()
        assert len(case._answers) == 3
        assert any(gc.is_tracked(a) for a in case._answers) is keep
        wrong = {"jsonrpc": "2.0", "id": 1, "result": {"decision": "allow"}}
        case._answers.append(wrong if keep else "allow")
        with pytest.raises(RuntimeError, match="not answered ask"):
            case.check()
        case.prepare(1)
        case.warden.handle = lambda _body: {"jsonrpc": "2.0", "id": 1, "error": {"code": -1}}
        case.call()
        with pytest.raises(RuntimeError, match="not answered ask"):
            case.check()
    finally:
        case.close()
