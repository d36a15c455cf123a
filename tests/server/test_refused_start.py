"""A start refused for a bad input file writes nothing, so the first start that succeeds
registers the quick start's demo agent (decision 990)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import DEFAULT_POLICY
from warden.errors import ConfigError
from warden.runtime import Runtime
from warden.settings import Settings

WEBHOOKS = """webhooks:
- id: h1
  url: http://127.0.0.1:9/hook
  secret: abcdefghijklmnopqrstuvwxyz0123456789
  events: [task.created]
"""


def _demo_registered(data: Path) -> None:
    rt = Runtime.start(Settings(data_dir=data, policy=DEFAULT_POLICY))
    try:
        assert rt.demo_agent_key == data / "agents" / "demo-agent.key"
        assert rt.demo_agent_key.is_file()
        assert [(a.agent_id, a.active) for a in rt.agents.list()] == [("demo-agent", True)]
    finally:
        rt.close()


@pytest.mark.parametrize("option", ["budgets", "webhooks", "kla_keys", "log_witness_keys"])
def test_a_refused_input_file_writes_nothing(tmp_path: Path, option: str) -> None:
    data = tmp_path / "data"
    bad = tmp_path / "missing.yaml"
    if option == "webhooks":  # readable, but a loopback destination is refused
        bad.write_text(WEBHOOKS, encoding="utf-8")
    settings = Settings(data_dir=data, policy=DEFAULT_POLICY, **{option: bad})
    with pytest.raises(ConfigError):
        Runtime.start(settings)
    assert not data.exists()
    _demo_registered(data)


def test_a_data_directory_that_started_once_gets_no_demo_agent(tmp_path: Path) -> None:
    data = tmp_path / "data"
    rt = Runtime.start(Settings(data_dir=data, policy=DEFAULT_POLICY))
    rt.agents.revoke("demo-agent", by="test")
    rt.close()
    (data / "agents" / "demo-agent.key").unlink()
    rt = Runtime.start(Settings(data_dir=data, policy=DEFAULT_POLICY))
    try:
        assert rt.demo_agent_key is None
        assert [(a.agent_id, a.active) for a in rt.agents.list()] == [("demo-agent", False)]
    finally:
        rt.close()


def test_an_otlp_endpoint_without_the_sdk_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = importlib.util.find_spec

    def without_otlp(name: str, package: str | None = None) -> Any:
        return None if name.startswith("opentelemetry.exporter") else real(name, package)

    monkeypatch.setattr(importlib.util, "find_spec", without_otlp)
    data = tmp_path / "data"
    settings = Settings(data_dir=data, policy=DEFAULT_POLICY, otlp_endpoint="http://127.0.0.1:9")
    with pytest.raises(ConfigError, match=r"pip install 'warden\[otel\]'"):
        Runtime.start(settings)
    assert not data.exists()
