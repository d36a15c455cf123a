"""The HMAC master secret on disk: created 0600 with 32 random bytes; refused when
readable by group/others, too short, or missing."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import DEFAULT_POLICY, TEST_IKM, write_key

from warden.crypto.keystore import load_ikm, load_or_create_ikm
from warden.errors import ConfigError
from warden.runtime import Runtime
from warden.settings import Settings


@pytest.fixture
def permissive_umask() -> Iterator[None]:
    """Creation must not rely on the process umask to get 0600."""
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


def test_created_with_mode_0600_and_32_bytes(tmp_path: Path, permissive_umask: None) -> None:
    path = tmp_path / "nested" / "ikm.key"
    ikm, created = load_or_create_ikm(path)
    assert created is True
    assert len(ikm) == 32
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_text() == ikm.hex() + "\n"
    again, created_again = load_or_create_ikm(path)
    assert (again, created_again) == (ikm, False)
    assert load_ikm(path) == ikm


def test_each_created_key_is_fresh(tmp_path: Path) -> None:
    a, _ = load_or_create_ikm(tmp_path / "a.key")
    b, _ = load_or_create_ikm(tmp_path / "b.key")
    assert a != b


def test_hex_key_file_loads(tmp_path: Path) -> None:
    assert load_ikm(write_key(tmp_path / "k", TEST_IKM)) == TEST_IKM


@pytest.mark.parametrize(
    "content",
    [bytes(range(200, 240)), (TEST_IKM.hex()[:-1] + "g").encode(), b"not a key at all, clearly"],
    ids=["raw-binary", "one-bad-hex-char", "prose"],
)
def test_key_file_that_is_not_hex_is_refused(tmp_path: Path, content: bytes) -> None:
    # A silently different key would verify nothing and sign everything wrongly.
    path = tmp_path / "bad.key"
    path.write_bytes(content)
    path.chmod(0o600)
    with pytest.raises(ConfigError) as info:
        load_ikm(path)
    assert "not hex" in info.value.message


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o660, 0o644, 0o610, 0o601, 0o700 | 0o020])
def test_key_readable_or_writable_by_others_is_refused(tmp_path: Path, mode: int) -> None:
    path = write_key(tmp_path / "k")
    path.chmod(mode)
    with pytest.raises(ConfigError) as info:
        load_ikm(path)
    assert str(path) in info.value.message
    assert "group/others" in info.value.message
    with pytest.raises(ConfigError):
        load_or_create_ikm(path)  # an existing bad file is never silently replaced
    assert path.read_text() == TEST_IKM.hex() + "\n"


@pytest.mark.parametrize("size", [0, 1, 16, 31])
def test_short_key_is_refused(tmp_path: Path, size: int) -> None:
    path = write_key(tmp_path / "k", bytes(range(size)))
    with pytest.raises(ConfigError) as info:
        load_ikm(path)
    assert f"holds {size} bytes; at least 32 are required" in info.value.message


def test_missing_key_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_ikm(tmp_path / "absent.key")
    assert "does not exist" in info.value.message


def test_runtime_refuses_to_start_with_a_bad_key(tmp_path: Path) -> None:
    key = write_key(tmp_path / "k")
    key.chmod(0o644)
    settings = Settings(data_dir=tmp_path / "data", policy=DEFAULT_POLICY, key_file=key)
    with pytest.raises(ConfigError):
        Runtime.start(settings)
    assert not (tmp_path / "data" / "warden.db").exists()


def test_runtime_creates_a_missing_key(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "data", policy=DEFAULT_POLICY)
    rt = Runtime.start(settings)
    try:
        assert rt.ikm_created is True
        key = tmp_path / "data" / "ikm.key"
        assert stat.S_IMODE(key.stat().st_mode) == 0o600
        assert len(load_ikm(key)) == 32
    finally:
        rt.close()


@pytest.mark.parametrize("byte", [0x00, 0xFF, 0x41])
def test_degenerate_key_is_refused(tmp_path: Path, byte: int) -> None:
    path = write_key(tmp_path / "k", bytes([byte]) * 32)
    with pytest.raises(ConfigError) as info:
        load_ikm(path)
    assert "degenerate" in info.value.message
