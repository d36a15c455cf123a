"""Secrets on disk: the HMAC master secret (IKM) and the spend API token.

Both are generated on first start from the OS CSPRNG and written with mode 0600
(:func:`_create_private`); a secret file readable or writable by group or others
is refused (:func:`_read_private`), and so is one too short to be a secret. The
IKM is 32 bytes stored hex-encoded; the API token is 32 random bytes in
URL-safe base64 (43 characters), compared in constant time by the spend wire.
"""

from __future__ import annotations

import os
import re
import secrets
import stat
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from warden.crypto.hmac_keys import MIN_IKM_BYTES
from warden.errors import ConfigError

#: What an API token may contain (RFC 6750 ``b64token``) and how short it may be.
_TOKEN = re.compile(r"^[A-Za-z0-9\-._~+/]+=*$")
MIN_TOKEN_CHARS = 32

_T = TypeVar("_T")


def _read_private(path: Path, what: str) -> str:
    """The text of a secret file, stripped; ConfigError if missing, shared or unreadable."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError as exc:
        raise ConfigError(f"{what} {path} does not exist") from exc
    except OSError as exc:  # a file where a folder of its path should be, or no access
        raise ConfigError(f"{what} {path} cannot be read: {exc.strerror or exc}") from exc
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ConfigError(
            f"{what} {path} is accessible by group/others (mode {oct(mode & 0o777)}); chmod 600 it"
        )
    try:
        return path.read_text(encoding="ascii", errors="replace").strip()
    except OSError as exc:  # a directory, or not readable by this user
        raise ConfigError(f"{what} {path} cannot be read: {exc.strerror or exc}") from exc


def _create_private(path: Path, text: str) -> None:
    """Write a new secret file with mode 0600 (never replacing one), its folder 0700.

    The file appears whole or not at all: it is written under a temporary name and
    hard-linked into place, so replicas starting together on one data directory never
    read a half-written key. Raises FileExistsError if ``path`` already exists, and
    :class:`ConfigError` (one line, not a traceback) if it cannot be written: its folder
    cannot be made, is not writable, or is full.
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    except FileExistsError as exc:  # a file where a folder of the path should be
        raise ConfigError(f"cannot create {path}: {path.parent} is not a directory") from exc
    except OSError as exc:
        raise ConfigError(f"cannot create {path}: {exc.strerror or exc}") from exc
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "w") as fh:
                fh.write(text + "\n")
                fh.flush()
                os.fsync(fh.fileno())
            os.link(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
    except FileExistsError:
        raise
    except OSError as exc:
        raise ConfigError(f"cannot create {path}: {exc.strerror or exc}") from exc


def _load_or_create(
    path: Path, load: Callable[[Path], _T], make: Callable[[], tuple[_T, str]]
) -> tuple[_T, bool]:
    if path.exists():
        return load(path), False
    value, text = make()
    try:
        _create_private(path, text)
    except FileExistsError:  # another process created it first: use theirs
        return load(path), False
    return value, True


def load_ikm(path: Path) -> bytes:
    """Read an IKM file: hex text (whitespace around it ignored).

    Raises :class:`ConfigError` if it is missing, too permissive, not hex or too short.
    """
    text = _read_private(path, "key file")
    try:
        ikm = bytes.fromhex(text)
    except ValueError as exc:
        raise ConfigError(
            f"key file {path} is not hex text (the IKM is stored as hex, e.g. "
            "`python -c 'import secrets; print(secrets.token_hex(32))'`)"
        ) from exc
    if len(ikm) < MIN_IKM_BYTES:
        raise ConfigError(f"key file {path} holds {len(ikm)} bytes; at least 32 are required")
    if len(set(ikm)) <= 1:
        raise ConfigError(f"key file {path} holds a degenerate key (every byte the same)")
    return ikm


def load_or_create_ikm(path: Path) -> tuple[bytes, bool]:
    """Load the IKM at ``path``, creating it (0600, 32 random bytes) if absent.

    Returns ``(ikm, created)``.
    """

    def make() -> tuple[bytes, str]:
        ikm = secrets.token_bytes(MIN_IKM_BYTES)
        return ikm, ikm.hex()

    return _load_or_create(path, load_ikm, make)


def load_api_token(path: Path) -> str:
    """Read an API token file: one RFC 6750 ``b64token`` of at least 32 characters.

    Raises :class:`ConfigError` if it is missing, too permissive, malformed or too short.
    """
    token = _read_private(path, "API token file")
    if not _TOKEN.match(token):
        raise ConfigError(
            f"API token file {path} must hold one token of letters, digits and -._~+/ "
            "(e.g. `python -c 'import secrets; print(secrets.token_urlsafe(32))'`)"
        )
    if len(token) < MIN_TOKEN_CHARS:
        raise ConfigError(
            f"API token file {path} holds {len(token)} characters; "
            f"at least {MIN_TOKEN_CHARS} are required"
        )
    if len(set(token)) <= 1:
        raise ConfigError(f"API token file {path} holds a degenerate token")
    return token


def load_or_create_api_token(path: Path) -> tuple[str, bool]:
    """Load the API token at ``path``, creating it (0600, 32 random bytes, URL-safe
    base64) if absent. Returns ``(token, created)``."""

    def make() -> tuple[str, str]:
        token = secrets.token_urlsafe(32)
        return token, token

    return _load_or_create(path, load_api_token, make)
