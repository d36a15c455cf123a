"""``warden replay agentdojo``'s own options, before any server is involved (fresh-user
review of issue 14): the key files follow ``--data-dir``, and the install hint survives
Rich's markup."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import TEST_IKM, fixed_key_id, free_port, write_key
from typer.testing import CliRunner

import warden.replay.agentdojo as agentdojo
from warden.cli import app
from warden.crypto.hmac_keys import derive_agent_ikm
from warden.identity.agents import AgentCredential


def demo_key(data: Path) -> None:
    """The quick start's files in ``data``: the IKM and the demo agent's key (issue 15:
    the replay signs as that agent; both default to ``--data-dir``)."""
    write_key(data / "ikm.key")
    key_id = fixed_key_id("demo-agent")
    cred = AgentCredential("demo-agent", key_id, derive_agent_ikm(TEST_IKM, key_id))
    cred.write(data / "agents" / "demo-agent.key")


def test_the_key_file_defaults_to_the_data_dirs(tmp_path: Path) -> None:
    data = tmp_path / "data"
    demo_key(data)
    url = f"http://127.0.0.1:{free_port()}/acs"  # nothing listens: the key must load first
    result = CliRunner().invoke(
        app, ["replay", "agentdojo", "--data-dir", str(data), "--url", url, "--no-verify"]
    )
    assert result.exit_code == 2
    assert "cannot reach Warden" in result.stderr, result.stderr
    assert "does not exist" not in result.stderr


def test_the_install_hint_keeps_its_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = tmp_path / "data"
    demo_key(data)

    def missing(*_: Any, **__: Any) -> Any:
        raise ModuleNotFoundError("No module named 'agentdojo'")

    monkeypatch.setattr(agentdojo, "replay", missing)
    result = CliRunner().invoke(app, ["replay", "agentdojo", "--data-dir", str(data)])
    assert result.exit_code == 2
    assert "pip install -e '.[agentdojo]'" in result.stderr, result.stderr
