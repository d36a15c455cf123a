"""``warden approvals`` (and ``warden witness`` and ``replay agentdojo``) refuse a token
or URL they cannot put in an HTTP request as bad input (one ``error:`` line on stderr,
exit 2, nothing on stdout; docs/cli-json.md), never with a traceback. Nothing here needs
a server: the input is refused before any request is sent."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

WARDEN = [sys.executable, "-m", "warden"]


def warden_bytes(*args: str, env: dict[bytes, bytes]) -> subprocess.CompletedProcess[bytes]:
    base = {b"PATH": b"/usr/bin:/bin"}
    if "PYTHONPATH" in os.environ:
        base[b"PYTHONPATH"] = os.fsencode(os.environ["PYTHONPATH"])
    return subprocess.run([*WARDEN, *args], capture_output=True, timeout=60, env={**base, **env})


def assert_usage_error(out: subprocess.CompletedProcess[bytes], *words: str) -> None:
    stderr = out.stderr.decode(errors="replace")
    assert out.returncode == 2, stderr
    assert out.stdout == b""
    assert "Traceback" not in stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("error: ")
    for word in words:
        assert word in lines[0]


@pytest.mark.parametrize(
    ("args", "env"),
    [
        (["approvals", "list", "--token", "é", "--json"], {}),
        (["approvals", "approve", "task_x", "--reason", "r", "--token", "tök"], {}),
        (["approvals", "list", "--json"], {b"WARDEN_TOKEN": b"\xff"}),
        (["approvals", "list", "--token", "a\tb", "--json"], {}),
    ],
    ids=["accented", "approve", "undecodable-env", "control"],
)
def test_a_token_that_cannot_be_a_header_is_bad_input(
    args: list[str], env: dict[bytes, bytes]
) -> None:
    # An unreachable port: if the token were sent, the error would be "cannot reach".
    out = warden_bytes(*args, "--url", "http://127.0.0.1:9", env=env)
    assert_usage_error(out, "API key")
    assert "é" not in out.stderr.decode(errors="replace")  # the secret is not echoed


@pytest.mark.parametrize("url", ["http://[::1", "http://host:notaport"])
def test_a_url_httpx_cannot_parse_is_bad_input(url: str) -> None:
    out = warden_bytes(
        "approvals", "list", "--token", "x", "--json", env={b"WARDEN_URL": url.encode()}
    )
    assert_usage_error(out, "URL")


def test_witness_refuses_a_url_httpx_cannot_parse(tmp_path: Path) -> None:
    """``warden witness --url`` builds its own client (no token): the same bad URL is the
    same usage error, before any key is generated or state written."""
    from warden.crypto.ed25519_keys import load_or_create_signing_key
    from warden.tlog.note import COSIGNATURE_V1, NoteSigner

    private, _, _ = load_or_create_signing_key(tmp_path / "log.key")
    vkey = NoteSigner("log.example/l", private, COSIGNATURE_V1).vkey()
    out = warden_bytes(
        "witness",
        "--url",
        "http://[::1",
        "--log-key",
        vkey,
        "--key",
        str(tmp_path / "w.key"),
        "--name",
        "witness.example/w1",
        "--state",
        str(tmp_path / "state"),
        "--once",
        env={},
    )
    assert_usage_error(out, "URL")
    assert not (tmp_path / "w.key").exists()


def test_replay_refuses_a_url_httpx_cannot_parse(tmp_path: Path) -> None:
    """``warden replay agentdojo --url`` too, before it looks for the agent key."""
    out = warden_bytes(
        "replay", "agentdojo", "--url", "http://[::1", "--data-dir", str(tmp_path), env={}
    )
    assert_usage_error(out, "URL")
