"""Bodies that used to break the AdCP bindings (issue 14 item 6), over a real server.

Arrays nested past the request limit (128 levels; ``[``×1000 used to answer a plain-text
500 or reset the connection), strings holding a lone surrogate escape, and paths under
``/adcp`` that name no task: each gets AdCP's error envelope (validated like every
reply) on a connection that stays open, and nothing is written."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from adcp_helpers import Live, check_response, live, plan
from sqlalchemy import func, select

from warden.runtime import Runtime
from warden.store.schema import metadata

#: The nesting limit (warden.crypto.canonical.MAX_REQUEST_DEPTH, docs/decisions.md 185).
MAX_REQUEST_DEPTH = 128
MCP_HEADERS = {"accept": "application/json, text/event-stream"}


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    from conftest import DEFAULT_POLICY, write_key

    from warden.settings import Settings

    data = tmp_path_factory.mktemp("adcp-bad-bodies")
    settings = Settings(data_dir=data, policy=DEFAULT_POLICY, key_file=write_key(data / "ikm.key"))
    rt = Runtime.start(settings)
    try:
        with live(rt) as s:
            s.rest().call("sync_plans", {"idempotency_key": str(uuid.uuid4()), "plans": [plan()]})
            yield s
    finally:
        rt.close()


@pytest.fixture
def http(srv: Live) -> Iterator[httpx.Client]:
    """One keep-alive connection for the bad request and the good one after it."""
    limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
    with httpx.Client(base_url=srv.url, timeout=30, limits=limits) as client:
        yield client


def snapshot(rt: Runtime) -> dict[str, int]:
    """Rows per table, but for ``log_checkpoints``: the log's checkpoint worker may sign
    a checkpoint of earlier leaves at any tick (a slow refused request gives it time);
    that is no write of the request. Its leaves are counted in their own tables."""
    with rt.store.engine.connect() as conn:
        return {
            t.name: int(conn.execute(select(func.count()).select_from(t)).scalar_one())
            for t in metadata.sorted_tables
            if t.name != "log_checkpoints"
        }


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def _sync_body(slot: str) -> bytes:
    body = {"idempotency_key": str(uuid.uuid4()), "plans": [plan("deep", policies="SLOT")]}
    return json.dumps(body).replace('"SLOT"', slot).encode()


def _tools_call(task: str, arguments: str, rid: str = "1") -> bytes:
    return (
        '{"jsonrpc":"2.0","id":'
        + rid
        + ',"method":"tools/call","params":{"name":"'
        + task
        + '","arguments":'
        + arguments
        + "}}"
    ).encode()


def _failure(r: httpx.Response, task: str, status: int, code: str) -> dict[str, Any]:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/json"), r.text
    assert r.headers.get("connection", "").lower() != "close"
    body: dict[str, Any] = json.loads(r.content)
    check_response(task, body, failed=True)
    assert body["adcp_error"]["code"] == code, body
    return body


def _still_served(http: httpx.Client, srv: Live) -> None:
    """The same connection answers the next, valid request."""
    r = http.post(
        "/adcp/get_adcp_capabilities",
        json={"adcp_major_version": 3},
        headers={"authorization": f"Bearer {srv.agent_token}"},
    )
    assert r.status_code == 200, r.text


DEPTHS = [MAX_REQUEST_DEPTH + 1, 400, 1000, 100_000]


@pytest.mark.parametrize("depth", DEPTHS)
@pytest.mark.parametrize(
    ("task", "make"),
    [
        ("sync_plans", lambda d: _sync_body(nested(d))),
        ("sync_plans", lambda d: nested(d).encode()),
        ("get_adcp_capabilities", lambda d: ('{"context":{"x":' + nested(d) + "}}").encode()),
    ],
    ids=["in_a_plan", "bare", "in_context"],
)
def test_deep_nesting_on_rest_is_invalid_request(
    srv: Live, http: httpx.Client, task: str, make: Any, depth: int
) -> None:
    before = snapshot(srv.rt)
    r = http.post(
        f"/adcp/{task}",
        content=make(depth),
        headers={"authorization": f"Bearer {srv.agent_token}", "content-type": "application/json"},
    )
    body = _failure(r, task, 400, "INVALID_REQUEST")
    assert "nested deeper than 128" in body["adcp_error"]["message"]
    assert snapshot(srv.rt) == before
    _still_served(http, srv)


@pytest.mark.parametrize("depth", DEPTHS)
@pytest.mark.parametrize(
    "make",
    [
        lambda d: _tools_call("sync_plans", '{"plans":' + nested(d) + "}"),
        lambda d: nested(d).encode(),
    ],
    ids=["tools_call_arguments", "bare"],
)
def test_deep_nesting_on_mcp_is_invalid_request(
    srv: Live, http: httpx.Client, make: Any, depth: int
) -> None:
    before = snapshot(srv.rt)
    r = http.post(
        "/mcp",
        content=make(depth),
        headers={"authorization": f"Bearer {srv.agent_token}", **MCP_HEADERS},
    )
    body = _failure(r, "sync_plans", 400, "INVALID_REQUEST")
    assert "nested deeper than 128" in body["adcp_error"]["message"]
    assert snapshot(srv.rt) == before
    _still_served(http, srv)


def test_nesting_at_the_limit_is_served(srv: Live, http: httpx.Client) -> None:
    """Control: 128 levels in all (the body object, ``context``, 126 arrays) is fine."""
    context = '{"x":' + nested(MAX_REQUEST_DEPTH - 2) + "}"
    r = http.post(
        "/adcp/get_adcp_capabilities",
        content=('{"adcp_major_version":3,"context":' + context + "}").encode(),
        headers={"authorization": f"Bearer {srv.agent_token}", "content-type": "application/json"},
    )
    assert r.status_code == 200, r.text
    assert json.loads(r.content)["context"] == json.loads(context)


LONE = '"\\ud800"'


@pytest.mark.parametrize(
    ("name", "body"),
    [
        ("context_id", '{"context_id":' + LONE + "}"),
        ("member_name", '{"context":{' + LONE + ":1}}"),
        ("context_value", '{"context":{"a":' + LONE + "}}"),
    ],
)
def test_lone_surrogates_on_rest_are_invalid_request(
    srv: Live, http: httpx.Client, name: str, body: str
) -> None:
    before = snapshot(srv.rt)
    r = http.post(
        "/adcp/get_adcp_capabilities",
        content=body.encode(),
        headers={"authorization": f"Bearer {srv.agent_token}"},
    )
    answer = _failure(r, "get_adcp_capabilities", 400, "INVALID_REQUEST")
    assert "lone surrogate" in answer["adcp_error"]["message"]
    assert answer["context_id"] == "ctx_rest" and "context" not in answer  # nothing echoed
    assert snapshot(srv.rt) == before
    _still_served(http, srv)


@pytest.mark.parametrize(
    ("name", "body", "in_result"),
    [
        ("context_id", _tools_call("sync_plans", '{"context_id":' + LONE + "}"), True),
        ("member_name", _tools_call("sync_plans", "{" + LONE + ":1}"), True),
        ("jsonrpc_id", _tools_call("sync_plans", "{}", rid=LONE), False),
    ],
)
def test_lone_surrogates_on_mcp_are_invalid_request(
    srv: Live, http: httpx.Client, name: str, body: bytes, in_result: bool
) -> None:
    before = snapshot(srv.rt)
    r = http.post(
        "/mcp", content=body, headers={"authorization": f"Bearer {srv.agent_token}", **MCP_HEADERS}
    )
    if in_result:  # a readable tools/call: the failure is the tool's result (isError)
        assert r.status_code == 200, r.text
        message = json.loads(r.content)
        assert message["id"] == 1
        result = message["result"]
        assert result["isError"] is True
        check_response("sync_plans", result["structuredContent"], failed=True)
        error = result["structuredContent"]["adcp_error"]
        assert error["code"] == "INVALID_REQUEST" and "lone surrogate" in error["message"]
    else:  # an id that cannot be echoed: a plain AdCP failure
        _failure(r, "sync_plans", 400, "INVALID_REQUEST")
    assert snapshot(srv.rt) == before
    _still_served(http, srv)


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/adcp/sync_plans/"),
        ("POST", "/adcp/get_adcp_capabilities/"),
        ("GET", "/adcp"),
        ("POST", "/adcp/"),
        ("POST", "/adcp/sync_plans/extra"),
    ],
)
def test_paths_under_adcp_that_name_no_task(
    srv: Live, http: httpx.Client, method: str, path: str
) -> None:
    before = snapshot(srv.rt)
    r = http.request(
        method,
        path,
        json={"adcp_major_version": 3},
        headers={"authorization": f"Bearer {srv.agent_token}"},
        follow_redirects=False,
    )
    body = _failure(r, "sync_plans", 404, "UNSUPPORTED_FEATURE")
    assert "location" not in r.headers
    assert r.headers["x-adcp-status"] == "failed" and body["status"] == "failed"
    assert snapshot(srv.rt) == before


BAD_UTF8 = b'{"adcp_major_version": 3, "context": {"x": "\xff"}}'


def test_bad_utf8_is_one_message_on_rest_and_mcp(srv: Live, http: httpx.Client) -> None:
    before = snapshot(srv.rt)
    auth = {"authorization": f"Bearer {srv.agent_token}"}
    rest = _failure(
        http.post("/adcp/get_adcp_capabilities", content=BAD_UTF8, headers=auth),
        "get_adcp_capabilities",
        400,
        "INVALID_REQUEST",
    )
    mcp = _failure(
        http.post("/mcp", content=BAD_UTF8, headers={**auth, **MCP_HEADERS}),
        "get_adcp_capabilities",
        400,
        "INVALID_REQUEST",
    )
    assert rest["adcp_error"]["message"] == mcp["adcp_error"]["message"]
    assert "body is not valid UTF-8" in rest["adcp_error"]["message"]
    assert "codec" not in rest["adcp_error"]["message"]  # never Python's own words
    assert snapshot(srv.rt) == before
    _still_served(http, srv)


@pytest.mark.parametrize("content", [b"", b"  \r\n\t "], ids=["empty", "whitespace"])
@pytest.mark.parametrize("task", ["get_adcp_capabilities", "sync_plans"])
def test_an_empty_body_on_rest_is_a_parse_error(
    srv: Live, http: httpx.Client, task: str, content: bytes
) -> None:
    before = snapshot(srv.rt)
    r = http.post(
        f"/adcp/{task}",
        content=content,
        headers={"authorization": f"Bearer {srv.agent_token}", "content-type": "application/json"},
    )
    body = _failure(r, task, 400, "INVALID_REQUEST")
    assert "the body is empty" in body["adcp_error"]["message"], body
    assert snapshot(srv.rt) == before
    _still_served(http, srv)


# --- JSON-RPC that the SDK answered with a pydantic dump or not at all; the body
# limit and the content type, one answer on both transports (decisions 830–834).

JSON_MCP = {"content-type": "application/json", **MCP_HEADERS}
LIST = '"method":"tools/list"'


@pytest.mark.parametrize(
    ("body", "rid", "detail"),
    [
        ('{"id":1,' + LIST + "}", 1, 'jsonrpc must be "2.0"'),
        ('{"jsonrpc":"1.0","id":"a",' + LIST + "}", "a", 'jsonrpc must be "2.0"'),
        ('{"jsonrpc":"2.0","id":{"a":1},' + LIST + "}", None, "id must be a string or an integer"),
        ('{"jsonrpc":"2.0","id":null,' + LIST + "}", None, "id must be a string or an integer"),
        ('{"jsonrpc":"2.0","id":true,' + LIST + "}", None, "id must be a string or an integer"),
        ('{"jsonrpc":"2.0","id":1.5,' + LIST + "}", None, "id must be a string or an integer"),
        ('{"jsonrpc":"2.0","id":7}', 7, "no method"),
        ("[]", None, "an empty batch"),
        ('"tools/list"', None, "not a JSON object"),
        ('{"method":"notifications/initialized"}', None, 'jsonrpc must be "2.0"'),
    ],
    ids=["no_jsonrpc", "jsonrpc_1", "object_id", "null_id", "true_id", "fraction_id",
         "no_method", "empty_batch", "string", "bad_notification"],
)  # fmt: skip
def test_mcp_answers_what_is_not_json_rpc_with_invalid_request(
    srv: Live, http: httpx.Client, body: str, rid: Any, detail: str
) -> None:
    """-32600 in the proxy's words with the caller's id when it is one, never the SDK's
    -32602 pydantic dump, and never a silent 202 for an id that is not one."""
    before = snapshot(srv.rt)
    auth = {"authorization": f"Bearer {srv.agent_token}"}
    r = http.post("/mcp", content=body.encode(), headers={**auth, **JSON_MCP})
    assert r.status_code == 400, r.text
    assert r.headers["content-type"] == "application/json"
    answer = r.json()
    assert answer == {
        "jsonrpc": "2.0",
        "id": rid,
        "error": {"code": -32600, "message": f"Invalid Request: {detail}"},
    }
    assert "pydantic" not in r.text and "validation error" not in r.text.lower()
    assert snapshot(srv.rt) == before
    _still_served(http, srv)


def test_a_batch_on_mcp_gets_one_invalid_request_per_request(srv: Live, http: httpx.Client) -> None:
    auth = {"authorization": f"Bearer {srv.agent_token}"}
    note = '{"jsonrpc":"2.0","method":"notifications/initialized"}'
    batch = f'[{{"jsonrpc":"2.0","id":1,{LIST}}},{note},{{"jsonrpc":"2.0","id":"b",{LIST}}}]'
    r = http.post("/mcp", content=batch.encode(), headers={**auth, **JSON_MCP})
    assert r.status_code == 400, r.text
    text = "Invalid Request: batches are not supported"
    assert r.json() == [
        {"jsonrpc": "2.0", "id": rid, "error": {"code": -32600, "message": text}}
        for rid in (1, "b")
    ]
    # Only notifications: still answered (HTTP answers every POST), with id null.
    r = http.post("/mcp", content=f"[{note}]".encode(), headers={**auth, **JSON_MCP})
    assert r.status_code == 400, r.text
    assert r.json() == {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": text}}


def test_a_tools_call_with_a_null_id_runs_nothing_and_is_answered(
    srv: Live, http: httpx.Client
) -> None:
    """It used to pass as a notification: 202, empty body, the plan not synced."""
    before = snapshot(srv.rt)
    args = {"idempotency_key": str(uuid.uuid4()), "plans": [plan("null-id")]}
    call = {"jsonrpc": "2.0", "id": None, "method": "tools/call",
            "params": {"name": "sync_plans", "arguments": args}}  # fmt: skip
    auth = {"authorization": f"Bearer {srv.agent_token}"}
    r = http.post("/mcp", content=json.dumps(call).encode(), headers={**auth, **JSON_MCP})
    assert r.status_code == 400, r.text
    assert r.json()["id"] is None and r.json()["error"]["code"] == -32600
    assert snapshot(srv.rt) == before


def _chunks(data: bytes) -> Iterator[bytes]:
    for i in range(0, len(data), 65536):
        yield data[i : i + 65536]


@pytest.mark.parametrize("declared", [True, False], ids=["content_length", "chunked"])
def test_a_body_over_the_limit_is_413_and_one_message_on_rest_and_mcp(
    srv: Live, http: httpx.Client, declared: bool
) -> None:
    before = snapshot(srv.rt)
    auth = {"authorization": f"Bearer {srv.agent_token}"}
    args = '{"plan_ids":["%s"]}' % ("x" * 1_100_000)
    rest_body = args.encode()
    mcp_body = _tools_call("get_plan_audit_logs", args)
    rest = http.post(
        "/adcp/get_plan_audit_logs",
        content=rest_body if declared else _chunks(rest_body),
        headers={**auth, "content-type": "application/json"},
    )
    mcp = http.post(
        "/mcp", content=mcp_body if declared else _chunks(mcp_body), headers={**auth, **JSON_MCP}
    )
    answers = []
    for r in (rest, mcp):
        assert r.status_code == 413, r.text
        body = json.loads(r.content)
        check_response("get_plan_audit_logs", body, failed=True)
        answers.append(body)
    assert answers[0]["adcp_error"] == answers[1]["adcp_error"]
    assert answers[0]["adcp_error"] == {
        "code": "INVALID_REQUEST",
        "message": f"the body is larger than {1 << 20} bytes",
        "recovery": answers[0]["adcp_error"]["recovery"],
    }
    assert rest.headers["x-adcp-status"] == "failed"
    assert snapshot(srv.rt) == before


NOT_JSON = "the body must be one JSON object sent with content-type: application/json"


@pytest.mark.parametrize(
    "media", ["text/plain", None, "application/x-www-form-urlencoded", "application/jsonx"]
)
def test_a_body_not_sent_as_json_is_415_and_one_message_on_rest_and_mcp(
    srv: Live, http: httpx.Client, media: str | None
) -> None:
    """REST used to run it (200); /mcp answered a bare ``Invalid Content-Type header``."""
    before = snapshot(srv.rt)
    auth = {"authorization": f"Bearer {srv.agent_token}"}
    typed = {"content-type": media} if media is not None else {}
    sync = {"idempotency_key": str(uuid.uuid4()), "plans": [plan("not-json")]}
    rest = _failure(
        http.post("/adcp/sync_plans", content=json.dumps(sync).encode(), headers={**auth, **typed}),
        "sync_plans",
        415,
        "INVALID_REQUEST",
    )
    listed = _failure(
        http.post(
            "/mcp",
            content=('{"jsonrpc":"2.0","id":1,' + LIST + "}").encode(),
            headers={**auth, **MCP_HEADERS, **typed},
        ),
        "sync_plans",
        415,
        "INVALID_REQUEST",
    )
    # A readable tools/call: the failure is the tool's result, as for every body problem.
    r = http.post(
        "/mcp",
        content=_tools_call("sync_plans", json.dumps(sync)),
        headers={**auth, **MCP_HEADERS, **typed},
    )
    assert r.status_code == 200, r.text
    assert r.json()["id"] == 1 and r.json()["result"]["isError"] is True
    called = r.json()["result"]["structuredContent"]
    check_response("sync_plans", called, failed=True)
    for answer in (rest, listed, called):
        assert answer["adcp_error"]["code"] == "INVALID_REQUEST"
        assert answer["adcp_error"]["message"] == NOT_JSON
    assert snapshot(srv.rt) == before
    _still_served(http, srv)


@pytest.mark.parametrize("media", ["application/json; charset=utf-8", "Application/JSON"])
def test_json_with_parameters_or_in_capitals_is_served_on_rest_and_mcp(
    srv: Live, http: httpx.Client, media: str
) -> None:
    auth = {"authorization": f"Bearer {srv.agent_token}", "content-type": media}
    rest = http.post("/adcp/get_adcp_capabilities", content=b"{}", headers=auth)
    assert rest.status_code == 200, rest.text
    mcp = http.post(
        "/mcp", content=_tools_call("get_adcp_capabilities", "{}"), headers={**auth, **MCP_HEADERS}
    )
    assert mcp.status_code == 200, mcp.text
    assert mcp.json()["result"].get("isError") is not True, mcp.text
