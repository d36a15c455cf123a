"""What ``warden`` start-up imports (issue 16, ninth session): every command's module
loads with the CLI, so their heavy libraries load only inside the commands that use
them. A module-level ``import httpx`` (or the settings model, the store, the KLA
verifier) in any ``cli_*`` module fails here, whatever the machine's speed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"

#: Libraries no command needs to be parsed or its help printed.
HEAVY = (
    "httpx",
    "sqlalchemy",
    "pydantic_settings",
    "cryptography",
    "uvicorn",
    "anyio",
    "warden.settings",
    "warden.store.sql",
    "warden.kla.verify",
    "warden.ledger.ledger",
)


def _loaded(code: str, *argv: str) -> dict[str, bool]:
    """Which of HEAVY ``code`` (run with ``sys.argv = ['warden', *argv]``) left imported;
    the answer is printed at exit, after the command ran (or exited)."""
    script = (
        "import atexit, json, sys\n"
        f"heavy = {HEAVY!r}\n"
        "atexit.register(lambda: print('LOADED ' + json.dumps("
        "{m: m in sys.modules for m in heavy}), file=sys.stderr))\n"
        f"sys.argv = ['warden', *{list(argv)!r}]\n"
        f"{code}\n"
    )
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    proc = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = [line for line in proc.stderr.splitlines() if line.startswith("LOADED ")]
    assert lines, proc.stderr
    loaded: dict[str, bool] = json.loads(lines[-1][len("LOADED ") :])
    return loaded


def test_importing_the_cli_loads_no_heavy_library() -> None:
    loaded = _loaded("import warden.cli")
    assert not any(loaded.values()), [m for m, v in loaded.items() if v]


EXPLAIN = (
    "policy",
    "explain",
    "examples/policies/default.yaml",
    "tests/assets/policy/request_shell_rm.json",
    "--json",
)


@pytest.mark.parametrize(
    ("argv", "needed"),
    [
        (("--help",), set()),
        (("policy", "--help"), set()),
        (("serve", "--help"), set()),
        # The policy engine hashes the request (warden.crypto uses cryptography's HKDF);
        # it needs no database, HTTP client or settings model.
        (EXPLAIN, {"cryptography"}),
    ],
)
def test_a_light_command_loads_no_heavy_library(argv: tuple[str, ...], needed: set[str]) -> None:
    loaded = _loaded("from warden.launch import main\nmain()", *argv)
    assert {m for m, v in loaded.items() if v} == needed


def test_the_probe_sees_a_command_that_does_load_them(tmp_path: Path) -> None:
    # The same probe on `warden db current` (it opens the database) reports SQLAlchemy:
    # the assertion above can fail.
    loaded = _loaded(
        "from warden.launch import main\nmain()", "db", "current", "--data-dir", str(tmp_path)
    )
    assert loaded["sqlalchemy"] and loaded["warden.store.sql"]
