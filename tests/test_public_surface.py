"""Warden's public surface is exactly ``warden.__all__`` (STYLE.md practice 2).

Changing what ``import warden`` offers must be a deliberate edit here too.
"""

from __future__ import annotations

import inspect

import warden

EXPECTED = [
    "ActionRequest",
    "AsyncClient",
    "Client",
    "ConfigError",
    "CouldNotDecide",
    "Decision",
    "Effect",
    "Guardian",
    "InputRejected",
    "IntegrityError",
    "ProtocolError",
    "Verdict",
    "WardenClientError",
    "WardenError",
    "WardenProtocolError",
    "WardenUnavailable",
    "__version__",
    "verify_chain",
]


def test_all_is_pinned() -> None:
    assert warden.__all__ == EXPECTED


def test_every_exported_name_resolves_to_warden_code() -> None:
    for name in warden.__all__:
        member = getattr(warden, name)
        if name == "__version__":
            assert isinstance(member, str) and member.count(".") == 2
            continue
        assert member.__module__.startswith("warden."), (name, member.__module__)


def test_exports_are_the_documented_objects() -> None:
    from warden.core.guardian import Guardian
    from warden.core.types import ActionRequest, Effect, Verdict
    from warden.errors import ConfigError, CouldNotDecide, IntegrityError, WardenError
    from warden.ledger.verify import verify_records

    assert warden.verify_chain is verify_records
    assert (warden.Guardian, warden.ActionRequest, warden.Effect, warden.Verdict) == (
        Guardian,
        ActionRequest,
        Effect,
        Verdict,
    )
    assert warden.ConfigError is ConfigError and warden.CouldNotDecide is CouldNotDecide
    assert warden.IntegrityError is IntegrityError and warden.WardenError is WardenError


def test_error_classes_share_one_root() -> None:
    errors = [getattr(warden, n) for n in warden.__all__ if n.endswith("Error") or n in (
        "CouldNotDecide", "InputRejected")]  # fmt: skip
    assert errors and all(inspect.isclass(e) for e in errors)
    assert all(issubclass(e, warden.WardenError) for e in errors)
    assert issubclass(warden.InputRejected, warden.ProtocolError)


def test_star_import_gives_exactly_all() -> None:
    namespace: dict[str, object] = {}
    exec("from warden import *", namespace)  # noqa: S102 - the point of the test
    assert sorted(k for k in namespace if k != "__builtins__") == sorted(EXPECTED)
