"""The mapping every framework adapter shares (warden.integrations._gate): how outputs are
sent, how Warden's redactions of an output are applied or refused, what the model reads."""

from __future__ import annotations

import math
from typing import Any

import pytest
from pydantic import BaseModel

from warden.client import Decision
from warden.integrations._gate import _reviewed, plain, redacted_result, refusal_text


class Forecast(BaseModel):
    city: str
    celsius: float


@pytest.mark.parametrize(
    ("value", "sent"),
    [
        ("text", "text"),
        (3, 3),
        (None, None),
        ({"a": [1, "b"]}, {"a": [1, "b"]}),
        ((1, 2), [1, 2]),
        (Forecast(city="Oslo", celsius=3.5), {"city": "Oslo", "celsius": 3.5}),
        (math.nan, "nan"),
        ({1, 2}, "{1, 2}"),  # not JSON: sent as its text
    ],
)
def test_outputs_are_sent_as_json_values(value: Any, sent: Any) -> None:
    assert plain(value) == sent


def test_redactions_point_into_the_output() -> None:
    mods = {"redactions": [{"path": "/outputs/0/value/token"}, {"path": "/outputs/0/value/x"}]}
    assert redacted_result({"token": "t0k", "n": 1}, mods) == {"token": "[REDACTED]", "n": 1}
    whole = {"redactions": [{"path": "/outputs/0/value", "replacement": "gone"}]}
    assert redacted_result("secret", whole) == "gone"


@pytest.mark.parametrize(
    "mods",
    [
        {"modified_content": {"outputs": []}},
        {"parameter_overrides": {"limit": 5}},
        {"redactions": [{"path": "/tool/name"}]},
        {"redactions": [{"path": "/outputs/0/value/~9"}]},
    ],
)
def test_a_result_modification_that_cannot_be_applied_withholds_the_output(
    mods: dict[str, Any],
) -> None:
    reviewed = _reviewed(
        Decision("modify", "redact", raw={"modifications": mods}), {"a": 1}, "read_note"
    )
    assert reviewed.withheld and reviewed.output is None
    assert reviewed.message.startswith("Warden withheld the output of read_note")


def test_what_the_model_reads() -> None:
    deny = Decision("deny", "No wiping.", ("destructive_action_blocked",))
    assert refusal_text(deny, "wipe_disk") == (
        "Warden denied the call to wipe_disk: No wiping. [destructive_action_blocked]"
    )
    assert refusal_text(Decision("deny"), "x") == "Warden denied the call to x."
    timeout = Decision("deny", "No approval arrived within 1 s.", ("approval_wait_timeout",))
    assert refusal_text(timeout, "pay").startswith(
        "Warden did not run pay: a human must approve it and no approval came: No approval"
    )
    unreachable = refusal_text(None, "pay", ConnectionError("refused"))
    assert "refused" in unreachable and unreachable.endswith("[warden_unreachable]")
