"""``warden GROUP …`` loads only its group's module (``launch.py``): the same commands,
help and answers as through the full CLI, without importing it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import typer

from warden import cli
from warden.launch import GROUPS

SRC = Path(__file__).resolve().parents[2] / "src"


def _run(entry: str, *args: str) -> subprocess.CompletedProcess[str]:
    code = (
        "import sys\n"
        f"sys.argv = ['warden', *{list(args)!r}]\n"
        f"{entry}\n"
        "print('full CLI imported:', 'warden.cli' in sys.modules, file=sys.stderr)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(SRC), "COLUMNS": "100", "TERM": "dumb"}
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )


FAST = "from warden.launch import main\ntry:\n    main()\nexcept SystemExit: pass"
FULL = "from warden.cli import app\ntry:\n    app(prog_name='warden')\nexcept SystemExit: pass"


def test_every_fast_group_is_the_full_clis_own_app() -> None:
    mounted = {g.name: g.typer_instance for g in cli.app.registered_groups}
    for name, (module, attr) in GROUPS.items():
        app = getattr(__import__(module, fromlist=[attr]), attr)
        assert mounted[name] is app, name
        assert isinstance(app, typer.Typer) and len(app.registered_commands) >= 2, name


@pytest.mark.parametrize("args", [("keys", "--help"), ("agents", "list", "--help"), ("db",)])
def test_a_group_answers_as_the_full_cli_without_importing_it(args: tuple[str, ...]) -> None:
    fast, full = _run(FAST, *args), _run(FULL, *args)
    assert fast.stdout == full.stdout and fast.stdout.strip(), (fast.stdout, full.stdout)
    assert "full CLI imported: False" in fast.stderr
    assert "full CLI imported: True" in full.stderr


def test_a_bad_command_in_a_group_is_the_same_usage_error() -> None:
    fast, full = _run(FAST, "keys", "bogus"), _run(FULL, "keys", "bogus")
    strip = [line for line in fast.stderr.splitlines() if not line.startswith("full CLI")]
    assert strip == [line for line in full.stderr.splitlines() if not line.startswith("full CLI")]
    assert "No such command 'bogus'" in fast.stderr


@pytest.mark.parametrize(
    "args",
    [
        (b"export", b"--session", b"\xff\xfe", b"--out", b"z.jsonl", b"--json"),
        (b"agents", b"show", b"\xff"),
        (b"hook", b"claude-code", b"\xc3"),
    ],
)
def test_an_argument_that_is_not_utf8_is_a_usage_error(
    args: tuple[bytes, ...], tmp_path: Path
) -> None:
    """Before: a traceback or "store error: UnicodeEncodeError" (the driver cannot
    encode the surrogate escapes). Now: one usage error, exit 2, nothing written."""
    env = {**os.environ, "PYTHONPATH": str(SRC), "COLUMNS": "100", "TERM": "dumb"}
    done = subprocess.run(
        [sys.executable.encode(), b"-m", b"warden", *args],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    bad = next(i for i, a in enumerate(args, start=1) if not _is_utf8(a))
    assert done.returncode == 2, done.stderr
    assert done.stdout == b""
    assert done.stderr.decode().strip() == (
        f"error: argument {bad} is not valid UTF-8: {args[bad - 1]!r}"
    )
    assert list(tmp_path.iterdir()) == []


def _is_utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True
