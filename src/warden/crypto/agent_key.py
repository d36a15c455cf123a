"""An agent's key file: what a registered agent holds (issue 15), in a module light
enough for the client and ``warden hook`` to load without the registry's database code.

``warden agents add|rotate --key-out FILE`` writes ``{agent_id, key_id, ikm}`` (the IKM
as 64 hex characters) to a new file with mode 0600; :func:`load_agent_key` reads it
back. :mod:`warden.identity.agents` re-exports every name here.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from warden.crypto.keystore import _create_private, _read_private
from warden.errors import ConfigError

AGENT_IKM_BYTES = 32

_AGENT_ID = re.compile(r"^[A-Za-z0-9_.@+-][A-Za-z0-9_.:@+-]{0,127}$")
_KEY_ID = re.compile(r"^agk_[0-9a-f]{16}$")


def is_agent_key_id(key_id: str) -> bool:
    """True if ``key_id`` has the shape of a registered agent key (``agk_`` + 16 hex)."""
    return bool(_KEY_ID.match(key_id))


def check_agent_id(agent_id: object) -> str:
    """``agent_id`` unchanged if valid: 1..128 of ``A-Z a-z 0-9 _ . : @ + -``, not starting
    with ``:`` and never ``group:…`` (it is also an API key principal and may appear in
    a budget's ``principals``). :class:`ConfigError` otherwise."""
    if (
        not isinstance(agent_id, str)
        or not _AGENT_ID.match(agent_id)
        or agent_id.startswith("group:")
    ):
        raise ConfigError(
            f"invalid agent id {agent_id!r}: 1 to 128 letters, digits and _ . : @ + -, "
            "not starting with group:"
        )
    return agent_id


@dataclass(frozen=True)
class AgentCredential:
    """What an agent signs with: shown once at ``add``/``rotate``."""

    agent_id: str
    key_id: str
    ikm: bytes

    def as_dict(self) -> dict[str, str]:
        """``{agent_id, key_id, ikm}`` with the IKM as 64 lowercase hex characters."""
        return {"agent_id": self.agent_id, "key_id": self.key_id, "ikm": self.ikm.hex()}

    def write(self, path: Path) -> None:
        """Write the credential as JSON to a new file with mode 0600 (never replacing
        one: :class:`ConfigError` if it exists)."""
        try:
            _create_private(path, json.dumps(self.as_dict(), sort_keys=True))
        except FileExistsError as exc:
            raise ConfigError(f"agent key file {path} already exists") from exc


def load_agent_key(path: Path) -> AgentCredential:
    """Read an agent key file written by ``warden agents add|rotate --key-out``.

    Raises :class:`ConfigError` if it is missing, readable by others, or not
    ``{agent_id, key_id, ikm}`` with a 32-byte hex IKM and a well-formed key id.
    """
    text = _read_private(path, "agent key file")
    try:
        doc = json.loads(text)
        cred = AgentCredential(
            check_agent_id(doc["agent_id"]), str(doc["key_id"]), bytes.fromhex(doc["ikm"])
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise ConfigError(
            f"agent key file {path} is not {{agent_id, key_id, ikm}} JSON "
            "(as written by `warden agents add --key-out`)"
        ) from exc
    if not is_agent_key_id(cred.key_id) or len(cred.ikm) != AGENT_IKM_BYTES:
        raise ConfigError(f"agent key file {path} holds a malformed key_id or IKM")
    return cred
