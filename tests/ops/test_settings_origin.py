"""An invalid setting names where its value came from, and the value (decision 1171).

`WARDEN_GC_FREEZE=maybe` said `invalid settings: gc_freeze: Input should be a valid
boolean, unable to interpret input`: the setting, never the variable the user set nor
what it held. Each problem now ends with its origin: ``(environment: VAR='value')``,
``(config file PATH: key = value)`` or ``(option: --flag value)``. Still one line on
stderr, exit 2, nothing on stdout (with ``--json`` too), nothing created.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from conftest import warden_cli

from warden.config_file import load_settings
from warden.errors import ConfigError

BOOL_REASON = "gc_freeze: Input should be a valid boolean, unable to interpret input"
PORT_REASON = "port: Input should be less than or equal to 65535"


def warden(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``warden ARGS`` in ``tmp_path`` with only the given WARDEN_* variables."""
    return warden_cli(tmp_path, *args, **env)


def refused(done: subprocess.CompletedProcess[str], tmp_path: Path) -> str:
    """The one error line of a run refused for its settings (exit 2, no stdout)."""
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    assert done.stdout == ""
    [line] = done.stderr.splitlines()
    assert not (tmp_path / "data").exists()  # nothing created
    return line


@pytest.mark.parametrize("json_out", [[], ["--json"]])
def test_a_bad_boolean_variable_is_named_with_its_value(tmp_path: Path, json_out: list) -> None:
    done = warden(tmp_path, "doctor", "--data-dir", "data", *json_out, WARDEN_GC_FREEZE="maybe")
    assert refused(done, tmp_path) == (
        f"error: invalid settings: {BOOL_REASON} (environment: WARDEN_GC_FREEZE='maybe')"
    )


def test_a_variable_is_blamed_not_the_config_file_given_beside_it(tmp_path: Path) -> None:
    """With a file given, every problem was reported as "(config file …)", the variable's
    too; and each of two problems names its own origin."""
    cfg = tmp_path / "warden.toml"
    cfg.write_text("port = 70000\n")
    done = warden(
        tmp_path, "serve", "--data-dir", "data", "--config", str(cfg), WARDEN_GC_FREEZE="maybe"
    )
    assert refused(done, tmp_path) == (
        f"error: invalid settings: {PORT_REASON} (config file {cfg}: port = 70000); "
        f"{BOOL_REASON} (environment: WARDEN_GC_FREEZE='maybe')"
    )


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ('gc_freeze = "maybe"', "gc_freeze: Input should be a valid boolean, not a TOML string"),
        ("trace_sample_ratio = 2.5", "trace_sample_ratio: Input should be less than or equal to 1"),
    ],
)
def test_a_bad_config_file_value_is_named_with_its_file_and_key(
    tmp_path: Path, line: str, reason: str
) -> None:
    """A wrong TOML type (read_config's strict check) and a value out of range (the
    model's) both end with the file and the line that set it."""
    cfg = tmp_path / "warden.toml"
    cfg.write_text(f"# a comment\n{line}\n")
    done = warden(tmp_path, "doctor", "--data-dir", "data", "--config", str(cfg), "--json")
    assert refused(done, tmp_path) == (
        f"error: invalid settings: {reason} (config file {cfg}: {line})"
    )


def test_an_option_and_the_variable_it_reads_are_told_apart(tmp_path: Path) -> None:
    """`--port` reads WARDEN_PORT itself (click), so the value reaches the settings as a
    given one: the command's parameter source tells which the user set."""
    typed = warden(tmp_path, "serve", "--data-dir", "data", "--port", "70000")
    assert (
        refused(typed, tmp_path) == f"error: invalid settings: {PORT_REASON} (option: --port 70000)"
    )
    from_env = warden(tmp_path, "serve", "--data-dir", "data", WARDEN_PORT="70000")
    assert refused(from_env, tmp_path) == (
        f"error: invalid settings: {PORT_REASON} (environment: WARDEN_PORT='70000')"
    )
    # The value as the user typed it, before serve upper-cases --sqlite-sync.
    typed = warden(tmp_path, "serve", "--data-dir", "data", "--sqlite-sync", "bogus")
    assert refused(typed, tmp_path).endswith(" (option: --sqlite-sync 'bogus')")


def test_a_list_variable_that_is_not_json_is_one_line(tmp_path: Path) -> None:
    """pydantic-settings reads a list setting's variable as JSON and raised, unformatted,
    when it was not: a traceback."""
    done = warden(tmp_path, "doctor", "--data-dir", "data", WARDEN_EVIDENCE_SIGNING_KEYS="ed25519")
    assert refused(done, tmp_path) == (
        "error: invalid settings: evidence_signing_keys: not JSON: a variable sets it as JSON, "
        "such as [\"ed25519\"] (environment: WARDEN_EVIDENCE_SIGNING_KEYS='ed25519')"
    )
    fixed = warden(
        tmp_path, "doctor", "--data-dir", "data", "--json",
        WARDEN_EVIDENCE_SIGNING_KEYS='["ed25519", "ml-dsa-65"]',
    )  # fmt: skip
    assert fixed.returncode == 0, fixed.stderr


def test_a_quoted_value_hides_a_url_password_and_stays_one_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in list(os.environ):
        if name.startswith("WARDEN_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("WARDEN_PUBLIC_URL", "ftp://alice:s3cret@desk.example/")
    with pytest.raises(ConfigError) as caught:
        load_settings(None)
    message = caught.value.message
    assert "s3cret" not in message
    assert message.endswith(" (environment: WARDEN_PUBLIC_URL='ftp://alice:***@desk.example/')")
    monkeypatch.setenv("WARDEN_PUBLIC_URL", "ftp://x\n" + "y" * 500)
    with pytest.raises(ConfigError) as caught:
        load_settings(None)
    message = caught.value.message
    assert "\n" not in message and "…'" in message and len(message) < 400


def test_without_a_command_a_given_value_is_reported_as_its_option(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Called as a library (no running command), a given value is the option's."""
    for name in list(os.environ):
        if name.startswith("WARDEN_"):
            monkeypatch.delenv(name)
    with pytest.raises(ConfigError) as caught:
        load_settings(None, port=70000, public_url="ftp://x")
    assert caught.value.message == (
        f"invalid settings: {PORT_REASON} (option: --port 70000); public_url: Value error, "
        "public_url must be an http(s) URL such as https://warden.example "
        "(option: --public-url 'ftp://x')"
    )


@pytest.mark.parametrize(
    ("command", "variable", "value", "reason"),
    [
        ("serve", "WARDEN_PORT", "abc", "port: Input should be a valid integer"),
        ("serve", "WARDEN_SKEW_WINDOW_MS", "1.5", "skew_window_ms: Input should be a valid"),
        ("serve", "WARDEN_TRACE_SAMPLE_RATIO", "x", "trace_sample_ratio: Input should be a"),
        ("doctor", "WARDEN_PORT", "abc", "port: Input should be a valid integer"),
    ],
)
def test_a_variable_an_option_cannot_convert_is_the_settings_line(
    tmp_path: Path, command: str, variable: str, value: str, reason: str
) -> None:
    """A variable an option reads, in a type the option cannot convert, was Click's usage
    error ("Usage: … Try 'warden serve --help'"), which names the option; it is now the
    settings' one line with the variable and its value (decision 352)."""
    done = warden(tmp_path, command, "--data-dir", "data", **{variable: value})
    line = refused(done, tmp_path)
    assert line.startswith(f"error: invalid settings: {reason}"), line
    assert line.endswith(f" (environment: {variable}={value!r})"), line


def test_an_option_typed_on_the_command_line_is_still_a_usage_error(tmp_path: Path) -> None:
    """The same bad value typed as the option is the caller's usage mistake: Click's
    message, which names the option (exit 2)."""
    done = warden(tmp_path, "serve", "--data-dir", "data", "--port", "abc")
    assert done.returncode == 2
    assert "Invalid value for '--port'" in done.stderr
    assert "invalid settings" not in done.stderr
