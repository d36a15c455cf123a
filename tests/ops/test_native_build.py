"""The compiled modules' list and the guard against a stale build (decision 332).

Each guard case runs in a process of its own on a copy of ``src/``: with the build's
manifest when this checkout was compiled (then the listed modules must load compiled
while their sources are unchanged), or with a manifest written here for a pure-Python
checkout (what the guard does does not depend on the ``.so`` files being there).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT

from warden import native

SRC = ROOT / "src"

PROBE = """
import importlib, json, sys
import warden, warden.native as n
files = {name: importlib.import_module(name).__file__ for name in sys.argv[1:]}
print(json.dumps({"state": n.state, "changed": n.changed, "files": files}))
"""


def test_the_list_names_existing_modules_and_never_the_guard_itself() -> None:
    paths = native.listed_paths()
    assert paths, "native_modules.txt lists no module"
    for path in paths:
        assert (SRC / path).is_file(), path
    assert "warden/native.py" not in paths
    assert "warden/__init__.py" not in paths
    assert len(set(paths)) == len(paths)


def test_the_list_reads_comments_and_package_modules() -> None:
    text = "# a comment\nwarden/ids.py  # why\n\nwarden/schemas/__init__.py\n"
    assert native.listed_paths(text) == ["warden/ids.py", "warden/schemas/__init__.py"]
    assert [native.module_name(p) for p in native.listed_paths(text)] == [
        "warden.ids",
        "warden.schemas",
    ]


def test_a_compiled_checkout_runs_its_listed_modules_compiled() -> None:
    if native.state == "python":
        pytest.skip("this checkout was installed without compiling (WARDEN_PURE_PYTHON)")
    assert native.state == "native", native.changed
    for path in native.listed_paths():
        module = __import__(native.module_name(path), fromlist=["_"])
        assert module.__file__ is not None and module.__file__.endswith(".so"), path


def _copy(tmp_path: Path) -> Path:
    """``src/`` copied; where this checkout is pure Python, a manifest of the sources and
    an empty stand-in for the last listed module's compiled file (the guard looks for
    one; a stand-in is never imported while the guard sends that module to its source)."""
    copy = tmp_path / "src"
    shutil.copytree(SRC, copy, ignore=shutil.ignore_patterns("__pycache__"))
    manifest = copy / "warden" / native.MANIFEST_FILE.name
    if native.state == "python":
        manifest.write_text(
            "".join(
                f"{native.module_name(p)} {native.source_digest(copy / p)}\n"
                for p in native.listed_paths()
            )
        )
        last = copy / native.listed_paths()[-1]
        last.with_name(last.stem + EXTENSION_SUFFIXES[0]).write_bytes(b"")
    return copy


def _probe(copy: Path, names: list[str] | None = None) -> tuple[dict, str]:
    names = names or [native.module_name(p) for p in native.listed_paths()]
    env = {**os.environ, "PYTHONPATH": str(copy)}
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *names],
        capture_output=True,
        text=True,
        env=env,
        cwd=copy.parent,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout), done.stderr


def test_unchanged_sources_keep_the_build(tmp_path: Path) -> None:
    if native.state == "python":
        pytest.skip("needs this checkout compiled: a stand-in compiled file cannot be imported")
    copy = _copy(tmp_path)
    seen, stderr = _probe(copy)
    assert (seen["state"], seen["changed"], stderr) == ("native", [], "")
    for name, file in seen["files"].items():
        assert file.startswith(str(copy)) and file.endswith(".so"), (name, file)


def test_a_changed_source_sends_every_listed_module_back_to_python(tmp_path: Path) -> None:
    copy = _copy(tmp_path)
    edited = native.listed_paths()[-1]
    with (copy / edited).open("a") as fh:
        fh.write("\n# edited after the build\n")
    seen, stderr = _probe(copy)
    assert seen["state"] == "stale"
    assert seen["changed"] == [native.module_name(edited)]
    assert "1 module(s) changed since they were compiled" in stderr
    assert "pip install -e ." in stderr
    for name, file in seen["files"].items():
        assert file.endswith(".py"), (name, file)


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda text: None, id="missing"),
        pytest.param(lambda text: b"", id="empty"),
        pytest.param(lambda text: text + b"hello world\n", id="stray-line"),
        pytest.param(lambda text: text + b"\xff\n", id="not-utf8"),
        pytest.param(lambda text: b"".join(text.splitlines(keepends=True)[:-1]), id="no-line"),
    ],
)
def test_a_missing_or_damaged_manifest_is_a_stale_build(tmp_path: Path, damage: Any) -> None:
    copy = _copy(tmp_path)
    manifest = copy / "warden" / native.MANIFEST_FILE.name
    damaged = damage(manifest.read_bytes())
    if damaged is None:
        manifest.unlink()
    else:
        manifest.write_bytes(damaged)
    seen, stderr = _probe(copy)
    assert seen["state"] == "stale"
    assert "native_build.txt" in stderr and "is missing or damaged" in stderr
    for name, file in seen["files"].items():
        assert file.endswith(".py"), (name, file)


def test_doctor_warns_of_a_stale_build_and_says_to_rebuild(tmp_path: Path) -> None:
    """``warden doctor`` run on a build whose source changed: its ``native`` check is a
    warning naming the changed module and the rebuild, and the run still passes (exit 0)."""
    copy = _copy(tmp_path)
    edited = native.listed_paths()[-1]
    with (copy / edited).open("a") as fh:
        fh.write("\n# edited after the build\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARDEN_")}
    done = subprocess.run(
        [sys.executable, "-m", "warden", "doctor", "--data-dir", str(tmp_path / "d"), "--json"],
        capture_output=True,
        text=True,
        env={**env, "PYTHONPATH": str(copy)},
        cwd=tmp_path,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    [check] = [c for c in json.loads(done.stdout)["checks"] if c["name"] == "native"]
    assert check["status"] == "warn", check
    assert native.module_name(edited) in check["message"]
    assert "pip install -e ." in check["message"]
