"""Warden: a governance gateway for the actions AI agents take.

The public surface is exactly ``__all__`` (pinned by tests/test_public_surface.py).
"""

__version__ = "0.1.0"

from warden.client import (  # noqa: E402
    AsyncClient,
    Client,
    Decision,
    WardenClientError,
    WardenProtocolError,
    WardenUnavailable,
)
from warden.core.guardian import Guardian  # noqa: E402
from warden.core.types import ActionRequest, Effect, Verdict  # noqa: E402
from warden.errors import (  # noqa: E402
    ConfigError,
    CouldNotDecide,
    InputRejected,
    IntegrityError,
    ProtocolError,
    WardenError,
)
from warden.ledger.verify import verify_records as verify_chain  # noqa: E402

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
