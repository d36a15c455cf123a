"""The engine's per-request copy of a cached evaluation with its own details is
``dataclasses.replace`` (decisions 1161, 333): ``with_details`` is what the compiled
engine calls; called here directly, so it is held to ``replace`` as Python too."""

from __future__ import annotations

import dataclasses

from warden.core.types import BundleRef, Effect, PolicyReference
from warden.policy.engine import Evaluation, with_details


def test_with_details_is_replace() -> None:
    shared = Evaluation(
        effect=Effect.ASK,
        reasoning="r",
        reason_codes=("a",),
        fired=(),
        bundle=BundleRef("p", "1", "sha256:0"),
        references=(PolicyReference("p", "1", "r19", "n"),),
        warn=True,
        modifications={"m": 1},
        ask_details={"question": "old"},
        defer_details={"reason": "old"},
        default_applied=True,
        trace=(),
    )
    ask, defer = {"question": "q"}, {"reason": "d"}
    got = with_details(shared, ask, defer)
    want = dataclasses.replace(shared, ask_details=ask, defer_details=defer)
    assert got == want and got is not shared
    for f in dataclasses.fields(Evaluation):
        assert getattr(got, f.name) is getattr(want, f.name), f.name
    assert with_details(shared, None, None) == dataclasses.replace(
        shared, ask_details=None, defer_details=None
    )
