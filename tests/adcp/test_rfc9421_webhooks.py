"""Outbound RFC 9421 webhooks: the per-subscription signing mode, Warden's signer checked
by its own webhook verifier (the vectors' profile) and a delivery never sent unsigned."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from warden.adcp.rfc9421 import WEBHOOK_PROFILE, HttpRequest, SignatureRejected, verify_request
from warden.adcp.rfc9421.verify import RevocationStatus
from warden.adcp.webhook_signing import KEY_FILENAME, load_webhook_signer
from warden.approvals.notifier import DeliveryWorker, Notifier
from warden.approvals.webhooks import WebhookConfig, WebhooksFile
from warden.store.outbox_sql import SqlOutbox, list_deliveries
from warden.store.sql import open_store

SECRET = "cc237f7fe354609bb41360c6530a2deb7926f3cc55e91df3ff90e37202950b6c"


def test_signing_mode_is_per_subscription() -> None:
    assert WebhookConfig(id="a", url="https://x.example/h").mode == "rfc9421"
    assert WebhookConfig(id="b", url="https://x.example/h", secret=SECRET).mode == "hmac-sha256"
    explicit = WebhookConfig(id="c", url="https://x.example/h", signing="rfc9421")
    assert explicit.mode == "rfc9421"
    with pytest.raises(ValidationError, match="never signed both ways"):
        WebhookConfig(id="d", url="https://x.example/h", signing="rfc9421", secret=SECRET)
    with pytest.raises(ValidationError, match="needs a secret"):
        WebhookConfig(id="e", url="https://x.example/h", signing="hmac-sha256")


class Jwks:
    def __init__(self, jwk: dict[str, Any]) -> None:
        self.jwk = jwk
        self.seen: set[tuple[str, str]] = set()

    def resolve(self, keyid: str) -> dict[str, Any] | None:
        return self.jwk if keyid == self.jwk["kid"] else None

    def revocation(self, keyid: str, now: int) -> RevocationStatus:
        return "ok"

    def cap_reached(self, keyid: str, now: int) -> bool:
        return False

    def remember(self, keyid: str, nonce: str, until: int) -> bool:
        fresh = (keyid, nonce) not in self.seen
        self.seen.add((keyid, nonce))
        return fresh


def test_the_signer_passes_the_webhook_checklist(tmp_path: Path) -> None:
    signer = load_webhook_signer(tmp_path)
    assert (tmp_path / KEY_FILENAME).stat().st_mode & 0o077 == 0
    assert load_webhook_signer(tmp_path).kid == signer.kid  # the same key on restart
    jwk = signer.public_jwk()
    assert jwk["adcp_use"] == "request-signing" and "d" not in jwk
    body = json.dumps({"task_id": "t", "status": "completed"}).encode()
    url = "https://buyer.example:443/hooks/./warden?b=2&a=1"
    now = int(time.time())
    headers = signer.headers(url, body, now)
    assert headers["Content-Type"] == "application/json"
    assert headers["Content-Digest"].startswith("sha-256=:")
    req = HttpRequest.of("POST", url, headers, body)
    state = Jwks(jwk)
    verified = verify_request(req, WEBHOOK_PROFILE, state, now)
    assert verified is not None and verified.keyid == signer.kid
    assert verified.covered == (
        "@method",
        "@target-uri",
        "@authority",
        "content-type",
        "content-digest",
    )
    assert '"@target-uri": https://buyer.example/hooks/warden?b=2&a=1' in verified.base
    # Two deliveries never share a nonce; a changed body fails the digest.
    again = signer.headers(url, body, now)
    assert again["Signature-Input"] != headers["Signature-Input"]
    with pytest.raises(SignatureRejected) as exc:
        verify_request(HttpRequest.of("POST", url, again, body + b" "), WEBHOOK_PROFILE, state, now)
    assert exc.value.code == "webhook_signature_digest_mismatch"


def test_an_rfc9421_delivery_without_a_signer_is_not_sent(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'w.db'}")
    try:
        hook = WebhookConfig(id="m", url="http://127.0.0.1:9/hook")
        cfg = WebhooksFile(webhooks=(hook,), allow_networks=("loopback",))
        view = {"id": "task_1", "state": "approved", "history": []}
        from datetime import UTC, datetime

        with store._write() as cur:
            Notifier(cfg).enqueue(SqlOutbox(cur, store._q), view, "approved", datetime.now(UTC))
        with DeliveryWorker(store, cfg, max_attempts=1, timeout_s=1.0) as worker:
            assert worker.run_once() == 1
        (row,) = list_deliveries(store)
        assert row.status.value == "failed"
        assert "no webhook signing key" in (row.last_error or "")
    finally:
        store.close()
