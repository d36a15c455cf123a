"""The proxy's one-pass checks and JSON of a ``tools/call`` equal the SDK's two-pass ones.

:mod:`warden.transport.mcp_results` replaces ``validate_server_result``,
``serialize_server_result`` + ``JSONRPCResponse(...).model_dump_json()`` and
``JSONRPCRequest(...).model_dump_json()`` on the fast path (docs/decisions.md 882):
the same bytes for what passes, the same exception and the same errors for what does
not.
"""

from __future__ import annotations

import copy
from typing import Any

import mcp_types as types
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mcp_types import methods
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from pydantic import ValidationError

from warden.transport.mcp_results import answer_line, check_result, request_line

VERSIONS = sorted(HANDSHAKE_PROTOCOL_VERSIONS)

_TEXT = {"type": "text", "text": '{\n  "timezone": "Europe/Paris"\n}'}
VALID: list[dict[str, Any]] = [
    {"content": [_TEXT], "isError": False},
    {
        "content": [_TEXT],
        "structuredContent": {"timezone": "Europe/Paris", "is_dst": False, "n": 1e16},
        "isError": False,
        "_meta": {"warden": {"decision": "allow", "rules": ["r"], "chain_hash": "ab" * 32}},
    },
    {"content": [], "unknownMember": 1, "isError": True},  # extra members are dropped
    {"content": [{"type": "text", "text": 'é ☃ \U0001f600 \u2028 "q" \\ \n', "annotations": None}]},
    {"content": [{"type": "image", "data": "aGk=", "mimeType": "image/png"}]},
    {
        "content": [
            {
                "type": "resource",
                "resource": {"uri": "file:///x", "text": "t", "mimeType": "text/plain"},
            }
        ]
    },
    {"content": [{"type": "resource_link", "uri": "file:///y", "name": "y"}]},
    {
        "content": [_TEXT],
        "structuredContent": {
            "big": 12345678901234567890123,
            "neg": -0.0,
            "small": 5e-324,
            "f": 0.1,
            "nested": [[{"a": None}], True, "x"],
        },
    },
    {"content": [_TEXT], "structuredContent": {"inf": float("inf"), "nan": float("nan")}},
]

INVALID: list[Any] = [
    {},
    {"content": "not a list"},
    {"content": [{"type": "text"}]},
    {"content": [{"type": "nope", "text": "x"}]},
    {"content": [_TEXT], "isError": "maybe"},
    {"content": [_TEXT], "structuredContent": []},
    {"content": [_TEXT], "_meta": "x"},
    {"content": [{"type": "image", "data": 3, "mimeType": "image/png"}]},
    [],
    None,
]

IDS: list[str | int] = [7, 0, -1, 2**53 + 1, "warden-1", 'é"\\\n', ""]


def _old_answer(version: str, rid: str | int, result: Any) -> bytes:
    shaped = methods.serialize_server_result("tools/call", version, result)
    answer = types.JSONRPCResponse(jsonrpc="2.0", id=rid, result=shaped)
    return answer.model_dump_json(by_alias=True, exclude_unset=True).encode()


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("result", VALID)
def test_an_answer_line_is_the_sdks_bytes(version: str, result: dict[str, Any]) -> None:
    for rid in IDS:
        before = copy.deepcopy(result)
        assert answer_line(version, rid, result) == _old_answer(version, rid, result)
        check_result(version, result)  # passes, as validate_server_result does
        methods.validate_server_result("tools/call", version, result)
        assert repr(result) == repr(before)  # the input is not changed


def _errors(call: Any) -> list[dict[str, Any]]:
    with pytest.raises(ValidationError) as caught:
        call()
    return caught.value.errors(include_url=False)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("result", INVALID)
def test_a_refused_result_is_refused_with_the_sdks_errors(version: str, result: Any) -> None:
    sdk = _errors(lambda: methods.validate_server_result("tools/call", version, result))
    assert _errors(lambda: check_result(version, result)) == sdk
    assert _errors(lambda: answer_line(version, 1, result)) == sdk
    assert _errors(lambda: _old_answer(version, 1, result)) == sdk


def test_an_unknown_version_is_refused_as_the_sdk_refuses_it() -> None:
    with pytest.raises(ValueError) as sdk:
        methods.validate_server_result("tools/call", "1999-01-01", {"content": []})
    with pytest.raises(ValueError) as ours:
        check_result("1999-01-01", {"content": []})
    assert str(ours.value) == str(sdk.value)
    assert not isinstance(ours.value, ValidationError)
    with pytest.raises(ValueError, match="known protocol version"):
        answer_line("1999-01-01", 1, {"content": []})


_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(
    structured=st.dictionaries(st.text(), _JSON, max_size=5),
    meta=st.dictionaries(st.text(), _JSON, max_size=3),
    text=st.text(),
    is_error=st.booleans(),
    rid=st.one_of(st.integers(min_value=-(2**63), max_value=2**63 - 1), st.text()),
)
def test_any_result_is_written_as_the_sdk_writes_it(
    structured: dict[str, Any], meta: dict[str, Any], text: str, is_error: bool, rid: Any
) -> None:
    result = {
        "content": [{"type": "text", "text": text}],
        "structuredContent": structured,
        "isError": is_error,
        "_meta": meta,
    }
    for version in VERSIONS:
        assert answer_line(version, rid, result) == _old_answer(version, rid, result)


@settings(max_examples=300, deadline=None)
@given(name=st.text(), arguments=st.one_of(st.none(), st.dictionaries(st.text(), _JSON)))
def test_a_request_line_is_the_request_models_bytes(
    name: str, arguments: dict[str, Any] | None
) -> None:
    params: dict[str, Any] = {"name": name}
    if arguments is not None:
        params["arguments"] = arguments
    model = types.JSONRPCRequest(jsonrpc="2.0", id="warden-12", method="tools/call", params=params)
    expected = model.model_dump_json(by_alias=True, exclude_unset=True).encode()
    assert request_line("warden-12", params) == expected
