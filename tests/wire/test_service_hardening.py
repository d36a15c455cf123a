"""Fixes from the hostile review of the ACS service: every authenticated request gets a
signed answer, fixed wire text for internal failures, and concurrent calls on one session
queue instead of failing."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from conftest import Server, agent_client, assert_valid_response, service_client

from warden.errors import StoreUnavailable
from warden.runtime import Runtime
from warden.wire.acs.client import AcsClient, verify_response


def _signed(resp: dict[str, Any], client: AcsClient) -> bool:
    return verify_response(resp, client.key)


@pytest.mark.parametrize(
    "stamp",
    [
        lambda now: now.strftime("%Y-%m-%dt%H:%M:%S.000z"),  # RFC 3339 allows lowercase t/z
        lambda now: now.strftime("%Y-%m-%dT%H:%M:%S+00:00"),
    ],
    ids=["lowercase", "offset"],
)
def test_rfc3339_variants_within_skew_are_accepted(runtime: Runtime, stamp: Any) -> None:
    c = service_client(runtime)
    c.hello()
    resp = c.call("steps/sessionStart", {}, timestamp=stamp(datetime.now(UTC)))
    assert resp["result"]["decision"] == "allow", resp
    assert "chain_hash" in resp["result"]


@pytest.mark.parametrize("stamp", ["0000-01-01T00:00:00Z", "2026-06-30T23:59:60Z"])
def test_unrepresentable_timestamp_is_a_signed_error_not_a_crash(
    runtime: Runtime, stamp: str
) -> None:
    c = service_client(runtime)
    c.hello()
    before = runtime.store.counts()["entries"]
    resp = c.call("steps/sessionStart", {}, timestamp=stamp)
    assert resp["error"]["code"] == -32600, resp
    assert resp["error"]["data"]["reason"] == "bad_timestamp"
    assert resp["id"] is not None
    assert _signed(resp, c)
    assert_valid_response(resp)
    assert runtime.store.counts()["entries"] == before


def test_unrepresentable_timestamp_on_hello_is_signed(runtime: Runtime) -> None:
    c = service_client(runtime)
    resp = c.call(
        "handshake/hello",
        {
            "acs_versions_supported": ["0.1.0"],
            "methods_implemented": ["steps/sessionStart"],
            "transports_supported": ["http"],
            "provenance_producer": "none",
        },
        timestamp="0000-01-01T00:00:00Z",
    )
    assert resp["error"]["code"] == -32600
    assert _signed(resp, c)
    assert runtime.store.counts()["sessions"] == 1  # only the agent's registration chain


def test_step_with_another_major_version_is_refused(runtime: Runtime) -> None:
    c = service_client(runtime)
    c.hello()
    env = c.envelope("steps/sessionStart", {}, sign=False)
    env["params"]["acs_version"] = "9.9.9"
    from warden.wire.acs.signing import sign_request

    resp = c.send(sign_request(env, c.key, c.key_id))
    assert resp["error"]["code"] == -32001
    assert resp["error"]["data"]["supported_versions"] == ["0.1.0"]
    assert _signed(resp, c)
    assert runtime.store.counts()["entries"] == 1  # only the agent's registration entry


def test_store_failure_is_a_signed_deny_with_fixed_text(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    c = service_client(runtime)
    c.hello()

    def broken(items: Any) -> Any:
        raise StoreUnavailable("store error: OperationalError: database is locked")

    monkeypatch.setattr(runtime.store, "append_many", broken)
    resp = c.call("steps/sessionStart", {})
    result = resp["result"]
    assert result["decision"] == "deny"
    assert result["reason_codes"] == ["store_unavailable"]
    assert "OperationalError" not in result["reasoning"]
    assert "locked" not in result["reasoning"]
    assert "chain_hash" not in result
    assert _signed(resp, c)
    assert_valid_response(resp)


def test_store_failure_on_hello_is_a_signed_session_refusal(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    c = service_client(runtime)

    def broken(*a: Any, **k: Any) -> Any:
        raise StoreUnavailable("store error: OperationalError: disk I/O error")

    monkeypatch.setattr(runtime.store, "create_session", broken)
    resp = c.hello()
    assert resp["error"]["code"] == -32000
    assert resp["error"]["data"]["reason"] == "store_unavailable"
    assert "disk" not in resp["error"]["message"]
    assert _signed(resp, c)


def test_parallel_calls_on_one_session_all_decide_in_process(runtime: Runtime) -> None:
    c = service_client(runtime, track_chain=False)
    c.hello()
    c.call("steps/sessionStart", {})
    results: list[dict[str, Any]] = []

    def call(i: int) -> None:
        results.append(c.tool_call("read_file", {"path": f"/p/{i}"}))

    threads = [threading.Thread(target=call, args=(i,)) for i in range(50)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    decisions = [r.get("result", {}).get("decision") for r in results]
    assert decisions == ["allow"] * 50, [r for r in results if "result" not in r][:2]
    hashes = {r["result"]["chain_hash"] for r in results}
    assert len(hashes) == 50
    assert runtime.store.load_session(c.session_id, fresh=True).head_seq == 50  # type: ignore[union-attr]


def test_parallel_calls_on_one_session_all_decide_over_http(server: Server) -> None:
    with httpx.Client(timeout=30) as http:

        def send(body: bytes) -> dict[str, Any]:
            out: dict[str, Any] = http.post(server.acs_url, content=body).json()
            return out

        c = agent_client(send, server.database_url, track_chain=False)
        c.hello()
        c.call("steps/sessionStart", {})
    results: list[dict[str, Any]] = []

    def call(i: int) -> None:
        with httpx.Client(timeout=30) as http:
            c2 = agent_client(
                lambda b: http.post(server.acs_url, content=b).json(),
                server.database_url,
                session_id=c.session_id,
                agent_id=c.agent_id,
                track_chain=False,
            )
            results.append(c2.tool_call("read_file", {"path": f"/p/{i}"}))

    threads = [threading.Thread(target=call, args=(i,)) for i in range(50)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    bad = [r for r in results if r.get("result", {}).get("decision") != "allow"]
    assert bad == []
    assert len({r["result"]["chain_hash"] for r in results}) == 50


def test_skew_is_checked_for_offset_timestamps(runtime: Runtime) -> None:
    c = service_client(runtime)
    c.hello()
    past = (datetime.now(UTC) - timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M:%S-00:00")
    resp = c.call("steps/sessionStart", {}, timestamp=past)
    assert resp["error"]["code"] == -32006
