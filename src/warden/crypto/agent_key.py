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
from typing import Any

from warden.crypto.asymmetric import akp_jwk
from warden.crypto.keystore import _create_private, _read_private
from warden.errors import ConfigError, quoted

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
            f"invalid agent id {quoted(agent_id)}: 1 to 128 letters, digits and _ . : @ + -, "
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


def load_agent_key(path: Path) -> AgentCredential | AgentKeyPair:
    """Read an agent key file written by ``warden agents add|rotate --key-out``, or an
    ACS-Crypto one (:meth:`AgentKeyPair.write`; it holds ``private_key``).

    Raises :class:`ConfigError` if it is missing, readable by others, or not
    ``{agent_id, key_id, ikm}`` with a 32-byte hex IKM and a well-formed key id.
    """
    text = _read_private(path, "agent key file")
    try:
        doc = json.loads(text)
        if isinstance(doc, dict) and "private_key" in doc:
            return _key_pair(doc, path)
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


@dataclass(frozen=True)
class AgentKeyPair:
    """An ACS-Crypto agent's credential (issue 21): its private key (the public half is
    registered with ``warden agents add --public-key``), the ACS ``algorithm`` it signs
    with, the registered ``key_id``, and ``warden_key``, Warden's published ML-DSA-65
    public key (``GET /v1/keys``), which every answer must verify under."""

    agent_id: str
    key_id: str
    algorithm: str
    private_key: Any
    warden_key: Any

    def write(self, path: Path) -> None:
        """Write ``{agent_id, key_id, algorithm, private_key (PKCS#8 PEM), warden_key
        (the AKP JWK)}`` to a new 0600 file (:class:`ConfigError` if it exists)."""
        from cryptography.hazmat.primitives import serialization

        from warden.crypto.asymmetric import key_id_for

        pem = self.private_key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ).decode("ascii")
        raw = self.warden_key.public_bytes_raw()
        doc = {
            "agent_id": self.agent_id,
            "key_id": self.key_id,
            "algorithm": self.algorithm,
            "private_key": pem,
            "warden_key": akp_jwk(key_id_for(raw), self.warden_key),
        }
        try:
            _create_private(path, json.dumps(doc, sort_keys=True))
        except FileExistsError as exc:
            raise ConfigError(f"agent key file {path} already exists") from exc


def _key_pair(doc: dict[str, Any], path: Path) -> AgentKeyPair:
    from cryptography.hazmat.primitives import serialization

    from warden.crypto.asymmetric import algorithm_of, parse_public_key

    try:
        private = serialization.load_pem_private_key(
            str(doc["private_key"]).encode("ascii"), password=None
        )
        algorithm, warden_key = parse_public_key(json.dumps(doc["warden_key"]).encode())
        pair = AgentKeyPair(
            check_agent_id(doc["agent_id"]),
            str(doc["key_id"]),
            str(doc["algorithm"]),
            private,
            warden_key,
        )
        if algorithm_of(private.public_key()) != pair.algorithm:
            raise ValueError("the private key is not of the named algorithm")
    except (ValueError, KeyError, TypeError, ConfigError) as exc:
        raise ConfigError(
            f"agent key file {path} is not {{agent_id, key_id, algorithm, private_key, "
            f"warden_key}} JSON: {exc}"
        ) from exc
    if algorithm != "ML-DSA-65" or not is_agent_key_id(pair.key_id):
        raise ConfigError(f"agent key file {path} holds a malformed key_id or Warden key")
    return pair


#: What a registered agent signs ACS requests with: its HMAC key material or (issue 21)
#: its asymmetric key pair.
Credential = AgentCredential | AgentKeyPair
