"""The ACS entry and response are canonicalized by the route ``Verdict.jcs_route`` finds
from their parts (decision 947) instead of a walk of each: for every verdict the bytes
must be rfc8785's (or the same domain error), whatever the policy and the gates put in
it — floats of every form, keys beyond U+FFFF, subclasses, out-of-domain values."""

from __future__ import annotations

import enum
import math
from typing import Any

import pytest
import rfc8785
from hypothesis import example, given, settings
from hypothesis import strategies as st
from test_jcs_fast import json_keys, json_values

from warden.core.types import ActionRequest, BundleRef, Effect, PolicyReference, Verdict
from warden.crypto.canonical import _as_doubles, canonical_bytes
from warden.crypto.jcs_fast import JcsRoute, jcs_route, parts_route
from warden.errors import InvalidRequest
from warden.wire.acs.render import entry_content, verdict_result


class _Str(str):
    pass


class _Int(int):
    pass


class _Color(enum.Enum):
    RED = "red"


#: Values outside what the fast path may write unwalked: each must end on the walk
#: (and rfc8785), never in the encoder as it is.
_ODD = [_Str("sub"), _Int(3), _Color.RED, math.nan, math.inf, 2**53 + 1, 2**60, (1, 2)]
odd_or_json = json_values | st.sampled_from(_ODD)
texts = st.text(max_size=8) | st.sampled_from([_Str("sub"), "\U0001f600"])


def _reference(value: Any) -> bytes | type[Exception]:
    try:
        return rfc8785.dumps(_as_doubles(value))
    except Exception:  # noqa: BLE001 - the domain error the fast path must also give
        return InvalidRequest


def _bytes(value: Any, within: JcsRoute) -> bytes | type[Exception]:
    try:
        return canonical_bytes(value, within=within)
    except InvalidRequest:
        return InvalidRequest


verdicts = st.builds(
    Verdict,
    decision=st.sampled_from(list(Effect)),
    reasoning=texts,
    reason_codes=st.lists(texts, max_size=3).map(tuple),
    policy_references=st.lists(
        st.builds(PolicyReference, texts, texts, texts, st.none() | texts), max_size=2
    ).map(tuple),
    bundle=st.none() | st.builds(BundleRef, texts, texts, texts),
    warn=st.booleans(),
    modifications=st.none() | st.dictionaries(json_keys, odd_or_json, max_size=3),
    ask_details=st.none() | st.dictionaries(json_keys, odd_or_json, max_size=3),
    defer_details=st.none() | st.dictionaries(json_keys, odd_or_json, max_size=3),
    policy_data=st.dictionaries(json_keys, odd_or_json, max_size=4),
    failure=st.none() | texts,
    spend=st.none() | st.dictionaries(json_keys, odd_or_json, max_size=3),
    cited_provenance_ids=st.lists(texts, max_size=2).map(tuple),
    provenance_summary=st.none() | st.dictionaries(json_keys, odd_or_json, max_size=3),
    intent_extension=st.none() | st.dictionaries(json_keys, odd_or_json, max_size=2),
)
scalars = st.sampled_from(["id-1", 7, 1.5, 2500.0, 1e21, None, _Str("x"), math.nan, 2**60])


#: The step an entry records (``entry_content`` reads its method).
_REQUEST = ActionRequest(
    method="steps/toolCallRequest",
    payload={},
    metadata={},
    tool={},
    args={},
    raw_command="",
    session={},
)
#: Compiled by mypyc, the frozen types are native classes that check their fields' types.
_NATIVE = PolicyReference.__dictoffset__ == 0


@settings(max_examples=400, deadline=None)
@given(verdicts, scalars, texts, st.integers(min_value=0, max_value=2**60))
@example(
    Verdict(
        decision=Effect.ASK,
        reasoning="r",
        reason_codes=("approval_pending",),
        policy_references=(PolicyReference("p", "1", "r19", "name"),),
        bundle=BundleRef("p", "1", "sha256:00"),
        ask_details={"question": "q", "timeout_seconds": 86400, "approver": {"id": "f"}},
        policy_data={"approval": {"approvals": [], "approvals_required": 1}},
    ),
    "6bc8cab1-5f4d-435d-800e-e65ba54daad5",
    "2026-12-06T23:25:52.366Z",
    24,
)
@example(Verdict(decision=Effect.ALLOW, reasoning="", policy_data={"x": 2500.0}), 1, "t", 0)
@example(Verdict(decision=Effect.DENY, reasoning="", policy_data={"\U0001f600": 1}), 1, "t", 0)
def test_the_entry_and_response_by_the_verdicts_route_are_rfc8785s(
    verdict: Verdict, rid: Any, timestamp: str, leaf_index: int
) -> None:
    params = {"request_id": rid, "timestamp": timestamp, "metadata": {"turn_id": timestamp}}
    response = {
        "jsonrpc": "2.0",
        "id": rid,
        "result": verdict_result(
            verdict, acs_version="0.1.0", request_id="", chain_hash="ab" * 32, duration_ms=3
        ),
    }
    # Set afterwards: ``request_id`` is a str (compiled by mypyc, checked), ``rid`` any scalar.
    response["result"]["request_id"] = rid
    entry = entry_content(
        entry_id="e",
        session_id="s",
        request=_REQUEST,
        params=params,
        request_hash="cd" * 32,
        verdict=verdict,
    )
    head = (rid, "0.1.0", "s", _REQUEST.method, timestamp)
    route = verdict.jcs_route(*head, rid, timestamp)
    assert _bytes(entry, route) == _reference(entry)
    response["result"]["policy_data"] = {**verdict.policy_data, "log_index": leaf_index}
    within = max(route, parts_route(leaf_index))
    assert _bytes(response, within) == _reference(response)
    # The route is never below the walk's (UNSURE above all): the cheaper route is sound.
    assert within >= jcs_route(response)


@pytest.mark.parametrize("odd", [_Str("sub"), _Int(3), _Color.RED, math.nan, 2**60, (1,)])
def test_an_odd_value_anywhere_in_the_verdict_sends_it_to_the_walk(odd: Any) -> None:
    verdicts = [
        Verdict(decision=Effect.DENY, reasoning="", policy_data={"a": [odd]}),
        Verdict(decision=Effect.DENY, reasoning="", reason_codes=(odd,)),
    ]
    try:
        references = (PolicyReference("p", odd, "r"),)
        bundle = BundleRef("p", "1", odd)
    except TypeError:
        # Compiled by mypyc, the references refuse a field that is not a str: the odd
        # value cannot get into them at all.
        assert _NATIVE and not isinstance(odd, str)
    else:
        verdicts += [
            Verdict(decision=Effect.DENY, reasoning="", policy_references=references),
            Verdict(decision=Effect.DENY, reasoning="", bundle=bundle),
        ]
    for verdict in verdicts:
        assert verdict.jcs_route() is JcsRoute.UNSURE
    assert parts_route("a", odd) is JcsRoute.UNSURE
    assert parts_route("a", 1, True, None, 2**53 - 1) is JcsRoute.DIRECT
    assert parts_route("a", 2500.0) is JcsRoute.NUMBERS
