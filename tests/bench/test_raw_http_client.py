"""bench/acs_decision.py's lean load generator (issue 16, fourth session): the raw-socket
client reads each answer whole on a keep-alive connection, whatever the segments, and
refuses what is not an ACS answer; and against a real ``warden serve`` it gets real,
signed, committed decisions."""

from __future__ import annotations

import json
import socket
import sys
import threading
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

from acs_decision import RawAcsConnection  # noqa: E402


def _serve_script(
    chunks: list[bytes], reads: int, *, hang_up: bool = False
) -> tuple[int, list[bytes]]:
    """A one-connection server that reads ``reads`` requests' bytes (until the body it
    announced has arrived) and answers with ``chunks``, one ``sendall`` each, after the
    last one, then waits for the client to close (or, ``hang_up``, closes at once);
    returns its port and the list that collects what it read."""
    listener = socket.create_server(("127.0.0.1", 0))
    got: list[bytes] = []

    def run() -> None:
        conn, _ = listener.accept()
        with conn, listener:
            for _ in range(reads):
                data = b""
                while b"\r\n\r\n" not in data:
                    data += conn.recv(65536)
                head, _, body = data.partition(b"\r\n\r\n")
                length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
                while len(body) < length:
                    body += conn.recv(65536)
                got.append(head + b"\r\n\r\n" + body)
            for chunk in chunks:
                conn.sendall(chunk)
                threading.Event().wait(0.01)  # separate segments
            conn.settimeout(5)
            while not hang_up and conn.recv(
                65536
            ):  # until the client closes: no reset under its reads
                pass

    threading.Thread(target=run, daemon=True).start()
    return listener.getsockname()[1], got


def _answer(body: bytes, *, status: str = "200 OK", length: bool = True) -> bytes:
    head = f"HTTP/1.1 {status}\r\ncontent-type: application/json\r\n"
    if length:
        head += f"Content-Length: {len(body)}\r\n"
    return (head + "\r\n").encode() + body


def test_the_request_is_one_post_with_the_body_and_its_length() -> None:
    body = b'{"jsonrpc":"2.0"}'
    request = RawAcsConnection.request(body)
    head, _, rest = request.partition(b"\r\n\r\n")
    assert head.startswith(b"POST /acs HTTP/1.1\r\n")
    assert b"Content-Length: 17" in head.split(b"\r\n")
    assert rest == body


def test_answers_split_across_segments_and_back_to_back_are_read_whole() -> None:
    first, second = b'{"a":1}', b'{"b":"' + b"x" * 5000 + b'"}'
    both = _answer(first) + _answer(second)
    # Split inside the first answer's headers, inside the second's body.
    port, got = _serve_script([both[:20], both[20:60], both[60:-100], both[-100:]], reads=1)
    conn = RawAcsConnection(port)
    assert conn.post(RawAcsConnection.request(b"{}")) == first
    # What arrived of the second answer with the first is kept for the next post.
    assert conn.post(RawAcsConnection.request(b"[]")) == second
    conn.sock.close()
    assert json.loads(got[0].partition(b"\r\n\r\n")[2]) == {}


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        (_answer(b"{}", status="500 Internal Server Error"), "unexpected answer"),
        (_answer(b"{}", length=False), "without Content-Length"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n", "chunked"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n{}", "closed the connection"),
    ],
)
def test_anything_but_a_whole_acs_answer_raises(answer: bytes, why: str) -> None:
    port, _ = _serve_script([answer], reads=1, hang_up=why == "closed the connection")
    conn = RawAcsConnection(port)
    with pytest.raises(ConnectionError, match=why):
        conn.post(RawAcsConnection.request(b"{}"))
    conn.sock.close()


def test_against_warden_serve_every_timed_request_is_a_committed_decision(
    tmp_path: Path,
) -> None:
    from acs_decision import (
        _free_port,
        _http_load,
        bundle_100_rules,
        register_agent,
        start_serve,
        wait_ready,
        write_key,
    )

    from warden.store import open_store

    policy = tmp_path / "bench-100.yaml"
    policy.write_text(bundle_100_rules())
    data = tmp_path / "data"
    write_key(data / "ikm.key")
    url = f"sqlite:///{data / 'warden.db'}"
    register_agent(url)
    port = _free_port()
    server = start_serve(port, data, policy, tmp_path / "serve.log", "--sqlite-sync", "NORMAL")
    try:
        wait_ready(port)
        _wall, latencies, allowed = _http_load(port, 16, 1, 2, "raw")
    finally:
        server.terminate()
        server.wait(30)
    assert len(latencies) == 16
    assert allowed == 16
    store = open_store(url)
    try:
        # Two sessions: each its sessionStart and its 8 timed steps, chained and durable.
        assert store.counts()["entries"] == 2 * (1 + 8)
    finally:
        store.close()
