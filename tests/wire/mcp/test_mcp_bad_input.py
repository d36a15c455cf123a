"""What the proxy answers for each line it cannot accept (decisions 690–692), without a
process: the classification of the raw line, which every stdin (a pipe, a socket, a
terminal or a regular file, decision 1200) goes through."""

from __future__ import annotations

import json
from typing import Any

import mcp_types as types
import pytest

from warden.wire.mcp.bad_input import Rejection, message_of, parse_line

DEEP = b"[" * 250 + b"]" * 250

#: line, then (code, id) of each error answered; [] for none.
CASES: list[tuple[bytes, list[tuple[int, Any]]]] = [
    (b"{not json}", [(-32700, None)]),
    (b"\xff\xfe garbage", [(-32700, None)]),
    (b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"a":"\\ud800"}}', [(-32700, None)]),
    (b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"a":' + DEEP + b"}}", [(-32700, None)]),
    (b"{}", [(-32600, None)]),
    (b'"hello"', [(-32600, None)]),
    (b'{"jsonrpc":"2.0","id":5}', [(-32600, 5)]),
    (b'{"jsonrpc":"2.0","id":"a","method":7}', [(-32600, "a")]),
    (b'{"id":7,"method":"tools/list"}', [(-32600, 7)]),
    (b'{"jsonrpc":"2.0","id":true}', [(-32600, None)]),
    (b'[{"jsonrpc":"2.0","id":996,"method":"ping"},1,{"jsonrpc":"2.0","method":"x"}]',
     [(-32600, 996), (-32600, None)]),
    (b"[]", [(-32600, None)]),
    (b'[{"jsonrpc":"2.0","method":"x"}]', []),
    (b'{"method":"notifications/initialized"}', []),
]  # fmt: skip


def answered(rejection: Rejection) -> list[tuple[int, Any]]:
    for error in rejection.errors:
        assert set(error) == {"jsonrpc", "id", "error"} and error["jsonrpc"] == "2.0"
    return [(e["error"]["code"], e["id"]) for e in rejection.errors]


@pytest.mark.parametrize(("line", "expected"), CASES)
def test_each_line_is_refused_with_its_code_and_id(
    line: bytes, expected: list[tuple[int, Any]]
) -> None:
    rejection = parse_line(line)
    assert isinstance(rejection, Rejection)
    assert answered(rejection) == expected
    if not expected:
        assert rejection.answer is None
    elif rejection.batch:
        assert [e["id"] for e in json.loads(rejection.answer or b"")] == [e[1] for e in expected]
    else:
        assert json.loads(rejection.answer or b"")["id"] == expected[0][1]


@pytest.mark.parametrize("rid", [b"1.5", b"null"])
def test_an_id_the_model_would_drop_is_refused_not_taken_for_a_notification(rid: bytes) -> None:
    rejection = parse_line(b'{"jsonrpc":"2.0","id":' + rid + b',"method":"tools/list"}')
    assert isinstance(rejection, Rejection)
    assert answered(rejection) == [(-32600, None)]


def test_valid_messages_pass() -> None:
    request = parse_line(b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}')
    assert isinstance(request, types.JSONRPCRequest) and request.id == 1
    # A notification whose params hold an "id" is still a notification.
    note = parse_line(b'{"jsonrpc":"2.0","method":"notifications/x","params":{"id":3}}')
    assert isinstance(note, types.JSONRPCNotification)


TOOLS_CALL = b'{"jsonrpc":"2.0","id":23,"method":"tools/call","params":{"name":"echo",'

#: Lines the SDK's model accepts and Warden's strict parse refuses (decisions 760–762):
#: line, (code, id), a part of the message.
STRICT: list[tuple[bytes, tuple[int, Any], str]] = [
    (TOOLS_CALL + b'"arguments":{"text":"x","n":NaN}}}', (-32700, 23), "token NaN"),
    (TOOLS_CALL + b'"arguments":{"n":Infinity}}}', (-32700, 23), "token Infinity"),
    (TOOLS_CALL + b'"arguments":{"n":-Infinity}}}', (-32700, 23), "token -Infinity"),
    (TOOLS_CALL + b'"arguments":{"n":1e400}}}', (-32700, 23), "1e400 overflows"),
    (TOOLS_CALL + b'"arguments":{"n":-1E+999}}}', (-32700, 23), "overflows"),
    (TOOLS_CALL + b'"arguments":{},"name":"read_file"}}', (-32700, 23), "duplicate object key"),
    (b'{"jsonrpc":"2.0","id":1,"id":2,"method":"ping"}', (-32700, None), "key 'id'"),
    (b'{"jsonrpc":"2.0","id":"p","method":"ping","params":{"n":NaN}}', (-32700, "p"), "NaN"),
    (b'{"jsonrpc":"2.0","method":"notifications/x","params":{"n":NaN}}', (-32700, None), "NaN"),
    (b"[" * 201 + b"]" * 201, (-32700, None), "deeper than 200"),
    (TOOLS_CALL + b'"arguments":{"a":[1,123456789012345678901234567890]}}}',
     (-32602, 23), "/params/arguments/a/1"),
    (TOOLS_CALL + b'"arguments":{"a/b":-1152921504606846976}}}',
     (-32602, 23), "/params/arguments/a~1b"),
]  # fmt: skip


@pytest.mark.parametrize(("line", "expected", "says"), STRICT)
def test_what_is_not_strict_json_is_a_parse_error(
    line: bytes, expected: tuple[int, Any], says: str
) -> None:
    rejection = parse_line(line)
    assert isinstance(rejection, Rejection)
    assert answered(rejection) == [expected]
    assert says in rejection.errors[0]["error"]["message"]
    assert json.loads(rejection.answer or b"")["id"] == expected[1]


@pytest.mark.parametrize(
    "value",
    [b"9007199254740991", b"-9007199254740991", b"100000000000000000000", b"1.5e300", b"2.5"],
)
def test_numbers_inside_the_jcs_domain_pass(value: bytes) -> None:
    # 10^20 is a double ECMAScript writes as these digits: /acs accepts it too.
    message = parse_line(TOOLS_CALL + b'"arguments":{"n":' + value + b"}}}")
    assert isinstance(message, types.JSONRPCRequest)
    assert message.params == {"name": "echo", "arguments": {"n": json.loads(value)}}


def test_a_large_integer_outside_a_tools_call_is_left_to_the_upstream() -> None:
    message = parse_line(b'{"jsonrpc":"2.0","id":1,"method":"resources/read",'
                         b'"params":{"uri":"x","n":123456789012345678901234567890}}')  # fmt: skip
    assert isinstance(message, types.JSONRPCRequest)


@pytest.mark.parametrize(("line", "expected"), CASES)
def test_an_http_transport_answers_every_refusal(
    line: bytes, expected: list[tuple[int, Any]]
) -> None:
    """``http_answer`` (the AdCP ``/mcp``, decision 833): the stdio answer when there is
    one; one ``-32600`` with ``id: null`` for what stdio leaves unanswered."""
    verdict = parse_line(line)
    assert isinstance(verdict, Rejection)
    answer = json.loads(verdict.http_answer)
    if expected:
        assert verdict.answer is not None and answer == json.loads(verdict.answer)
    else:
        assert answer["id"] is None and answer["error"]["code"] == -32600
        assert answer["error"]["message"].startswith("Invalid Request: ")
        assert "not answered" not in answer["error"]["message"]


def test_message_of_takes_a_parsed_value() -> None:
    ok = {"jsonrpc": "2.0", "id": 3, "method": "tools/list"}
    assert isinstance(message_of(ok), types.JSONRPCRequest)
    refused = message_of({"jsonrpc": "2.0", "id": None, "method": "tools/list"})
    assert isinstance(refused, Rejection) and refused.errors[0]["id"] is None
