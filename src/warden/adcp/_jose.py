"""joserfc set-up shared by the governance-token signer and verifier (no signing logic).

Two things differ from joserfc's defaults, both required by the AdCP JWS profile
(specs/adcp-spend-kla.md §1.7):

- The profile's ``alg`` is ``EdDSA`` (RFC 8037). joserfc 1.8 warns on every use that
  RFC 9864 deprecates that name in favour of ``Ed25519``; the wire value is not ours to
  change, so this registry returns the algorithm without the warning (the allow-list
  check stays).
- The protected header carries the boolean markers ``authorized_commitment``,
  ``authorized_task`` and ``authorized_payload_hash`` listed in ``crit``; joserfc only
  accepts a critical header it has registered.
"""

from __future__ import annotations

from collections.abc import Collection

from joserfc._rfc7515.model import JWSAlgModel  # the type joserfc.jws uses, not exported
from joserfc.errors import UnsupportedAlgorithmError
from joserfc.jws import JWSRegistry
from joserfc.registry import HeaderParameter

#: The authorization-changing claims; each has a protected-header marker of the same name.
CRITICAL_CLAIMS: tuple[str, ...] = (
    "authorized_commitment",
    "authorized_task",
    "authorized_payload_hash",
)


class ProfileRegistry(JWSRegistry):
    """A :class:`JWSRegistry` for ``adcp-gov+jws``: the markers registered, an explicit
    algorithm allow-list, and no RFC 9864 deprecation warning for ``EdDSA``.

    ``strict_check_header=False`` (the verifier's choice) lets unknown *non-critical*
    header parameters through, as RFC 7515 §4 says; unknown critical ones are refused
    by the verifier's step 4 before joserfc sees the token."""

    def __init__(
        self,
        algorithms: Collection[str],
        markers: Collection[str] = CRITICAL_CLAIMS,
        *,
        strict_check_header: bool = True,
    ) -> None:
        super().__init__(
            header_registry={
                name: HeaderParameter(f"AdCP critical marker for {name}", "bool")
                for name in markers
            },
            algorithms=list(algorithms),
            strict_check_header=strict_check_header,
        )

    def get_alg(self, name: str) -> JWSAlgModel:
        if name not in self.algorithms or not self.allowed or name not in self.allowed:
            raise UnsupportedAlgorithmError(f"Algorithm of '{name}' is not allowed")
        return self.algorithms[name]
