"""Loading the AdCP RFC 9421 conformance vectors and building the verifier's view of each
(its JWKS, its preloaded replay cache and revocation snapshot) as the vectors' READMEs
describe."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from warden.adcp.rfc9421 import REQUEST_PROFILE_31, REQUEST_PROFILE_32, WEBHOOK_PROFILE, Profile
from warden.adcp.rfc9421.verify import RevocationStatus

SHARED = Path(__file__).resolve().parents[2].parent / "shared"
VECTORS = SHARED / "specs/files/adcp/compliance-3.2.0-beta.0/test-vectors"
REQUEST_DIR = VECTORS / "request-signing"
WEBHOOK_DIR = VECTORS / "webhook-signing"


def vector_files(root: Path) -> list[Path]:
    """Every positive/negative vector under ``root`` (profile-3.2 included), sorted."""
    return sorted(p for p in root.rglob("*.json") if p.parent.name in ("positive", "negative"))


def vector_id(path: Path) -> str:
    return str(path.relative_to(VECTORS))


def load(path: Path) -> dict[str, Any]:
    doc = json.loads(path.read_text(encoding="utf-8"))
    assert isinstance(doc, dict)
    return doc


def keys_of(root: Path) -> dict[str, dict[str, Any]]:
    return {k["kid"]: k for k in load(root / "keys.json")["keys"]}


def profile_for(path: Path, vec: Mapping[str, Any]) -> Profile:
    """The verifier profile a vector targets: webhook-v1 for webhook vectors; for
    request vectors the ``signing_profile_version`` (3.1 fixtures must not be read as
    3.2) with the advertised ``covers_content_digest`` policy."""
    if WEBHOOK_DIR in path.parents:
        return WEBHOOK_PROFILE
    if vec.get("signing_profile_version") == "3.2":
        return REQUEST_PROFILE_32
    policy = (vec.get("verifier_capability") or {}).get("covers_content_digest", "either")
    return REQUEST_PROFILE_31.with_digest(policy)


def jwks_for(path: Path, vec: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """kid → public JWK as the vector presents the signer's JWKS: ``jwks_ref``
    entries of keys.json (private halves dropped), with ``jwks_override`` applied —
    a full ``{keys: [...]}`` JWKS (request vectors) or a ``{kid: jwk}`` map (webhook
    vector 020)."""
    root = WEBHOOK_DIR if WEBHOOK_DIR in path.parents else REQUEST_DIR
    keys = keys_of(root)
    out: dict[str, dict[str, Any]] = {}
    override = vec.get("jwks_override")
    if isinstance(override, dict) and isinstance(override.get("keys"), list):
        for k in override["keys"]:
            out[k["kid"]] = _public(k)
        return out
    for kid in vec.get("jwks_ref") or []:
        out[kid] = _public(keys[kid])
    if isinstance(override, dict):
        for kid, k in override.items():
            out[kid] = _public(k)
    return out


def _public(jwk: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in jwk.items() if not k.startswith("_") and k != "$comment"}


@dataclass
class HarnessState:
    """The verifier state a vector's ``test_harness_state`` preloads, in memory; the
    replay part can delegate to a real store (``replay``)."""

    jwks: dict[str, dict[str, Any]]
    revoked: set[str] = field(default_factory=set)
    stale: bool = False
    replay: Any = None

    def resolve(self, keyid: str) -> Mapping[str, Any] | None:
        return self.jwks.get(keyid)

    def revocation(self, keyid: str, now: int) -> RevocationStatus:
        if self.stale:
            return "stale"
        return "revoked" if keyid in self.revoked else "ok"

    def cap_reached(self, keyid: str, now: int) -> bool:
        return bool(self.replay.cap_reached(keyid, now))

    def remember(self, keyid: str, nonce: str, until: int) -> bool:
        return bool(self.replay.remember(keyid, nonce, until))
