"""warden serve --tls-cert/--tls-key (issue 18 item 5): a real HTTPS request verified
against a self-signed certificate made in the test; a lone half or a bad pair refused."""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import ssl
import subprocess
import sys
import time
from pathlib import Path

import httpx
from conftest import DEFAULT_POLICY, free_port, write_key
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


def self_signed(folder: Path) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "warden-test")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = folder / "cert.pem", folder / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    key_path.chmod(0o600)
    return cert_path, key_path


def _serve(data: Path, *extra: str) -> tuple[subprocess.Popen[bytes], int, Path]:
    write_key(data / "ikm.key")
    port = free_port()
    log = data / "serve.log"
    with log.open("wb") as fh:
        proc = subprocess.Popen(
            [sys.executable, "-m", "warden", "serve", "--port", str(port)]
            + ["--data-dir", str(data), "--policy", str(DEFAULT_POLICY), *extra],
            stdout=fh,
            stderr=subprocess.STDOUT,
            cwd=str(data),
            env={k: v for k, v in os.environ.items() if not k.startswith("WARDEN_")},
        )
    return proc, port, log


def test_https_with_a_self_signed_certificate(tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path)
    data = tmp_path / "srv"
    proc, port, log = _serve(data, "--tls-cert", str(cert), "--tls-key", str(key))
    try:
        verify = ssl.create_default_context(cafile=str(cert))
        deadline = time.monotonic() + 30
        answer = None
        while time.monotonic() < deadline and answer is None:
            assert proc.poll() is None, log.read_text()
            try:
                answer = httpx.get(f"https://127.0.0.1:{port}/healthz", verify=verify, timeout=2)
            except httpx.TransportError:
                time.sleep(0.1)
        assert answer is not None, log.read_text()
        assert answer.status_code == 200 and answer.json()["status"] == "ok"
        # Plain HTTP is not served on the TLS port; an unverified certificate is refused.
        try:
            plain = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5)
            assert plain.status_code >= 400
        except httpx.TransportError:
            pass
        try:
            httpx.get(f"https://127.0.0.1:{port}/healthz", timeout=5)
            raise AssertionError("a self-signed certificate passed default verification")
        except httpx.ConnectError:
            pass
    finally:
        proc.terminate()
        proc.wait(10)


def _refused(tmp_path: Path, *extra: str) -> str:
    data = tmp_path / "srv"
    proc, _, log = _serve(data, *extra)
    assert proc.wait(60) == 2, log.read_text()
    return log.read_text()


def test_cert_without_key_is_refused(tmp_path: Path) -> None:
    cert, _ = self_signed(tmp_path)
    out = _refused(tmp_path, "--tls-cert", str(cert))
    assert "tls_cert and tls_key go together" in out
    assert not (tmp_path / "srv" / "api.token").exists()  # nothing started


def test_mismatched_pair_is_refused(tmp_path: Path) -> None:
    cert, _ = self_signed(tmp_path)
    other = tmp_path / "other"
    other.mkdir()
    _, wrong_key = self_signed(other)
    out = _refused(tmp_path, "--tls-cert", str(cert), "--tls-key", str(wrong_key))
    assert "cannot load them" in out
    assert not (tmp_path / "srv" / "api.token").exists()
