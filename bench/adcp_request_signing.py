"""What AdCP RFC 9421 costs per request (issue 21 item 3): Warden's caller identification
on the AdCP wire (``warden.wire.adcp.signed.identify``) with a Warden API key, with an
Ed25519-signed request and with an ES256-signed request, and an outbound webhook's
signature (RFC 9421 against the legacy HMAC).

In-process on a real store (SQLite FULL by default, ``--database-url`` for PostgreSQL):
each signed identification resolves the key and its agent, counts the key's live
replay entries and inserts the nonce in its own transaction — everything but HTTP.
The three inbound cases alternate, one of each per round, so drift hits them alike;
medians and p99 over ``--rounds`` rounds, ratios against the API key in the same run.
The signing of each request is done before the timed call (a client's cost, not
Warden's).

    python bench/adcp_request_signing.py --rounds 2000
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

sys.path.insert(0, str(Path(__file__).resolve().parent))
from latency_stats import summary  # noqa: E402

from warden.adcp.request_signing import RequestSigning  # noqa: E402
from warden.adcp.rfc9421.keys import PrivateKey, public_jwk  # noqa: E402
from warden.adcp.rfc9421.sign import sign_request  # noqa: E402
from warden.adcp.rfc9421.verify import (  # noqa: E402
    REQUEST_PROFILE_32,
    REQUEST_TAG,
    HttpRequest,
    verify_request,
)
from warden.adcp.webhook_signing import load_webhook_signer  # noqa: E402
from warden.approvals.webhooks import signature_headers  # noqa: E402
from warden.identity.agents import AgentRegistry  # noqa: E402
from warden.identity.api_keys import ApiKeys, Role, api_key_pepper  # noqa: E402
from warden.identity.signing_keys import AgentSigningKeys  # noqa: E402
from warden.store import open_store  # noqa: E402
from warden.wire.adcp.signed import identify  # noqa: E402

URL = "https://warden.example/adcp/check_governance"
BODY = json.dumps(
    {"plan_id": "p1", "tool": "create_media_buy", "payload": {"budget": 1000}},
    separators=(",", ":"),
).encode()
IKM = bytes(range(32))


def signed(key: PrivateKey, kid: str, alg: str) -> list[tuple[str, str]]:
    req = HttpRequest("POST", URL, (("Content-Type", "application/json"),), BODY)
    out = sign_request(req, key, kid, alg=alg, tag=REQUEST_TAG, created=int(time.time()))
    return list(out.headers)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2000)
    parser.add_argument("--database-url", default=None)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="warden-bench-9421-"))
    store = open_store(args.database_url or f"sqlite:///{tmp / 'w.db'}")
    try:
        AgentRegistry(store, IKM).add("bench-agent", "bench.owner")
        keys = ApiKeys(store, api_key_pepper(IKM))
        _, token = keys.create("bench-agent", Role.AGENT)
        ed = Ed25519PrivateKey.generate()
        p256 = ec.generate_private_key(ec.SECP256R1())
        registry = AgentSigningKeys(store)
        registry.add("bench-agent", public_jwk(ed, "bench-ed25519"))
        registry.add("bench-agent", public_jwk(p256, "bench-es256"))
        signing = RequestSigning(store)
        bearer = [("Content-Type", "application/json"), ("Authorization", f"Bearer {token}")]

        def call(headers: list[tuple[str, str]]) -> float:
            t0 = time.perf_counter()
            who = identify(
                keys, signing, method="POST", url=URL, headers=headers, body=BODY,
                task="check_governance", arguments=None,
            )  # fmt: skip
            elapsed = time.perf_counter() - t0
            assert who.principal == "bench-agent"
            return elapsed

        jwk = public_jwk(ed, "bench-ed25519")

        class Memory:
            """The checklist with its state in memory: parsing, canonicalization and
            cryptography without the store (what the durable parts add is the rest)."""

            seen: set[tuple[str, str]] = set()

            def resolve(self, keyid: str) -> dict[str, Any]:
                return jwk

            def revocation(self, keyid: str, now: int) -> Any:
                return "ok"

            def cap_reached(self, keyid: str, now: int) -> bool:
                return False

            def remember(self, keyid: str, nonce: str, until: int) -> bool:
                fresh = (keyid, nonce) not in self.seen
                self.seen.add((keyid, nonce))
                return fresh

        memory = Memory()

        def checklist_only(headers: list[tuple[str, str]]) -> float:
            req = HttpRequest("POST", URL, tuple(headers), BODY)
            t0 = time.perf_counter()
            assert verify_request(req, REQUEST_PROFILE_32, memory, int(time.time()))
            return time.perf_counter() - t0

        samples: dict[str, list[float]] = {
            "api_key": [],
            "ed25519": [],
            "es256": [],
            "ed25519_checklist_only": [],
        }
        for _ in range(50):  # warm-up
            call(bearer)
            call(signed(ed, "bench-ed25519", "ed25519"))
        for _ in range(args.rounds):
            samples["api_key"].append(call(bearer))
            samples["ed25519"].append(call(signed(ed, "bench-ed25519", "ed25519")))
            samples["es256"].append(call(signed(p256, "bench-es256", "ecdsa-p256-sha256")))
            samples["ed25519_checklist_only"].append(
                checklist_only(signed(ed, "bench-ed25519", "ed25519"))
            )

        webhook = load_webhook_signer(tmp)
        secret = "cc237f7fe354609bb41360c6530a2deb7926f3cc55e91df3ff90e37202950b6c"
        out: dict[str, Any] = {
            "rounds": args.rounds,
            "store": "postgresql" if args.database_url else "sqlite (FULL)",
        }
        wh: dict[str, list[float]] = {"hmac": [], "rfc9421": []}
        now = int(time.time())
        for _ in range(args.rounds):
            t0 = time.perf_counter()
            signature_headers(secret, now, BODY)
            wh["hmac"].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            webhook.headers("https://buyer.example/hook", BODY, now)
            wh["rfc9421"].append(time.perf_counter() - t0)
    finally:
        store.close()
    base = summary(samples["api_key"])
    out["inbound"] = {name: summary(v) for name, v in samples.items()}
    for name in ("ed25519", "es256", "ed25519_checklist_only"):
        s = out["inbound"][name]
        s["median_ratio_to_api_key"] = s["median_ms"] / base["median_ms"]
        s["p99_ratio_to_api_key"] = s["p99_ms"] / base["p99_ms"]
    out["webhook_signing"] = {name: summary(v) for name, v in wh.items()}
    out["webhook_signing"]["rfc9421"]["median_ratio_to_hmac"] = (
        out["webhook_signing"]["rfc9421"]["median_ms"] / out["webhook_signing"]["hmac"]["median_ms"]
    )
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
