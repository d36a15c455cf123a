"""``--help`` reads the same at any terminal width and never cuts a word (decision 991)."""

from __future__ import annotations

import re

import click
import pytest
import typer
from typer.testing import CliRunner

from warden.cli import app
from warden.cli_hook import hook_app


def _paths(cmd: click.Command, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    found = [path]
    for name, sub in getattr(cmd, "commands", {}).items():  # a group's commands
        found += _paths(sub, (*path, name))
    return found


PATHS = _paths(typer.main.get_command(app))


def _help(path: tuple[str, ...], columns: str) -> str:
    result = CliRunner().invoke(
        app,
        [*path, "--help"],
        prog_name="warden",
        env={"COLUMNS": columns, "TERMINAL_WIDTH": columns},
    )
    assert result.exit_code == 0, result.output
    return result.output


def test_every_command_is_walked() -> None:
    assert {("serve",), ("agents", "add"), ("hook", "claude-code"), ("log", "prove")} <= set(PATHS)


@pytest.mark.parametrize("path", PATHS, ids=lambda p: " ".join(p) or "warden")
def test_help_is_whole_and_the_same_at_any_width(path: tuple[str, ...]) -> None:
    narrow, wide = _help(path, "40"), _help(path, "250")
    assert narrow == wide
    cut = [line for line in narrow.splitlines() if "…" in line or re.search(r"\w\.\.\.$", line)]
    assert cut == []
    assert max(len(line) for line in narrow.splitlines()) <= 80


def test_brackets_in_help_are_printed_as_written() -> None:
    text = " ".join(_help(("serve",), "80").split())
    assert "an admin API key always) [loopback]." in text
    assert "Interface to bind [127.0.0.1]." in text


def test_a_group_lists_each_commands_first_sentence_whole() -> None:
    result = CliRunner().invoke(hook_app, ["--help"], prog_name="warden hook")
    assert " ".join(result.output.split()).endswith(
        "Commands: claude-code Claude Code hook: PreToolUse, PostToolUse, UserPromptSubmit, "
        "SessionStart and SessionEnd events on stdin → Warden → the hook's JSON answer on "
        "stdout."
    )


def test_a_bare_group_prints_its_help_on_stdout_and_exits_2() -> None:
    result = CliRunner().invoke(app, ["db"], prog_name="warden")
    assert result.exit_code == 2
    assert result.stdout.startswith("Usage: warden db [OPTIONS] COMMAND [ARGS]...\n")
    assert result.stderr == ""
