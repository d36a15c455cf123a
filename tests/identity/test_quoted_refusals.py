"""A refused identifier is quoted in the message, but never a whole 5,000-character
input (a fresh user's review, issue 16 twelfth session): the CLI and the /v1 wires
echo these messages to the caller."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from warden.crypto.agent_key import check_agent_id
from warden.errors import QUOTED_MAX, ConfigError, quoted
from warden.identity.api_keys import check_groups, check_principal, parse_role

LONG = "a b" * 1700  # 5,100 characters, invalid (spaces)


def test_a_short_value_is_quoted_whole() -> None:
    assert quoted("a b") == "'a b'"
    assert quoted(None) == "None"


def test_a_long_value_is_cut_and_its_length_said() -> None:
    text = quoted(LONG)
    assert text.startswith("'a ba b")
    assert text.endswith("… (5100 characters)")
    assert len(text) < QUOTED_MAX + 30


@pytest.mark.parametrize(
    "check",
    [check_principal, check_agent_id, parse_role, lambda v: check_groups([v])],
    ids=["principal", "agent_id", "role", "group"],
)
def test_each_identifier_refusal_names_the_value_without_echoing_it_whole(check) -> None:
    with pytest.raises(ConfigError) as refused:
        check(LONG)
    message = str(refused.value)
    assert "'a ba b" in message
    assert "(5100 characters)" in message
    assert len(message) < 300
    with pytest.raises(ConfigError) as short:
        check("a b")
    assert "'a b'" in str(short.value)


def test_the_cli_refusal_is_one_short_line(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    key = data / "ikm.key"
    key.write_text(bytes(range(32)).hex())
    key.chmod(0o600)
    subprocess.run(
        [sys.executable, "-m", "warden", "db", "upgrade", "--data-dir", str(data)],
        capture_output=True, check=True,
    )  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-m", "warden", "keys", "create", "--principal", LONG,
         "--role", "approver", "--data-dir", str(data)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    refusal = done.stderr.splitlines()[-1]
    assert refusal.startswith("error: invalid principal 'a ba b"), refusal
    assert "(5100 characters)" in refusal
    assert len(refusal) < 300, refusal
