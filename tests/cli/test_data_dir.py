"""A bad data directory is one line and exit 2 on every command (decision 1190).

`--data-dir` naming a regular file, or a path that cannot be created (`/proc/...`), used
to end in a FileNotFoundError or NotADirectoryError traceback (exit 1, empty stdout even
with `--json`). Every command that takes `--data-dir` now checks it in one place
(:mod:`warden.data_dir`): the option's callback, or for `serve` (which may get it from
WARDEN_DATA_DIR or a config file too) the start of :meth:`Runtime.start`; `doctor`
reports it as its `data_dir` check (tests/ops/test_doctor.py).
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
from conftest import GENERATED_KEY_FILES, warden_cli

from warden.cli import app
from warden.data_dir import check_data_dir, data_dir_problem
from warden.errors import ConfigError, StoreUnavailable

#: Commands whose --data-dir is a Settings field (option, WARDEN_DATA_DIR or config file):
#: checked where the settings are used, not by the option's callback.
SETTINGS_COMMANDS = {("serve",), ("doctor",)}


def _commands() -> Iterator[tuple[tuple[str, ...], Any]]:
    def walk(command: Any, path: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], Any]]:
        if hasattr(command, "commands"):
            for name, sub in command.commands.items():
                yield from walk(sub, (*path, name))
        else:
            yield path, command

    yield from walk(typer.main.get_command(app), ())


def _data_dir_commands() -> list[tuple[tuple[str, ...], bool]]:
    """(command path, has --json) of every command with a --data-dir option."""
    out = []
    for path, command in _commands():
        opts = {opt for p in command.params for opt in getattr(p, "opts", [])}
        if "--data-dir" in opts:
            out.append((path, "--json" in opts))
    return out


DATA_DIR_COMMANDS = _data_dir_commands()


def test_the_commands_with_a_data_dir_are_found() -> None:
    """The walk sees the commands the review named (so the tests below cover them)."""
    found = {path for path, _ in DATA_DIR_COMMANDS}
    for path in [
        ("serve",),
        ("verify",),
        ("doctor",),
        ("export",),
        ("keys", "list"),
        ("agents", "list"),
        ("db", "current"),
        ("log", "key"),
        ("policy", "activate"),
        ("mcp-proxy",),
    ]:
        assert path in found, path


def test_every_data_dir_option_goes_through_one_check() -> None:
    """Every --data-dir option but serve's and doctor's has the shared callback; a new
    command gets it by using cli_options.DataDir."""
    for path, command in _commands():
        for param in command.params:
            if "--data-dir" not in getattr(param, "opts", []):
                continue
            name = getattr(param.callback, "__name__", None)
            if path in SETTINGS_COMMANDS:
                assert name is None, path
            else:
                assert name == "checked_data_dir", path


def _run(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return warden_cli(cwd, *args, **env)


def _assert_one_line(done: subprocess.CompletedProcess[str], expected: str) -> None:
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert done.stdout == "", done.stdout
    assert "Traceback" not in done.stderr
    assert done.stderr.strip() == f"error: {expected}", done.stderr


def _listing(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


#: Every command with a --data-dir but doctor (which reports it as a check), each with
#: whether it takes --json.
CLI_COMMANDS = pytest.mark.parametrize(
    ("command", "has_json"),
    [pytest.param(p, j, id=" ".join(p)) for p, j in DATA_DIR_COMMANDS if p != ("doctor",)],
)


@CLI_COMMANDS
def test_a_data_dir_that_is_a_file_is_one_line_and_exit_2(
    tmp_path: Path, command: tuple[str, ...], has_json: bool
) -> None:
    afile = tmp_path / "somefile"
    afile.write_text("not a folder\n")
    before = _listing(tmp_path)
    done = _run([*command, "--data-dir", str(afile), *(["--json"] if has_json else [])], tmp_path)
    _assert_one_line(done, f"data directory {afile} exists and is not a directory")
    assert _listing(tmp_path) == before and afile.read_text() == "not a folder\n"


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux /proc")
@CLI_COMMANDS
def test_a_data_dir_that_cannot_be_created_is_one_line_and_exit_2(
    tmp_path: Path, command: tuple[str, ...], has_json: bool
) -> None:
    done = _run(
        [*command, "--data-dir", "/proc/forbidden", *(["--json"] if has_json else [])], tmp_path
    )
    _assert_one_line(
        done,
        "data directory /proc/forbidden does not exist and cannot be created: "
        "nothing can be created in /proc: No such file or directory",
    )
    assert not Path("/proc/forbidden").exists() and _listing(tmp_path) == []


def test_serve_checks_a_data_dir_from_the_environment_and_the_config_file(
    tmp_path: Path,
) -> None:
    """serve's data directory may come from WARDEN_DATA_DIR or the config file: checked
    the same (at the start of Runtime.start), before anything is created."""
    afile = tmp_path / "somefile"
    afile.write_text("x")
    expected = f"data directory {afile} exists and is not a directory"
    _assert_one_line(_run(["serve", "--port", "0"], tmp_path, WARDEN_DATA_DIR=str(afile)), expected)
    cfg = tmp_path / "warden.toml"
    cfg.write_text(f'data_dir = "{afile}"\n')
    _assert_one_line(_run(["serve", "--port", "0", "--config", str(cfg)], tmp_path), expected)
    nested = afile / "sub"
    _assert_one_line(
        _run(["verify", "--json"], tmp_path, WARDEN_DATA_DIR=str(nested)),
        f"data directory {nested} does not exist and cannot be created: {afile} is not a directory",
    )
    assert _listing(tmp_path) == ["somefile", "warden.toml"]


def test_a_key_file_whose_folder_is_a_file_is_one_line(tmp_path: Path) -> None:
    """A key file serve must create under a regular file: a ConfigError naming it, not
    a FileExistsError traceback."""
    afile = tmp_path / "somefile"
    afile.write_text("x")
    done = _run(
        ["serve", "--port", "0", "--data-dir", str(tmp_path / "d"), "--key-file"]
        + [str(afile / "ikm.key")],
        tmp_path,
    )
    _assert_one_line(done, f"cannot create {afile / 'ikm.key'}: {afile} is not a directory")


def test_the_check(tmp_path: Path) -> None:
    """An existing folder passes; an absent one passes when its nearest existing ancestor
    is a writable folder (serve makes the rest, like mkdir -p), and checking creates
    nothing: the probe it makes in that ancestor is removed."""
    assert data_dir_problem(tmp_path) is None
    assert data_dir_problem(tmp_path / "a" / "b" / "c") is None
    assert list(tmp_path.iterdir()) == []
    afile = tmp_path / "f"
    afile.write_text("")
    assert data_dir_problem(afile) == f"data directory {afile} exists and is not a directory"
    with pytest.raises(ConfigError, match="cannot be created: .* is not a directory"):
        check_data_dir(afile / "sub" / "deeper")
    assert _listing(tmp_path) == ["f"]


@pytest.mark.parametrize("field", ["api_token_file", "mldsa_key_file", "webhook_signing_key_file"])
def test_a_start_that_cannot_make_a_key_leaves_no_key_behind(tmp_path: Path, field: str) -> None:
    """The keys a failed start generated before the one it could not create are removed
    (decision 351): the next start is again a first start, and nothing half-made stays.
    A key file that was there before the failed start is kept."""
    from warden.runtime import Runtime
    from warden.settings import Settings

    afile = tmp_path / "somefile"
    afile.write_text("x")
    data = tmp_path / "d"
    data.mkdir()
    kept = data / "checkpoint.key"
    if field != "webhook_signing_key_file":  # else the checkpoint key is made before it
        kept.write_text("was here")
    settings = Settings(data_dir=data, **{field: afile / "key"})
    with pytest.raises(ConfigError, match="is not a directory"):
        Runtime.start(settings)
    left = sorted(p.name for p in data.iterdir())
    assert left == ([] if field == "webhook_signing_key_file" else ["checkpoint.key"])
    if field != "webhook_signing_key_file":
        assert kept.read_text() == "was here"


#: Every secret file a first start writes: the IKM and the ones conftest seeds.
KEY_FILES = {"ikm.key", *GENERATED_KEY_FILES}


def test_a_start_refused_by_its_database_leaves_no_key_behind(tmp_path: Path) -> None:
    """A file that is not a database, and a database restored without its key (bound to
    another IKM): the start is refused, and the keys it generated first are removed."""
    from warden.runtime import Runtime
    from warden.settings import Settings

    garbage = tmp_path / "garbage"
    garbage.mkdir()
    (garbage / "warden.db").write_bytes(b"not a database" * 100)
    with pytest.raises(StoreUnavailable, match="not a database"):
        Runtime.start(Settings(data_dir=garbage, gc_freeze=False))
    assert sorted(p.name for p in garbage.iterdir()) == ["warden.db"]

    first = tmp_path / "first"
    Runtime.start(Settings(data_dir=first, gc_freeze=False)).close()
    assert {p.name for p in first.iterdir()} >= KEY_FILES
    restored = tmp_path / "restored"
    restored.mkdir()
    (restored / "warden.db").write_bytes((first / "warden.db").read_bytes())
    with pytest.raises(ConfigError, match="another key file"):
        Runtime.start(Settings(data_dir=restored, gc_freeze=False))
    assert not KEY_FILES & {p.name for p in restored.iterdir()}
