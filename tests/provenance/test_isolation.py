"""One session's provenance graph cannot slow or crowd out another (issue 14 item 8):
a step's trust/depth work is linear in what it adds (counted, not timed), the
incremental values equal a whole-graph analysis (cycles, forward references, old and
branched states), and the per-process cache keeps to a byte budget, evicting least
recently used sessions that then decide exactly as before (SQLite and PostgreSQL)."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from _bundles import write_bundle
from conftest import assert_valid_response, service_client, write_key

from warden.provenance.config import ProvenanceSpec
from warden.provenance.facts import view_for
from warden.provenance.graph import INPUT_STEPS, SessionProvenance
from warden.provenance.model import ORIGINS, Trust
from warden.runtime import Runtime
from warden.wire.acs.client import AcsClient

SPEC = ProvenanceSpec(trusted_sources=["get_iban"])


def outputs_step(rid: str, items: list[tuple[str, list[str]]], tool: str = "t") -> dict[str, Any]:
    """A toolCallResult carrying one output per ``(provenance_id, derived_from)``."""
    outs = [
        {
            "value": f"value of {pid}",
            "provenance": {"provenance_id": pid, "origin": "tool_output", "derived_from": d},
        }
        for pid, d in items
    ]
    return {"request_id": rid, "payload": {"tool": {"name": tool}, "outputs": outs}}


def one_step(state: SessionProvenance, method: str, params: dict[str, Any]) -> SessionProvenance:
    """What the ACS service does with a step: check it, build its view and facts, apply
    it and summarise the result."""
    taken = state.check(method, params, SPEC)
    assert taken.problem is None, taken.problem
    view_for(state, SPEC, method, params, {}, {"name": "t"}).facts()
    after = state.applied(method, params, "allow")
    after.summary()
    return after


def big_session(steps: int, per_step: int) -> SessionProvenance:
    s = SessionProvenance().applied(
        "steps/userMessage",
        {"request_id": "u", "payload": {"content": [{"type": "text", "value": "hi"}]}},
        "allow",
    )
    for i in range(steps):
        items = [(f"n{i}-{j}", [f"n{i - 1}-{j}"] if i else []) for j in range(per_step)]
        s = one_step(s, "steps/toolCallResult", outputs_step(f"r{i}", items))
    return s


def test_a_step_visits_what_it_adds_not_the_whole_graph() -> None:
    from warden.provenance.shared import WORK

    s = big_session(steps=6, per_step=1000)  # 6001 nodes
    assert len(s.nodes) == 6001
    k = 10
    before = WORK.nodes
    items = [(f"new-{j}", [f"n5-{j}", "n0-0"]) for j in range(k)]
    after = one_step(s, "steps/toolCallResult", outputs_step("r-new", items))
    visited = WORK.nodes - before
    assert after.trust("new-3", SPEC) is Trust.UNTRUSTED
    assert after.depth("new-3", SPEC) == 6
    # check(), the view and the committed state each analyse the step's 10 nodes; a
    # whole-graph analysis (what main does) would visit the 6000 others each time.
    assert 0 < visited <= 4 * k, visited

    # A step recording an id that m earlier nodes named (a forward reference) revisits
    # those m nodes, and only them.
    m = 25
    pending = [(f"waits-{j}", ["later"]) for j in range(m)]
    s2 = one_step(after, "steps/toolCallResult", outputs_step("r-wait", pending))
    assert s2.depth("waits-0", SPEC) == 1
    before = WORK.nodes
    s3 = one_step(s2, "steps/toolCallResult", outputs_step("r-later", [("later", ["n5-0"])]))
    visited = WORK.nodes - before
    assert s3.depth("waits-0", SPEC) == 7 and s3.depth("later", SPEC) == 6
    assert 0 < visited <= 4 * (m + 1), visited


def _random_params(rng: random.Random, rid: str, fresh: list[str], pool: list[str]) -> Any:
    items = []
    for pid in fresh:
        derived = rng.sample(pool, k=min(len(pool), rng.randint(0, 3)))
        origin = rng.choice([*ORIGINS, "agent_generated", "agent_generated"])
        src = rng.choice(["", "get_iban", "read_file"])
        items.append(
            {
                "value": pid,
                "provenance": {
                    "provenance_id": pid,
                    "origin": origin,
                    "source_id": src,
                    "derived_from": derived,
                },
            }
        )
    method = rng.choice(["steps/userMessage", "steps/agentResponse", "steps/toolCallResult"])
    key = "outputs" if method == "steps/toolCallResult" else "content"
    payload: dict[str, Any] = {key: items}
    if key == "outputs":
        payload["tool"] = {"name": rng.choice(["get_iban", "read_file"])}
    else:
        for it in items:
            it["type"] = "text"
    return method, {"request_id": rid, "payload": payload}


def _reference(state: SessionProvenance, spec: ProvenanceSpec) -> dict[str, Any]:
    """Trust, depth, entered and deepest lineage from a whole-graph analysis."""
    from warden.provenance.shared import components

    nodes = dict(state.nodes.items())
    full = components(nodes, spec)
    return {
        "trust": {p: full.reach[p] or Trust.UNKNOWN for p in nodes},
        "depth": dict(full.depth),
        "entered": [
            p
            for p, n in nodes.items()
            if n.step_type in INPUT_STEPS and full.reach[p] is Trust.UNTRUSTED
        ],
        "max": max(full.depth.values(), default=0),
    }


def _observed(state: SessionProvenance, spec: ProvenanceSpec) -> dict[str, Any]:
    return {
        "trust": {p: state.trust(p, spec) for p in state.nodes},
        "depth": {p: state.depth(p, spec) for p in state.nodes},
        "entered": [n.provenance_id for n in state.entered(spec)],
        "max": state.max_depth(spec),
    }


@pytest.mark.parametrize("seed", range(12))
def test_incremental_trust_equals_a_whole_graph_analysis(seed: int) -> None:
    """Cycles and forward references (ids named before they are recorded), read from the
    newest state, from older states after later steps, and from branches (another step
    applied to an old state)."""
    rng = random.Random(seed)
    universe = [f"p{i}" for i in range(60)]
    states = [SessionProvenance()]
    used: set[str] = set()
    # Two bundles' specs in turn (a memo each), and now and then a third (a reload).
    specs = [SPEC, SPEC, ProvenanceSpec(), ProvenanceSpec(trusted_sources=["read_file"])]
    for step in range(25):
        free = [p for p in universe if p not in used]
        fresh = rng.sample(free, k=min(len(free), rng.randint(1, 4)))
        used.update(fresh)
        method, params = _random_params(rng, f"r{step}", fresh, universe)
        base = states[-1] if rng.random() < 0.8 else rng.choice(states)
        spec = rng.choice(specs)
        taken = base.check(method, params, spec)
        if taken.problem is not None:
            continue
        states.append(base.applied(method, params, "allow"))
        for probe in (states[-1], rng.choice(states), rng.choice(states)):
            assert _observed(probe, spec) == _reference(probe, spec)


# -- the per-process cache's byte budget (both backends) -------------------------------


@pytest.fixture
def make_runtime(make_backend_runtime: Callable[..., Runtime]) -> Callable[..., Runtime]:
    return make_backend_runtime


GATES = {"fides": {"enabled": True, "p_t": "ask"}, "camel": {"enabled": True}}
GATES_SPEC = ProvenanceSpec()


def _session(rt: Runtime, n: int) -> AcsClient:
    """A session whose graph holds a user message and ``n`` tool outputs of read_file."""
    c = service_client(rt)
    assert "result" in c.hello(provenance_producer="deterministic")
    assert c.call("steps/sessionStart", {})["result"]["decision"] == "allow"
    u = {
        "type": "text",
        "value": "pay the rent",
        "provenance": {"provenance_id": "u-1", "origin": "user_input"},
    }
    assert c.call("steps/userMessage", {"content": [u]})["result"]["decision"] == "allow"
    outs = [
        {
            "value": f"IBAN GB00ATTACKER{i:06d}",
            "provenance": {"provenance_id": f"o-{i}", "origin": "tool_output"},
        }
        for i in range(n)
    ]
    r = c.call(
        "steps/toolCallResult",
        {"tool": {"name": "read_file"}, "exit_status": "success", "outputs": outs},
    )
    assert r["result"]["decision"] == "allow", r
    return c


def _pay(c: AcsClient, recipient_pid: str) -> dict[str, Any]:
    """A consequential call whose recipient is ``recipient_pid``: what the verdict says,
    without what differs between sessions (step ids)."""
    amount = {"provenance_id": "a-1", "origin": "agent_generated", "derived_from": ["u-1"]}
    r = c.call(
        "steps/toolCallRequest",
        {
            "tool": {"name": "send_money"},
            "arguments": {
                "recipient": {
                    "value": "GB00ATTACKER000001",
                    "provenance": {"provenance_id": recipient_pid, "origin": "user_input"},
                },
                "amount": {"value": 10, "provenance": amount},
            },
        },
    )
    assert_valid_response(r)
    res: dict[str, Any] = r["result"]
    return {
        "decision": res["decision"],
        "reason_codes": res.get("reason_codes"),
        "cited": res.get("cited_provenance_ids"),
        "gates": sorted(r["rule_id"] for r in res.get("policy_references", [])),
    }


def test_the_cache_keeps_a_byte_budget_and_evicted_sessions_decide_the_same(
    make_runtime: Callable[..., Runtime], tmp_path: Path
) -> None:
    bundle = write_bundle(tmp_path, gates=GATES)
    roomy = make_runtime(policy=bundle)
    ref = _session(roomy, 50)
    per_session = roomy.acs.provenance.cached_bytes
    assert per_session > 50 * 600
    expected = _pay(ref, "o-7")
    assert expected["decision"] != "allow"  # the recipient derives from read_file's output
    assert roomy.acs.provenance.evictions == 0

    # Room for two such sessions: opening four evicts the least recently used.
    tight = make_runtime(policy=bundle, provenance_cache_bytes=int(per_session * 2.5))
    tracker = tight.acs.provenance
    clients = [_session(tight, 50)]
    first = tight.store.load_session(clients[0].session_id)
    assert first is not None
    cached_state = tracker.state(first)  # from the cache
    assert tracker.rebuilds == 0
    clients += [_session(tight, 50) for _ in range(3)]
    assert tracker.cached_bytes <= tracker.budget_bytes
    assert tracker.evictions == 2
    assert tracker.cached_sessions() == [clients[2].session_id, clients[3].session_id]
    # The evicted session's state, rebuilt from its chain, equals the one cached before.
    rebuilt = tracker.state(first)
    assert tracker.rebuilds == 1
    fresh = _session(roomy, 50)  # same content, never evicted
    kept = roomy.acs.provenance.state(roomy.store.load_session(fresh.session_id))  # type: ignore[arg-type]
    assert rebuilt == cached_state and rebuilt is not cached_state
    assert [n.provenance_id for n in rebuilt.entered(GATES_SPEC)] == [
        n.provenance_id for n in kept.entered(GATES_SPEC)
    ]
    # ... and the evicted session decides as the never-evicted one does.
    assert _pay(clients[0], "o-7") == expected
    assert tracker.cached_bytes <= tracker.budget_bytes
    # A session larger than the whole budget is never cached, and still decides the same.
    none = make_runtime(policy=bundle, provenance_cache_bytes=1)
    c = _session(none, 50)
    assert none.acs.provenance.cached_sessions() == []
    assert _pay(c, "o-7") == expected
    assert none.acs.provenance.cached_bytes == 0


def test_serve_passes_the_budget_and_freezes_startup_objects(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``warden serve --provenance-cache-bytes`` reaches the tracker, and the objects
    loaded at start are out of the cyclic collector's way before the first request."""
    import gc

    import uvicorn
    from typer.testing import CliRunner

    import warden.server.app as app_module
    from warden.cli import app

    seen: dict[str, Any] = {}

    def fake_create_app(runtime: Runtime, **_: Any) -> str:
        seen["tracker"] = runtime.acs.provenance
        return "app"

    def fake_run(asgi: Any, **_: Any) -> None:
        seen["frozen"] = gc.get_freeze_count()

    monkeypatch.setattr(app_module, "create_app", fake_create_app)
    monkeypatch.setattr(uvicorn, "run", fake_run)
    # The default (tests/conftest.py turns freezing off for the suite's own processes).
    monkeypatch.delenv("WARDEN_GC_FREEZE", raising=False)
    key = write_key(tmp_path / "ikm.key")
    bundle = write_bundle(tmp_path, gates=GATES)
    try:
        r = CliRunner().invoke(
            app,
            [
                "serve",
                "--data-dir",
                str(tmp_path / "data"),
                "--key-file",
                str(key),
                "--policy",
                str(bundle),
                "--provenance-cache-bytes",
                "12345",
            ],
        )
    finally:
        gc.unfreeze()
    assert r.exit_code == 0, r.output
    assert seen["tracker"].budget_bytes == 12345
    assert seen["frozen"] > 10_000
    # gc_freeze = false: serve leaves the collector alone too (decision 334).
    monkeypatch.setenv("WARDEN_GC_FREEZE", "false")
    try:
        off = CliRunner().invoke(
            app,
            ["serve", "--data-dir", str(tmp_path / "data-off"), "--key-file", str(key)]
            + ["--policy", str(bundle)],
        )
    finally:
        gc.unfreeze()
    assert off.exit_code == 0, off.output
    assert seen["frozen"] == 0
    bad = CliRunner().invoke(app, ["serve", "--provenance-cache-bytes", "-1"])
    assert bad.exit_code != 0 and "provenance-cache-bytes" in bad.output
