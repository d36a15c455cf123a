"""Per-session HMAC keys and HMAC-SHA256 signatures (ACS spec §10, specs/acs.md §11).

Session key = HKDF-SHA256(IKM, salt=none, info=UTF-8(session_id), L=32), the
interop choice pinned by the agt-go envelope vectors. Signature values are
standard base64 *with padding*; comparison is constant-time.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections import OrderedDict
from threading import Lock

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from warden.errors import ConfigError

MIN_IKM_BYTES = 32
HMAC_ALGORITHM = "HMAC-SHA256"


def derive_session_key(ikm: bytes, session_id: str) -> bytes:
    """HKDF-SHA256(ikm, no salt, info=session_id) → 32-byte key."""
    hkdf = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=session_id.encode())
    return hkdf.derive(ikm)


#: The versioned HKDF label of per-agent key material (issue 15; a new scheme gets a new
#: label), and the scheme's name as a session records it in ``negotiated.identity``.
AGENT_IKM_LABEL = b"warden/agent-ikm/v1:"
AGENT_KEY_SCHEME = "warden/agent-ikm/v1"


def derive_agent_ikm(master_ikm: bytes, key_id: str) -> bytes:
    """The 32-byte IKM of agent key ``key_id``: HKDF-SHA256(master IKM, no salt,
    info=``warden/agent-ikm/v1:`` + UTF-8(key_id)). Deterministic, so nothing secret is
    stored per agent and a session signed under a since-rotated key stays verifiable."""
    hkdf = HKDF(
        algorithm=hashes.SHA256(), length=32, salt=None, info=AGENT_IKM_LABEL + key_id.encode()
    )
    return hkdf.derive(master_ikm)


def ikm_fingerprint(ikm: bytes) -> str:
    """A public fingerprint of the IKM (64 hex chars): HMAC-SHA256 keyed by the IKM over a
    fixed label. Recorded in the database so that a Warden started with another key file
    is refused; it reveals nothing about the IKM and is no session key."""
    return hmac.new(ikm, b"warden/ikm-fingerprint/v1", hashlib.sha256).hexdigest()


#: Keyed HMAC-SHA256 states by key, each never updated: a message's MAC starts from a
#: copy (see :func:`hmac_sha256`). Cleared when full; keys are already held in memory
#: by their caches (:class:`SessionKeys`, the agents' keys).
_KEYED: dict[bytes, hmac.HMAC] = {}
_KEYED_LIMIT = 4096


def hmac_sha256(key: bytes, message: bytes) -> bytes:
    """The 32-byte HMAC-SHA256 of ``message`` under ``key`` (RFC 2104): the same bytes
    as ``hmac.digest(key, message, "sha256")``. The keyed state (the digest fetched, the
    key's inner and outer pads hashed) is made once per key and copied per message:
    ``hmac.digest`` redoes that setup every call, ~1 µs of a few (three per ACS step)."""
    keyed = _KEYED.get(key)
    if keyed is None:
        if len(_KEYED) >= _KEYED_LIMIT:
            _KEYED.clear()
        keyed = _KEYED[key] = hmac.new(key, digestmod=hashlib.sha256)
    mac = keyed.copy()
    mac.update(message)
    return mac.digest()


def hmac_sign(key: bytes, message: bytes) -> str:
    """Base64 (padded) HMAC-SHA256 of ``message`` under ``key`` (:func:`hmac_sha256`)."""
    return base64.b64encode(hmac_sha256(key, message)).decode("ascii")


def hmac_verify(key: bytes, message: bytes, value: str) -> bool:
    """True when ``value`` is the padded base64 HMAC-SHA256 of ``message``, written
    canonically: exactly what :func:`hmac_sign` writes (44 characters, ``=`` padding,
    the two unused trailing bits zero; RFC 4648 §3.5).

    Any other spelling of the same bytes (trailing bits set, whitespace, missing
    padding) fails, as the KLA signature decoder refuses it: one signature, one
    text. Malformed input is a failed verification, never an exception. The compare
    is constant-time.
    """
    try:
        given = value.encode("ascii")
    except (UnicodeEncodeError, AttributeError):
        return False
    expected = hmac_sign(key, message).encode("ascii")
    return hmac.compare_digest(given, expected)


class SessionKeys:
    """Derives and caches per-session HMAC keys from one IKM.

    Thread-safe. The cache is bounded (LRU) because session ids come from the
    network.
    """

    def __init__(self, ikm: bytes, *, cache_size: int = 4096) -> None:
        if len(ikm) < MIN_IKM_BYTES:
            raise ConfigError(f"IKM must be at least {MIN_IKM_BYTES} bytes, got {len(ikm)}")
        self._ikm = ikm
        self._cache: OrderedDict[str, bytes] = OrderedDict()
        self._size = cache_size
        self._lock = Lock()

    @property
    def ikm(self) -> bytes:
        """The IKM these keys derive from: what offline verification needs to derive a
        registered agent's own IKM (:func:`derive_agent_ikm`) for its sessions."""
        return self._ikm

    def key_for(self, session_id: str) -> bytes:
        """The 32-byte HMAC key of ``session_id``."""
        with self._lock:
            key = self._cache.get(session_id)
            if key is not None:
                self._cache.move_to_end(session_id)
                return key
        key = derive_session_key(self._ikm, session_id)
        with self._lock:
            self._cache[session_id] = key
            if len(self._cache) > self._size:
                self._cache.popitem(last=False)
        return key
