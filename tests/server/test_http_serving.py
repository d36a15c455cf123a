"""The HTTP serving path's cheap parts (issue 16, third session): one write per response,
one hand-over per event-loop pass to the group committer, and orjson rendering that
writes exactly the bytes the standard encoder writes."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from warden.json_text import compact_text
from warden.server.app import _dump
from warden.server.http_protocol import CoalescingTransport
from warden.store.base import PendingAppend
from warden.store.group_commit import GroupCommitter


class _Transport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []
        self.closed = False
        self.aborted = False

    def write(self, data: Any) -> None:
        self.writes.append(bytes(data))

    def is_closing(self) -> bool:
        return self.closed or self.aborted

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.aborted = True

    def get_write_buffer_size(self) -> int:
        return 0


def test_writes_of_one_loop_pass_leave_as_one_write_in_order() -> None:
    async def run() -> list[bytes]:
        inner = _Transport()
        t = CoalescingTransport(inner, asyncio.get_running_loop())
        t.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n")
        t.write(b"{}")
        assert inner.writes == []  # nothing sent before the pass ends
        assert t.get_write_buffer_size() == 40
        await asyncio.sleep(0)
        t.write(b"next")
        await asyncio.sleep(0)
        return inner.writes

    assert asyncio.run(run()) == [b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}", b"next"]


def test_close_sends_what_is_gathered_first_and_abort_drops_it() -> None:
    async def run() -> tuple[_Transport, _Transport]:
        loop = asyncio.get_running_loop()
        a, b = _Transport(), _Transport()
        ta, tb = CoalescingTransport(a, loop), CoalescingTransport(b, loop)
        ta.write(b"last words")
        ta.close()
        tb.write(b"never sent")
        tb.abort()
        await asyncio.sleep(0)
        return a, b

    a, b = asyncio.run(run())
    assert a.writes == [b"last words"] and a.closed
    assert b.writes == [] and b.aborted


class _BatchStore:
    """Records the size of every append_many batch; every append succeeds."""

    def __init__(self) -> None:
        self.batches: list[int] = []

    def append_many(self, items: list[PendingAppend]) -> list[Exception | None]:
        self.batches.append(len(items))
        return [None] * len(items)


def _pending(i: int) -> PendingAppend:
    return PendingAppend(
        session_id=f"s{i}",
        expected_seq=0,
        entry={"entry_hash": f"{i:064x}"},
        response={},
        head_signature={},
        replay=None,
    )


def test_appends_staged_in_one_loop_pass_commit_in_one_batch() -> None:
    store = _BatchStore()
    committer = GroupCommitter(store)  # type: ignore[arg-type]

    async def run() -> None:
        await asyncio.gather(*(committer.commit(_pending(i)) for i in range(5)))
        await committer.commit(_pending(5))

    try:
        asyncio.run(run())
    finally:
        committer.close()
    assert store.batches == [5, 1]


@pytest.mark.parametrize(
    "body",
    [
        {"jsonrpc": "2.0", "id": "a", "result": {"decision": "allow", "n": [1, True, None]}},
        {"id": 1, "result": {"amount": 1e-7, "big": 1e16, "half": 0.5}},  # floats
        {"id": 2**63, "x": -(2**63) - 1},  # beyond 64 bits
        {"id": None, "text": 'é\u2028\x00\x1f"\\/ 𝄞'},
        {"id": None, "nan": float("nan")},
        {"id": None, "t": (1, 2)},
    ],
)
def test_rendered_bytes_are_the_standard_encoders(body: dict[str, Any]) -> None:
    text = json.dumps(body, ensure_ascii=False, separators=(",", ":"))
    assert _dump(body) == text.encode("utf-8")
    assert compact_text(body) == text  # the stored text (store/sql.py _dumps)


def test_stored_text_keeps_a_lone_surrogate_as_the_standard_encoder_does() -> None:
    body = {"id": None, "text": "\ud800"}
    assert compact_text(body) == json.dumps(body, ensure_ascii=False, separators=(",", ":"))


def test_a_lone_surrogate_fails_as_with_the_standard_encoder() -> None:
    with pytest.raises(UnicodeEncodeError):
        _dump({"id": None, "text": "\ud800"})


class _Acs:
    max_body_bytes = 1024

    async def handle_async(self, body: bytes, committer: Any) -> dict[str, Any]:
        return {"jsonrpc": "2.0", "id": 1, "result": {"read": len(body)}}


def _call_acs(
    headers: list[tuple[bytes, bytes]], chunks: list[bytes], method: str = "POST"
) -> tuple[Any, int]:
    """POST /acs through AcsEndpoint: (the response's status and body, receive() calls)."""
    from warden.server.app import AcsEndpoint

    sent: list[dict[str, Any]] = []
    calls = 0

    async def receive() -> dict[str, Any]:
        nonlocal calls
        calls += 1
        if calls > len(chunks):
            raise AssertionError("read past the body")
        return {"type": "http.request", "body": chunks[calls - 1], "more_body": calls < len(chunks)}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async def fallback(scope: Any, receive: Any, send: Any) -> None:
        raise AssertionError("not /acs")

    scope = {"type": "http", "path": "/acs", "method": method, "headers": headers}
    asyncio.run(AcsEndpoint(_Acs(), None, fallback)(scope, receive, send))  # type: ignore[arg-type]
    _call_acs.last_headers = dict(sent[0]["headers"])  # type: ignore[attr-defined]
    return (sent[0]["status"], json.loads(sent[1]["body"])), calls


def test_acs_declared_length_over_the_cap_is_answered_unread() -> None:
    (status, body), calls = _call_acs([(b"content-length", b"2000000")], [b"x" * 1024] * 3)
    assert calls == 0
    assert status == 200
    assert body["id"] is None
    assert body["error"]["code"] == -32600
    assert body["error"]["data"]["reason"] == "body_too_large"


def test_acs_body_without_a_length_still_stops_at_the_cap() -> None:
    (status, body), calls = _call_acs([], [b"x" * 1000, b"x" * 1000, b"x" * 1000])
    assert calls == 2
    assert body["error"]["data"]["reason"] == "body_too_large"


def test_acs_declared_length_at_the_cap_is_read() -> None:
    (status, body), calls = _call_acs([(b"content-length", b"1024")], [b"x" * 1024])
    assert calls == 1
    assert body["result"] == {"read": 1024}


def test_acs_other_methods_are_a_json_rpc_error_with_405() -> None:
    """A fresh user's finding: GET /acs answered FastAPI's ``{"detail": ...}``."""
    for method in ("GET", "PUT", "DELETE"):
        (status, body), calls = _call_acs([], [b"{}"], method=method)
        assert (status, calls) == (405, 0)
        assert _call_acs.last_headers[b"allow"] == b"POST"  # type: ignore[attr-defined]
        assert body["jsonrpc"] == "2.0" and body["id"] is None
        assert body["error"]["code"] == -32600
        assert body["error"]["data"]["reason"] == "method_not_allowed"
        assert "POST" in body["error"]["message"]
