"""ACS-Crypto cost (issue 21): decision latency and verifier rate with HMAC-SHA256,
ML-DSA-65 and Ed25519 response signatures, measured in one process, one run.

Three sessions on one in-process Warden (SQLite, ``sqlite_sync=NORMAL`` for all three so
that fsync noise does not hide the signature cost), decided in interleaved rounds:

- ``hmac``: ACS-Core, HMAC-SHA256 both ways (the default);
- ``ml-dsa-65``: ACS-Crypto, the agent signs with ML-DSA-65, Warden answers with ML-DSA-65;
- ``ed25519``: the same ML-DSA-65 requests, but Warden's response signer is an Ed25519
  key (a comparison only: Ed25519 is not in the ACS algorithm registry, so Warden does
  not offer it; only the response signer differs from ``ml-dsa-65``).

Latency is ``AcsService.handle`` per ``steps/toolCallRequest`` (verify, decide, commit,
sign). The verifier's rate is :func:`warden.ledger.verify.verify_records` over each
session's exported records (entries per second, response signatures checked with the
IKM or the published public key), and the raw verify rate of one response signature.

Run: ``PYTHONPATH=src python bench/acs_crypto.py [--decisions 600 --rounds 3]``
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric import mldsa
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

sys.path.insert(0, str(Path(__file__).resolve().parent))
from latency_stats import quantile, summary  # noqa: E402

from warden.crypto import asymmetric  # noqa: E402
from warden.crypto.canonical import canonical_bytes  # noqa: E402
from warden.crypto.hmac_keys import hmac_sign, hmac_verify  # noqa: E402
from warden.ledger.verify import verify_records  # noqa: E402
from warden.runtime import Runtime  # noqa: E402
from warden.settings import Settings  # noqa: E402
from warden.wire.acs.client import AcsClient  # noqa: E402
from warden.wire.acs.signing import response_signing_input  # noqa: E402

IKM = bytes(range(32))
MODES = ("hmac", "ml-dsa-65", "ed25519")


@dataclass(frozen=True)
class Ed25519ResponseSigner:
    """A bench-only response signer (see the module docstring)."""

    key: Ed25519PrivateKey
    kid: str = "bench-ed25519"
    algorithm: str = asymmetric.ED25519

    def sign(self, message: bytes) -> bytes:
        return self.key.sign(message)


def _bodies(client: AcsClient, n: int) -> list[bytes]:
    return [
        json.dumps(
            client.envelope(
                "steps/toolCallRequest",
                {"tool": {"name": "read_file"}, "arguments": {"path": {"value": f"/d/{i}"}}},
            )
        ).encode()
        for i in range(n)
    ]


def run(decisions: int, rounds: int, workdir: Path) -> dict[str, Any]:
    data = workdir / "data"
    data.mkdir(parents=True)
    key = data / "ikm.key"
    key.write_text(IKM.hex())
    key.chmod(0o600)
    rt = Runtime.start(Settings(data_dir=data, key_file=key, sqlite_sync="NORMAL"))
    try:
        assert rt.agents is not None and rt.acs.response_signer is not None
        mldsa_signer = rt.acs.response_signer
        ed_signer = Ed25519ResponseSigner(Ed25519PrivateKey.generate())
        _, cred = rt.agents.add("bench-hmac", "bench")
        private = mldsa.MLDSA65PrivateKey.generate()
        _, pq_key, _ = rt.agents.add_with_public_key(
            "bench-pq", "bench", ("ML-DSA-65", private.public_key())
        )
        clients = {
            "hmac": AcsClient.for_agent(rt.acs.handle, cred, track_chain=False),
            "ml-dsa-65": AcsClient.for_public_key(
                rt.acs.handle,
                "bench-pq",
                pq_key,
                private,
                "ML-DSA-65",
                mldsa_signer.public_key,
                track_chain=False,
            ),
            "ed25519": AcsClient.for_public_key(
                rt.acs.handle,
                "bench-pq",
                pq_key,
                private,
                "ML-DSA-65",
                ed_signer.key.public_key(),
                track_chain=False,
            ),
        }
        for mode, client in clients.items():
            rt.acs.response_signer = ed_signer if mode == "ed25519" else mldsa_signer
            hello = client.hello(profiles=("acs-core", "acs-crypto"))
            assert "result" in hello, hello
        lat: dict[str, list[float]] = {m: [] for m in MODES}
        last: dict[str, dict[str, Any]] = {}
        for r in range(rounds):
            for mode in MODES:
                rt.acs.response_signer = ed_signer if mode == "ed25519" else mldsa_signer
                bodies = _bodies(clients[mode], decisions)
                handle = rt.acs.handle
                for b in bodies[:20]:
                    handle(b)  # warm-up (decided, not timed)
                gc.collect()
                for b in bodies[20:]:
                    t0 = time.perf_counter()
                    last[mode] = handle(b)
                    lat[mode].append(time.perf_counter() - t0)
                assert last[mode]["result"]["decision"] == "allow", last[mode]
                print(f"round {r + 1} {mode}: done", file=sys.stderr)
        for mode in MODES:
            alg = last[mode]["result"]["signature"]["algorithm"]
            assert alg == {"hmac": "HMAC-SHA256", "ml-dsa-65": "ML-DSA-65"}.get(mode, "Ed25519")
        records = list(rt.store.iter_records())
        sessions = {m: c.session_id for m, c in clients.items()}
        public = {
            mldsa_signer.kid: mldsa_signer.public_key,
            ed_signer.kid: ed_signer.key.public_key(),
        }
        verifier: dict[str, Any] = {}
        mine = {
            m: [rec for rec in records if rec.get("session_id") == sid]
            for m, sid in sessions.items()
        }
        walls: dict[str, list[float]] = {m: [] for m in MODES}
        for _ in range(5):  # interleaved, median of 5 walks per mode
            for mode in MODES:
                t0 = time.perf_counter()
                report = verify_records(mine[mode], ikm=IKM, public_keys=public)
                walls[mode].append(time.perf_counter() - t0)
                verifier[mode] = {
                    "entries": report.entries,
                    "signatures_checked": report.signatures_checked,
                }
        for mode in MODES:
            verifier[mode]["entries_per_s"] = verifier[mode]["entries"] / statistics.median(
                walls[mode]
            )
        # One response signature signed and verified alone (per call, interleaved; the
        # verify is what an offline verifier does per entry).
        session_key = clients["hmac"].key
        prepared = {}
        for mode in MODES:
            response = last[mode]
            _, _, message = response_signing_input(response)
            sig = response["result"]["signature"]
            prepared[mode] = (message, sig, asymmetric.decode_b64(sig["value"]))
        sign_t: dict[str, list[float]] = {m: [] for m in MODES}
        verify_t: dict[str, list[float]] = {m: [] for m in MODES}
        signers = {"ml-dsa-65": mldsa_signer.sign, "ed25519": ed_signer.sign}
        for _ in range(600):
            for mode in MODES:
                message, sig, value = prepared[mode]
                t0 = time.perf_counter()
                if mode == "hmac":
                    hmac_sign(session_key, message)
                else:
                    signers[mode](message)
                t1 = time.perf_counter()
                if mode == "hmac":
                    ok = hmac_verify(session_key, message, sig["value"])
                else:
                    assert value is not None
                    ok = asymmetric.verify(sig["algorithm"], public[sig["key_id"]], message, value)
                t2 = time.perf_counter()
                assert ok
                sign_t[mode].append(t1 - t0)
                verify_t[mode].append(t2 - t1)
        raw: dict[str, Any] = {}
        for mode in MODES:
            raw[mode] = {
                "sign_us_median": statistics.median(sign_t[mode]) * 1e6,
                "sign_us_p99": quantile(sign_t[mode], 0.99) * 1e6,
                "verify_us_median": statistics.median(verify_t[mode]) * 1e6,
                "verify_us_p99": quantile(verify_t[mode], 0.99) * 1e6,
                "verifies_per_s": 1 / statistics.median(verify_t[mode]),
                "signature_bytes": len(prepared[mode][2] or b"") if mode != "hmac" else 32,
            }
    finally:
        rt.close()
    out = {m: summary(lat[m]) for m in MODES}
    base = out["hmac"]["median_ms"]
    for m in MODES:
        out[m]["median_vs_hmac"] = out[m]["median_ms"] / base
        out[m]["p99_vs_hmac"] = out[m]["p99_ms"] / out["hmac"]["p99_ms"]
    return {
        "decisions_per_mode": len(lat["hmac"]),
        "latency": out,
        "verifier": verifier,
        "signature_verify": raw,
        "canonical_bytes_example": len(canonical_bytes(last["hmac"])),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--decisions", type=int, default=600, help="per mode per round")
    ap.add_argument("--rounds", type=int, default=3)
    ns = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        result = run(ns.decisions, ns.rounds, Path(tmp))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
