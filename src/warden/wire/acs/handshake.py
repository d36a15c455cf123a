"""``handshake/hello`` negotiation (ACS spec §4, specs/acs.md §6).

Refusal order: version → transport → provenance. ``methods_evaluated`` and
``profiles_accepted`` are intersections in the client's order; wrapped MCP
methods count only when MCP is declared in ``wrapped_protocols``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from warden.errors import ProvenanceRequired, SessionRefused, UnsupportedVersion
from warden.wire.acs.methods import is_dispatchable

SUPPORTED_VERSIONS = ("0.1.0",)
GUARDIAN_PROFILES = ("acs-core", "acs-audit")
ACS_CRYPTO = "acs-crypto"


@dataclass(frozen=True)
class HandshakeConfig:
    """The Guardian's side of the negotiation (from Settings)."""

    transports: tuple[str, ...] = ("http",)
    skew_window_ms: int = 300_000
    default_timeout_ms: int = 5_000
    on_decision_failure: str = "deny"
    policy_requires_provenance: bool = False
    approver_types: tuple[str, ...] = ("human",)
    per_method_timeout_ms: dict[str, int] = field(default_factory=dict)
    #: The asymmetric algorithms Warden verifies on requests; empty when it has no
    #: ML-DSA key to answer with (then ACS-Crypto is not offered).
    crypto_algorithms: tuple[str, ...] = ()


def _major(v: str) -> str:
    return v.split(".", 1)[0]


def negotiate(
    hello: dict[str, Any], cfg: HandshakeConfig, *, crypto: bool = False
) -> dict[str, Any]:
    """Return the ServerHello for a (schema-valid) ClientHello, or raise.

    ``crypto``: the hello was signed with the agent's registered public key. Such a
    session is ACS-Crypto (issue 21): the client must list ``acs-crypto`` (else
    -32000 ``acs_crypto_not_declared``), ``profiles_accepted`` includes it, and
    ``signature_algorithms_supported`` lists only the asymmetric algorithms (HMAC is
    never accepted in it). An HMAC-signed hello gets ACS-Core: ``acs-crypto`` is not
    accepted even when listed, and the algorithms are HMAC-SHA256 then every
    asymmetric one Warden verifies (what a new session could use).

    Raises :class:`UnsupportedVersion` (-32001, ``data.supported_versions``),
    :class:`SessionRefused` (-32000, ``no_common_transport``,
    ``acs_crypto_not_declared``) and :class:`ProvenanceRequired` (-32002).
    """
    offered = list(hello["acs_versions_supported"])
    version = None
    for mine in SUPPORTED_VERSIONS:
        if mine in offered:
            version = mine
            break
    if version is None:
        majors = {_major(v) for v in offered}
        for mine in SUPPORTED_VERSIONS:
            if _major(mine) in majors:
                version = mine
                break
    if version is None:
        raise UnsupportedVersion(
            "no common ACS version", supported_versions=list(SUPPORTED_VERSIONS)
        )
    transport = next((t for t in hello["transports_supported"] if t in cfg.transports), None)
    if transport is None:
        raise SessionRefused(
            f"no common transport (Guardian serves {list(cfg.transports)})",
            reason="no_common_transport",
        )
    if cfg.policy_requires_provenance and hello["provenance_producer"] == "none":
        raise ProvenanceRequired("this Guardian's policy requires provenance on data fields")
    mcp_versions = frozenset(
        str(w["version"]) for w in hello.get("wrapped_protocols", []) if w["protocol"] == "MCP"
    )
    methods = [m for m in hello["methods_implemented"] if is_dispatchable(m, mcp_versions)]
    methods = list(dict.fromkeys(methods))
    declared = hello.get("profiles_supported", [])
    if crypto and ACS_CRYPTO not in declared:
        raise SessionRefused(
            "this hello is signed with an asymmetric key, which makes the session ACS-Crypto; "
            "list acs-crypto in profiles_supported",
            reason="acs_crypto_not_declared",
        )
    accepted: tuple[str, ...] = (*GUARDIAN_PROFILES, ACS_CRYPTO) if crypto else GUARDIAN_PROFILES
    profiles = [p for p in declared if p in accepted]
    hmac = () if crypto else ("HMAC-SHA256",)
    algorithms = [*hmac, *cfg.crypto_algorithms]
    timeout: dict[str, Any] = {"default_ms": cfg.default_timeout_ms}
    if cfg.per_method_timeout_ms:
        timeout["per_method_ms"] = dict(cfg.per_method_timeout_ms)
    return {
        "negotiated_version": version,
        "methods_evaluated": methods,
        "selected_transport": transport,
        "signature_algorithms_supported": algorithms,
        "timeout_config": timeout,
        "skew_window_ms": cfg.skew_window_ms,
        "on_decision_failure": cfg.on_decision_failure,
        "approver_types_supported": list(cfg.approver_types),
        "policy_requires_provenance": cfg.policy_requires_provenance,
        "profiles_accepted": list(dict.fromkeys(profiles)),
    }
