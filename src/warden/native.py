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
#: ``"stale"`` only: the compiled modules whose source differs from what was compiled, or
#: all of them when the build's manifest is missing or damaged.
changed: list[str] = []
#: ``"stale"`` only: why, as said on stderr (``warden doctor`` repeats it).
reason = ""


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


def _compiled_here(names: list[str]) -> list[str]:
    """The listed modules that have a compiled file beside their source."""
    from importlib.machinery import EXTENSION_SUFFIXES

    suffix = EXTENSION_SUFFIXES[0]  # mypyc builds with the full platform tag
    found = []
    for name in names:
        source = _source_of(name)
        stem = source.parent / "__init__" if source.name == "__init__.py" else source
        if stem.with_name(stem.stem + suffix).exists():
            found.append(name)
    return found


def _read_manifest() -> dict[str, str] | None:
    """The build's ``{module: sha256}``; None when the file is missing, not UTF-8, or
    holds a line that is not ``<module> <64 hex digits>``."""
    try:
        text = MANIFEST_FILE.read_text(encoding="utf-8")
    except (OSError, ValueError):
        return None
    built = {}
    for line in text.splitlines():
        name, _, digest = line.partition(" ")
        if not name.startswith("warden.") or len(digest) != 64 or digest.strip("0123456789abcdef"):
            return None
        built[name] = digest
    return built


def install_guard() -> None:
    """Decide :data:`state`; if compiled modules are here but their sources changed
    since the build, or the build's manifest is missing or damaged, load every listed
    module from source (see the module docstring). Never raises."""
    global state, changed, reason
    try:
        listed = [module_name(p) for p in listed_paths()]
    except (OSError, ValueError):
        return
    compiled = _compiled_here(listed)
    if not compiled:
        return
    built = _read_manifest()
    if built is None or not set(compiled) <= set(built):
        why = "the build's record of its sources (native_build.txt) is missing or damaged"
        stale = compiled
    else:
        stale = []
        for name in compiled:
            try:
                current = source_digest(_source_of(name))
            except OSError:
                current = ""
            if current != built[name]:
                stale.append(name)
        if not stale:
            state = "native"
            return
        shown = ", ".join(stale[:3]) + (", …" if len(stale) > 3 else "")
        why = f"{len(stale)} module(s) changed since they were compiled ({shown})"
    state, changed, reason = "stale", stale, why
    sys.meta_path.insert(0, _SourceFirst(set(listed)))
    sys.stderr.write(
        f"warden: {why}; running the compiled modules as Python. Rebuild them: pip install -e .\n"
    )
