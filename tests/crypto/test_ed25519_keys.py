"""Warden's Ed25519 signing key on disk: created 0600 as PKCS#8 PEM, its kid derived from
the public key; refused when shared with group/others, not a key, or not Ed25519."""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ec import SECP256R1, generate_private_key

from warden.crypto.ed25519_keys import key_id_for, load_or_create_signing_key, load_signing_key
from warden.errors import ConfigError
from warden.runtime import Runtime


@pytest.fixture
def permissive_umask() -> Iterator[None]:
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


def test_created_0600_pkcs8_and_reloaded_with_the_same_kid(
    tmp_path: Path, permissive_umask: None
) -> None:
    path = tmp_path / "nested" / "signing.key"
    key, kid, created = load_or_create_signing_key(path)
    assert created is True
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_text().startswith("-----BEGIN PRIVATE KEY-----")
    raw = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    assert kid == hashlib.sha256(raw).hexdigest()[:16] == key_id_for(key.public_key())
    again, kid_again, created_again = load_or_create_signing_key(path)
    assert (kid_again, created_again) == (kid, False)
    assert again.private_bytes_raw() == key.private_bytes_raw()


def test_a_shared_key_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "signing.key"
    load_or_create_signing_key(path)
    path.chmod(0o640)
    with pytest.raises(ConfigError, match="accessible by group/others"):
        load_signing_key(path)


def _private(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o600)
    return path


def test_garbage_and_other_key_types_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not an unencrypted PEM private key"):
        load_signing_key(_private(tmp_path / "a.key", "not a key"))
    ec = generate_private_key(SECP256R1()).private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    with pytest.raises(ConfigError, match="not an Ed25519 key"):
        load_signing_key(_private(tmp_path / "ec.key", ec.decode()))


def test_the_runtime_creates_it_in_the_data_dir(make_runtime: Callable[..., Runtime]) -> None:
    rt = make_runtime()
    path = rt.settings.data_dir / "signing.key"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert rt.kla is not None and rt.kla.signer.kid == load_signing_key(path)[1]
