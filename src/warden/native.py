"""Which of Warden's modules run compiled by mypyc, and the guard against a stale build
(decision 332).

The hot path's modules, listed in ``native_modules.txt`` (paths under ``src/``), are
compiled by mypyc when Warden is installed (``setup.py``); the build writes
``native_build.txt`` beside this file: one line per compiled module, its name and the
SHA-256 of the source it was compiled from. In an editable install the compiled ``.so`` files sit
next to the ``.py`` files and Python imports the ``.so``: after an edit, a
``git checkout`` or a merge it would run the old code. :func:`install_guard` (called by
``warden/__init__.py`` before any other module of the package is imported) compares
the hashes and, if any source changed, makes every listed module load from its ``.py``
(all of them, since compiled modules call each other directly) and says so once on
stderr. Rebuild with ``pip install -e .``.

This module is never compiled itself, and imports nothing of Warden.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from importlib.machinery import ModuleSpec
    from types import ModuleType

PACKAGE_DIR = Path(__file__).resolve().parent
#: The list the build compiles: one path per line relative to ``src/``; ``#`` comments.
LIST_FILE = PACKAGE_DIR / "native_modules.txt"
#: Written by the build where the compiled modules are: ``<module name> <sha256>`` lines.
MANIFEST_FILE = PACKAGE_DIR / "native_build.txt"

#: What :func:`install_guard` found: ``"native"`` (the compiled modules match their
#: sources), ``"python"`` (nothing was compiled) or ``"stale"`` (sources changed since
#: the build: every listed module runs from its ``.py``).
state = "python"
#: The modules whose source differs from what was compiled (``"stale"`` only).
changed: list[str] = []


def listed_paths(text: str | None = None) -> list[str]:
    """The paths in ``native_modules.txt`` (or ``text``), e.g. ``warden/ids.py``."""
    if text is None:
        text = LIST_FILE.read_text(encoding="utf-8") if LIST_FILE.exists() else ""
    lines = (line.split("#", 1)[0].strip() for line in text.splitlines())
    return [line for line in lines if line]


def module_name(path: str) -> str:
    """``warden/schemas/__init__.py`` → ``warden.schemas``; ``warden/ids.py`` → ``warden.ids``."""
    parts = path.removesuffix(".py").split("/")
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def source_digest(path: Path) -> str:
    """SHA-256 (hex) of a source file's bytes."""
    import hashlib  # only where something was compiled: OpenSSL's module takes ~2 ms

    return hashlib.sha256(path.read_bytes()).hexdigest()


def _source_of(name: str) -> Path:
    relative = name.split(".")[1:]
    package = PACKAGE_DIR.joinpath(*relative)
    if (package / "__init__.py").exists():
        return package / "__init__.py"
    return PACKAGE_DIR.joinpath(*relative[:-1], relative[-1] + ".py") if relative else package


class _SourceFirst:
    """A ``sys.meta_path`` finder: the named modules from their ``.py`` files, never a
    compiled file. (Not an ``importlib.abc.MetaPathFinder``: importing that module costs
    ~8 ms of every command's start.)"""

    def __init__(self, names: set[str]) -> None:
        self.names = names

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname not in self.names:
            return None
        import importlib.util

        source = _source_of(fullname)
        if not source.exists():
            return None
        search = [str(source.parent)] if source.name == "__init__.py" else None
        return importlib.util.spec_from_file_location(
            fullname, source, submodule_search_locations=search
        )


def install_guard() -> None:
    """Read the manifest; if a compiled module's source changed since the build, load
    every listed module from source (see the module docstring). Never raises: a missing
    or unreadable manifest means nothing was compiled here."""
    global state, changed
    try:
        lines = MANIFEST_FILE.read_text(encoding="utf-8").split("\n")
    except (OSError, ValueError):
        return
    built = dict(line.split(" ", 1) for line in lines if line.count(" ") == 1)
    stale = []
    for name, digest in built.items():
        try:
            current = source_digest(_source_of(name))
        except OSError:
            current = ""
        if current != digest:
            stale.append(name)
    if not stale:
        state = "native"
        return
    state, changed = "stale", stale
    sys.meta_path.insert(0, _SourceFirst(set(built)))
    sys.stderr.write(
        f"warden: {len(stale)} module(s) changed since they were compiled "
        f"({', '.join(stale[:3])}{', …' if len(stale) > 3 else ''}); running the "
        "compiled modules as Python. Rebuild them: pip install -e .\n"
    )
