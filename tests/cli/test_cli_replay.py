"""``warden replay agentdojo``'s own options, before any server is involved (fresh-user
review of issue 14): the key file follows ``--data-dir``, and the install hint survives
Rich's markup."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import free_port, write_key
from typer.testing import CliRunner

import warden.replay.agentdojo as agentdojo
from warden.cli import app


def test_the_key_file_defaults_to_the_data_dirs(tmp_path: Path) -> None:
    data = tmp_path / "data"
    write_key(data / "ikm.key")
    url = f"http://127.0.0.1:{free_port()}/acs"  # nothing listens: the key must load first
    result = CliRunner().invoke(
        app, ["replay", "agentdojo", "--data-dir", str(data), "--url", url, "--no-verify"]
    )
    assert result.exit_code == 2
    assert "cannot reach Warden" in result.stderr, result.stderr
    assert "does not exist" not in result.stderr


def test_the_install_hint_keeps_its_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = tmp_path / "data"
    write_key(data / "ikm.key")

    def missing(*_: Any, **__: Any) -> Any:
        raise ModuleNotFoundError("No module named 'agentdojo'")

    monkeypatch.setattr(agentdojo, "replay", missing)
    result = CliRunner().invoke(app, ["replay", "agentdojo", "--data-dir", str(data)])
    assert result.exit_code == 2
    assert "pip install -e '.[agentdojo]'" in result.stderr, result.stderr
