"""Warden: a governance gateway for the actions AI agents take.

The public surface is exactly ``__all__`` (pinned by tests/test_public_surface.py).
Names are imported on first use (PEP 562), so that a small entry point — the client,
``warden hook`` run once per Claude Code event — does not load the policy engine and
the store it never touches.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from warden import native as _native

__version__ = "0.1.0"

# Before any other module of the package: a compiled module older than its source must
# not run (decision 332).
_native.install_guard()

if TYPE_CHECKING:
    from warden.client import (
        AsyncClient,
        Client,
        Decision,
        WardenClientError,
        WardenProtocolError,
        WardenUnavailable,
    )
    from warden.core.guardian import Guardian
    from warden.core.types import ActionRequest, Effect, Verdict
    from warden.errors import (
        ConfigError,
        CouldNotDecide,
        InputRejected,
        IntegrityError,
        ProtocolError,
        WardenError,
    )
    from warden.ledger.verify import verify_records as verify_chain

#: public name → (module, attribute)
_EXPORTS: dict[str, tuple[str, str]] = {
    "ActionRequest": ("warden.core.types", "ActionRequest"),
    "AsyncClient": ("warden.client", "AsyncClient"),
    "Client": ("warden.client", "Client"),
    "ConfigError": ("warden.errors", "ConfigError"),
    "CouldNotDecide": ("warden.errors", "CouldNotDecide"),
    "Decision": ("warden.client", "Decision"),
    "Effect": ("warden.core.types", "Effect"),
    "Guardian": ("warden.core.guardian", "Guardian"),
    "InputRejected": ("warden.errors", "InputRejected"),
    "IntegrityError": ("warden.errors", "IntegrityError"),
    "ProtocolError": ("warden.errors", "ProtocolError"),
    "Verdict": ("warden.core.types", "Verdict"),
    "WardenClientError": ("warden.client", "WardenClientError"),
    "WardenError": ("warden.errors", "WardenError"),
    "WardenProtocolError": ("warden.client", "WardenProtocolError"),
    "WardenUnavailable": ("warden.client", "WardenUnavailable"),
    "verify_chain": ("warden.ledger.verify", "verify_records"),
}

__all__ = [
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


def __getattr__(name: str) -> Any:
    """Import a public name on first use and keep it (PEP 562)."""
    target = _EXPORTS.get(name)
    if target is None:
        raise AttributeError(f"module 'warden' has no attribute {name!r}")
    value = getattr(importlib.import_module(target[0]), target[1])
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
