"""Wires the pieces together from :class:`Settings`: store, keys, bundle, Guardian, wires.

Start-up validates everything at once and refuses to start on any problem
(ConfigError): a bad bundle, an unreadable key file, a bad database URL.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from warden.core.guardian import Guardian
from warden.crypto.hmac_keys import SessionKeys
from warden.crypto.keystore import load_or_create_ikm
from warden.ledger.ledger import Ledger
from warden.policy.bundle import Bundle, load_bundle
from warden.policy.engine import PolicyEngine
from warden.settings import Settings
from warden.spend.audit import SpendAuditor
from warden.spend.engine import SpendEngine
from warden.store.sql import SqlStore, open_store
from warden.wire.acs.handshake import HandshakeConfig
from warden.wire.acs.service import AcsService

log = logging.getLogger(__name__)


@dataclass
class Runtime:
    """A started Warden: what the server, the CLI and the benchmarks share."""

    settings: Settings
    store: SqlStore
    bundle: Bundle
    guardian: Guardian
    keys: SessionKeys
    acs: AcsService
    spend: SpendEngine
    ikm_created: bool

    @classmethod
    def start(cls, settings: Settings) -> Runtime:
        bundle = load_bundle(settings.resolved_policy())
        ikm, created = load_or_create_ikm(settings.resolved_key_file())
        if created:
            log.warning(
                "generated a new HMAC master secret at %s (mode 0600)", settings.resolved_key_file()
            )
        store = open_store(settings.resolved_database_url(), sqlite_sync=settings.sqlite_sync)
        keys = SessionKeys(ikm)
        guardian = Guardian(PolicyEngine(bundle))
        acs = AcsService(
            guardian,
            store,
            keys,
            key_id=settings.key_id,
            handshake=HandshakeConfig(
                skew_window_ms=settings.skew_window_ms,
                policy_requires_provenance=settings.policy_requires_provenance,
            ),
            max_body_bytes=settings.max_body_bytes,
        )
        spend = SpendEngine(store, SpendAuditor(Ledger(store, keys, settings.key_id)))
        return cls(settings, store, bundle, guardian, keys, acs, spend, created)

    def close(self) -> None:
        self.store.close()
